// Package progress knows the shapes of Spark Structured Streaming listener
// events and how to read a period boundary out of them. It does no I/O.
package progress

import (
	"encoding/json"
	"time"
)

// Kind is the kind of a streaming query listener event. The zero value,
// KindUnknown, means "not known yet" (for example a line of an event log
// whose kind comes from its "Event" field).
type Kind uint8

// The event kinds, in the order a run posts them.
const (
	KindUnknown Kind = iota
	KindStarted
	KindProgress
	KindIdle
	KindTerminated
)

var kindNames = [...]string{"unknown", "started", "progress", "idle", "terminated"}

// String returns the subject token of k ("started", "progress", "idle",
// "terminated"), or "unknown".
func (k Kind) String() string {
	if int(k) < len(kindNames) {
		return kindNames[k]
	}
	return "unknown"
}

// ParseKind returns the Kind named by a subject token. It returns
// KindUnknown and false for any other string.
func ParseKind(s string) (Kind, bool) {
	for i := KindStarted; int(i) < len(kindNames); i++ {
		if kindNames[i] == s {
			return i, true
		}
	}
	return KindUnknown, false
}

// Event is one listener event of a streaming query run, decoded from either
// JSON form Spark writes. Fields a kind does not carry are zero.
type Event struct {
	Kind    Kind
	QueryID string // the query's id, lowercase UUID
	RunID   string // the run's id, lowercase UUID
	Name    string // the query's name; "" when null or absent

	// Timestamp is the event's own timestamp (started, progress, idle);
	// zero for terminated events and when absent.
	Timestamp time.Time

	// BatchID is the progress's batch id; -1 for other kinds.
	BatchID int64

	// Sources are the progress's sources, in Spark's order.
	Sources []Source

	// Watermark is eventTime.watermark as Spark wrote it ("" when absent).
	Watermark string

	// Exception and ErrorClass describe a terminated run's failure; both are
	// "" when it stopped cleanly.
	Exception  string
	ErrorClass string
}

// Source is one entry of a progress's sources.
type Source struct {
	Description string
	// StartOffset and EndOffset hold the offsets as compact JSON, whatever
	// form the event carried them in: nested JSON and numbers as they were
	// (numbers keep every digit); a string holding JSON is unwrapped (the
	// event-log form), a string that does not is kept as a JSON string.
	// They are nil when the offset was null (or a string holding null) or
	// absent. Parse gives each its own copy, with its capacity clipped.
	StartOffset json.RawMessage
	EndOffset   json.RawMessage
}

// Newer reports whether e is at least as new as old within one run: a later
// batch, or the same batch with a timestamp no earlier. A nil old is older
// than anything. Both must be progress events of the same run.
func (e *Event) Newer(old *Event) bool {
	if old == nil {
		return true
	}
	if e.BatchID != old.BatchID {
		return e.BatchID > old.BatchID
	}
	return !e.Timestamp.Before(old.Timestamp)
}
