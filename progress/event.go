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

	// Executed is true when the progress reports a batch that ran: its
	// durationMs has an "addBatch" entry, which Spark records only while
	// it runs a batch. Spark 3.0-3.4 also post a progress for a trigger
	// that ran nothing (every noDataProgressEventInterval); it has none,
	// and its watermark is already the next batch's (ADR 0012).
	Executed bool

	// TriggerExecutionMs is durationMs.triggerExecution: how long the
	// trigger ran from its start (Timestamp, which Spark stamps when the
	// trigger starts: ProgressReporter's finishTrigger,
	// formatTimestamp(currentTriggerStartTimestamp)) until just before
	// Spark posted the progress, in milliseconds of the driver's clock; 0
	// when absent, not a count, or beyond an int32 (24 days). It fills the
	// padding after Executed: Event keeps its size.
	TriggerExecutionMs int32

	// NumInputRows is the progress's numInputRows, the sum over its
	// sources as Spark computes it; -1 when a source's count is unknown.
	NumInputRows int64

	// StateOperators are the progress's stateOperators: nil when the
	// progress carries none (not a shape Spark writes), empty when Spark
	// wrote [] (a query without a stateful operator).
	StateOperators []StateOperator

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
	// LatestOffset is the newest offset the source had when the batch was
	// planned (Spark 3.2+, for sources that report it: Kafka, rate, ...),
	// normalised like EndOffset; nil when absent or null.
	LatestOffset json.RawMessage
	// NumInputRows is the source's numInputRows; -1 when absent.
	NumInputRows int64
}

// StateOperator is one entry of a progress's stateOperators.
type StateOperator struct {
	// Name is operatorName (Spark 3.1+): stateStoreSave, dedupe,
	// symmetricHashJoin, flatMapGroupsWithState, ...; "" when absent.
	Name string
	// RowsDroppedByWatermark is numRowsDroppedByWatermark (numLateInputs
	// before Spark 3.1); -1 when absent.
	RowsDroppedByWatermark int64
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

// RowsDroppedByWatermark is the sum of the stateful operators'
// numRowsDroppedByWatermark: input rows the watermark dropped as late in
// this batch (0 when none is known).
func (e *Event) RowsDroppedByWatermark() int64 {
	var n int64
	for _, op := range e.StateOperators {
		if op.RowsDroppedByWatermark > 0 {
			n += op.RowsDroppedByWatermark
		}
	}
	return n
}

// Posted is when Spark posted the progress, by its driver's clock: its
// trigger's start (Timestamp) plus the trigger's run (TriggerExecutionMs);
// zero when Timestamp is. A batch that started before an operator's
// rewind and committed after it was posted after it (ADR 0019, addendum
// of 2026-12-06).
func (e *Event) Posted() time.Time {
	if e.Timestamp.IsZero() {
		return time.Time{}
	}
	return e.Timestamp.Add(time.Duration(e.TriggerExecutionMs) * time.Millisecond)
}

// PostedSkew is how far a driver's clock may run ahead of the clock that
// stored or heard its progress (the NATS server's, this service's) and
// the progress's posted time still be believed (PostedBy): a few seconds
// of skew between two servers synchronised by NTP.
const PostedSkew = 5 * time.Second

// PostedBy is Posted, bounded by seen: when the stream stored the
// progress or, with no stored time, when this service heard it. A
// progress cannot have been posted after it was stored: when Timestamp
// plus TriggerExecutionMs is later than seen plus PostedSkew, the
// duration is not believed (readMillis takes up to an int32 of
// milliseconds, 24.8 days: a hostile or broken duration would carry a
// progress from before a rewind past it) and the time is Timestamp
// alone, the safe side. With seen zero (neither time known) it is
// Timestamp alone. Zero when Timestamp is (ADR 0019, addendum of
// 2026-12-06).
func (e *Event) PostedBy(seen time.Time) time.Time {
	if e.Timestamp.IsZero() || seen.IsZero() {
		return e.Timestamp
	}
	if p := e.Posted(); !p.After(seen.Add(PostedSkew)) {
		return p
	}
	return e.Timestamp
}
