package actions

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"path/filepath"
	"strings"
	"time"

	"github.com/finalizer-dev/finalizer/control"
	"github.com/finalizer-dev/finalizer/progress"
)

// Event is what every action announces for one period that became final:
// the JSON body of the webhook and of the NATS message, and the marker
// file's content.
type Event struct {
	// ID is unique per table, period and generation: an event delivered
	// twice (at least once) carries the same ID; a period announced again
	// after a rewind carries a new one.
	ID    string `json:"id"`
	Table string `json:"table"`
	// PeriodStart and PeriodEnd bound the period [start, end) that became
	// final, in UTC.
	PeriodStart time.Time `json:"period_start"`
	PeriodEnd   time.Time `json:"period_end"`
	Granularity string    `json:"granularity"`
	// FinalizedUntil is the verdict after the move that made it final.
	FinalizedUntil time.Time `json:"finalized_until"`
	// QueryID, RunID and BatchID are the provenance of that move: the
	// feeder that holds the table (ADR 0015) and its batch.
	QueryID string `json:"query_id,omitempty"`
	RunID   string `json:"run_id,omitempty"`
	BatchID int64  `json:"batch_id"`
	// MovedAt is when the move was committed.
	MovedAt time.Time `json:"moved_at"`
	// Generation counts the table's rewinds before the move.
	Generation int64 `json:"generation"`
	// Again is true when the period had been announced before and a
	// rewind (ADR 0019) took it back: it is final again.
	Again bool `json:"again"`
	// First is true for the event of a table's first verdict: only the
	// period that ends at the verdict is announced, not all of history.
	First bool `json:"first,omitempty"`
	// Withdrawn is set on the events a rewind queues for marker actions
	// only: the period is no longer final, and its marker is removed
	// (ordered before the period's announcement again).
	Withdrawn bool `json:"withdrawn,omitempty"`
}

// EventID is the id of the event of table's period starting at start in
// generation gen: 32 hex digits of a SHA-256 over the three.
func EventID(table string, start time.Time, gen int64) string {
	h := sha256.New()
	fmt.Fprintf(h, "%s\x00%s\x00%d", table, start.UTC().Format(time.RFC3339Nano), gen)
	return hex.EncodeToString(h.Sum(nil)[:16])
}

// MaxPeriodsPerMove bounds the events one move announces per action: a
// move over more periods (a table whose verdict jumps a year of minutes)
// announces the newest ones, and the oldest are left unannounced and
// counted (the verdict says they are final all the same).
const MaxPeriodsPerMove = 100000

// Periods returns the periods [start, end) a move from from to to made
// final, in order: every period from from up to to, or, for a first
// verdict (from zero), the one that ends at to. At most
// MaxPeriodsPerMove: beyond it the newest, with the number left out.
func Periods(from, to time.Time, g progress.Granularity, loc *time.Location) (periods [][2]time.Time, skipped int) {
	if !to.After(from) {
		return nil, 0
	}
	if from.IsZero() {
		// The first verdict: the period that ends at it. Floor(to - 1ns)
		// is its start.
		s := progress.Floor(to.Add(-time.Nanosecond), g, loc)
		if s.IsZero() {
			return nil, 0
		}
		return [][2]time.Time{{s, to}}, 0
	}
	start := progress.Floor(from, g, loc)
	if start.Before(from) {
		// from is not a boundary (the granularity changed): the period
		// that holds it was not final before, and is now if it ends by to.
		start = from
	}
	for s := start; s.Before(to); {
		e := progress.Next(s, g, loc)
		if e.IsZero() || e.After(to) {
			break
		}
		periods = append(periods, [2]time.Time{s, e})
		if len(periods) > MaxPeriodsPerMove {
			periods = periods[1:]
			skipped++
		}
		s = e
	}
	return periods, skipped
}

// expand builds the sends of one move for the rule's actions.
func expand(r *Rule, m control.Move) ([]control.Send, int, error) {
	periods, skipped := Periods(m.From, m.To, r.Granularity, r.Location)
	sends, err := sendsOf(r, m, periods, func(*Action) bool { return true }, func(p [2]time.Time) Event {
		return Event{
			ID:    EventID(m.Table, p[0], m.Generation),
			Table: m.Table, PeriodStart: p[0].UTC(), PeriodEnd: p[1].UTC(),
			Granularity: r.Granularity.String(), FinalizedUntil: m.To.UTC(),
			QueryID: m.QueryID, RunID: m.RunID, BatchID: m.BatchID, MovedAt: m.MovedAt.UTC(),
			Generation: m.Generation,
			Again:      m.Generation > 0 && !p[1].After(m.HighWater),
			First:      m.From.IsZero(),
		}
	})
	return sends, skipped, err
}

// withdraw returns the events of a rewind (m.To before m.From) for r's
// marker actions: one per period that was announced final (ending after
// m.To, up to the table's high water, the furthest verdict announced) and
// is not final any more, so that its marker is removed before the period
// is announced again. The other kinds get none: a rewind's NOTIFY and the
// again flag of the next announcement tell their readers.
func withdraw(r *Rule, m control.Move) ([]control.Send, int, error) {
	high := m.HighWater
	if m.From.After(high) {
		high = m.From
	}
	periods, skipped := Periods(m.To, high, r.Granularity, r.Location)
	markers := func(a *Action) bool { return a.Kind == KindMarker }
	sends, err := sendsOf(r, m, periods, markers, func(p [2]time.Time) Event {
		return Event{
			// -generation: never the id of an announcement (generations
			// are 0 and up), and one per rewind.
			ID:    EventID(m.Table, p[0], -m.Generation),
			Table: m.Table, PeriodStart: p[0].UTC(), PeriodEnd: p[1].UTC(),
			Granularity: r.Granularity.String(), FinalizedUntil: m.To.UTC(),
			MovedAt: m.MovedAt.UTC(), Generation: m.Generation, Withdrawn: true,
		}
	})
	return sends, skipped, err
}

// sendsOf builds one send per period and action of r that want takes (an
// action key once), each carrying the period's event as event builds it.
func sendsOf(r *Rule, m control.Move, periods [][2]time.Time, want func(*Action) bool, event func([2]time.Time) Event) ([]control.Send, error) {
	var sends []control.Send
	for _, p := range periods {
		ev := event(p)
		body, err := json.Marshal(ev)
		if err != nil {
			return nil, err
		}
		seen := map[string]bool{}
		for _, a := range r.Actions {
			if !want(a) || seen[a.Key] {
				continue
			}
			seen[a.Key] = true
			sends = append(sends, control.Send{Action: a.Key, EventID: ev.ID, Table: m.Table,
				PeriodStart: p[0], PeriodEnd: p[1], Payload: body, MovedAt: m.MovedAt})
		}
	}
	return sends, nil
}

// Subject returns the NATS subject of table's events under prefix
// (<api prefix>.final): the table's name as tokens, with each byte that a
// subject cannot hold (space, control characters, *, >, a byte that is not
// ASCII) and each empty token written as %XX, so every table has its own
// subject and `<prefix>.bronze.>` matches a schema's tables.
func Subject(prefix, table string) string {
	tokens := strings.Split(table, ".")
	for i, t := range tokens {
		if t == "" {
			tokens[i] = "%00"
			continue
		}
		var b strings.Builder
		for j := 0; j < len(t); j++ {
			c := t[j]
			if c <= ' ' || c >= 0x7f || c == '*' || c == '>' || c == '%' {
				fmt.Fprintf(&b, "%%%02X", c)
				continue
			}
			b.WriteByte(c)
		}
		tokens[i] = b.String()
	}
	return prefix + "." + strings.Join(tokens, ".")
}

// pathElement escapes table so that it is exactly one path element: every
// byte but letters, digits, '.', '-' and '_' as %XX, and a name of dots
// only (".", "..") in full.
func pathElement(table string) string {
	var b strings.Builder
	dots := strings.Trim(table, ".") == ""
	for i := 0; i < len(table); i++ {
		c := table[i]
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9', c == '-', c == '_', c == '.' && !dots:
			b.WriteByte(c)
		default:
			fmt.Fprintf(&b, "%%%02X", c)
		}
	}
	if b.Len() == 0 {
		return "%00"
	}
	return b.String()
}

// MarkerPath is the marker file of table's period starting at start under
// the template, in loc's wall clock.
func MarkerPath(template, table string, start time.Time, g progress.Granularity, loc *time.Location) string {
	if loc == nil {
		loc = time.UTC
	}
	lt := start.In(loc)
	period := lt.Format("2006-01-02T15")
	switch g {
	case progress.Day:
		period = lt.Format("2006-01-02")
	case progress.Minute:
		period = lt.Format("2006-01-02T15-04")
	}
	p := strings.NewReplacer(
		"{table}", pathElement(table),
		"{period}", period,
		"{date}", lt.Format("2006-01-02"),
		"{year}", lt.Format("2006"),
		"{month}", lt.Format("01"),
		"{day}", lt.Format("02"),
		"{hour}", lt.Format("15"),
		"{minute}", lt.Format("04"),
	).Replace(template)
	return filepath.Clean(p)
}
