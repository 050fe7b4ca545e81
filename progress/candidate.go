package progress

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strconv"
	"strings"
	"time"
)

// Candidate is what a progress says about a table's verdict under a Spec.
type Candidate struct {
	// Until is the verdict the progress supports: the UTC start of the
	// period holding Time - Delay. Every period ending at or before it is
	// complete; the period holding Time is not.
	Until time.Time
	// Time is the time read from the progress, in UTC.
	Time time.Time
	// Source is the index of the source whose EndOffset is reported: the
	// one with the earliest time under SourceAll with TimeOffset, else the
	// Spec's Source (SourceAll with the other time kinds).
	Source int
	// EndOffset is that source's endOffset (it shares memory with the
	// Event). Under SourceAll with TimeWatermark or TimeTrigger it is a
	// JSON array of every source's endOffset.
	EndOffset json.RawMessage
}

// epoch is the watermark Spark reports before any watermark exists.
var epoch = time.Unix(0, 0)

// Outcome says what a Spec made of a progress: a candidate, or why not.
type Outcome uint8

// The outcomes of Spec.Evaluate. Every one but OK gives no candidate.
const (
	// OK: the progress gives a candidate.
	OK Outcome = iota
	// NoTime: the progress has no usable time (see Candidate).
	NoTime
	// Implausible: the time is a JSON number that is no plausible time in
	// the Spec's unit (ErrImplausible).
	Implausible
	// NotExecuted: a watermark from a progress whose trigger ran no batch
	// (Spark 3.0-3.4 post one every noDataProgressEventInterval); its
	// watermark is already the next batch's.
	NotExecuted
	// WatermarkUnbounded: a watermark from a query whose stateful operators
	// do not bound its output by the watermark (none at all, a
	// stream-stream join, flatMapGroupsWithState, ...), without
	// LateRowsFiltered.
	WatermarkUnbounded
	// NotCaughtUp: a trigger time from a progress where a tracked source's
	// endOffset differs from its latestOffset, or the source reports no
	// latestOffset, without ProcessingTime: rows stamped before the
	// trigger may still wait in the source.
	NotCaughtUp
)

var outcomeNames = [...]string{"ok", "no_time", "implausible", "not_executed", "watermark_unbounded", "not_caught_up"}

// String returns the outcome's metric label: ok, no_time, implausible,
// not_executed, watermark_unbounded, not_caught_up.
func (o Outcome) String() string {
	if int(o) < len(outcomeNames) {
		return outcomeNames[o]
	}
	return "outcome(" + strconv.Itoa(int(o)) + ")"
}

// The stateful operators whose output Spark bounds by the watermark: an
// operator's output watermark is its input watermark
// (StateStoreWriter.produceOutputWatermark), a windowed aggregation emits
// a window once the watermark passes its end, and late input is dropped.
// Any other operator, or one without a name (Spark before 3.1), makes a
// watermark unusable without LateRowsFiltered (ADR 0012).
var boundedOperators = map[string]bool{
	"stateStoreSave":                  true, // streaming aggregation
	"sessionWindowStateStoreSaveExec": true, // session windows
	"dedupe":                          true, // dropDuplicates
	"dedupeWithinWatermark":           true, // dropDuplicatesWithinWatermark
}

// NoWatermarkYet is Evaluate's reason for a watermark that is the epoch:
// Spark's "no watermark yet", normal at the start of a query (and so not
// worth a warning).
const NoWatermarkYet = "no watermark yet"

// Candidate returns the candidate verdict of a progress event, and false
// when Evaluate gives any outcome but OK. It returns false, not an
// error, when the event has no usable time: it is not a progress; it has
// no sources, or the Spec's source index is out of range; under TimeOffset
// the pointer finds nothing or no readable time (see ParseTimeIn) in that
// source's endOffset, or, under SourceAll, in any one source's (never run
// ahead of the slowest source); under SourceByDescription no source or
// several match; under TimeWatermark the watermark is
// absent, unreadable or the epoch (Spark's "no watermark yet"); under
// TimeTrigger the timestamp is zero; or s is not valid (a zero TimeKind or
// Granularity, a negative Source other than SourceAll, a bad Pointer).
func (s Spec) Candidate(ev *Event) (Candidate, bool) {
	c, o, _ := s.Evaluate(ev)
	return c, o == OK
}

// Evaluate returns the candidate verdict of a progress event, or the
// outcome that says why there is none and a reason in words (for logs and
// status). Besides NoTime (see Candidate) it applies the guards of ADR
// 0012: Implausible numeric times; under TimeWatermark, NotExecuted for a
// progress whose trigger ran no batch and, without LateRowsFiltered,
// WatermarkUnbounded unless every stateful operator is one whose output
// the watermark bounds; under TimeTrigger without ProcessingTime,
// NotCaughtUp unless every tracked source (the Spec's source, or all) has
// a latestOffset equal to its endOffset.
func (s Spec) Evaluate(ev *Event) (Candidate, Outcome, string) {
	if ev == nil || ev.Kind != KindProgress || !s.Granularity.valid() {
		return Candidate{}, NoTime, "not a progress"
	}
	if len(ev.Sources) == 0 {
		return Candidate{}, NoTime, "the progress has no sources"
	}
	if s.Source != SourceAll {
		// An index, or the one source the description picks.
		i, n := s.PickSource(ev)
		if n != 1 {
			if s.Source == SourceByDescription {
				return Candidate{}, NoTime, fmt.Sprintf("%d sources match description %q, want exactly one", n, s.Description)
			}
			return Candidate{}, NoTime, fmt.Sprintf("source %d: the progress has %d sources", s.Source, len(ev.Sources))
		}
		s.Source = i
	}
	var c Candidate
	switch s.Time {
	case TimeOffset:
		// On the stack for the usual pointers (a few tokens): Evaluate runs
		// for every progress, and a slice per call was its one allocation
		// (issue 12).
		var room [4]string
		tokens, err := appendPointer(room[:0], s.Pointer)
		if err != nil {
			return Candidate{}, NoTime, "bad pointer"
		}
		first, last := s.Source, s.Source
		if s.Source == SourceAll {
			first, last = 0, len(ev.Sources)-1
		}
		for i := first; i <= last; i++ {
			src := ev.Sources[i]
			t, o, why := s.offsetTime(src.EndOffset, tokens)
			if o != OK {
				return Candidate{}, o, fmt.Sprintf("source %d: %s", i, why)
			}
			if i == first || t.Before(c.Time) {
				c = Candidate{Time: t, Source: i, EndOffset: src.EndOffset}
			}
		}
	case TimeWatermark:
		if !ev.Executed {
			return Candidate{}, NotExecuted, "the progress reports a trigger that ran no batch (no addBatch in durationMs); its watermark is the next batch's"
		}
		if !s.LateRowsFiltered {
			if why := unboundedBy(ev.StateOperators); why != "" {
				return Candidate{}, WatermarkUnbounded, why + "; set late_rows_filtered: true only if the table never receives a row older than the watermark"
			}
		}
		if ev.Watermark == "" {
			return Candidate{}, NoTime, "the progress has no eventTime.watermark"
		}
		t, ok := parseTimeBytes([]byte(ev.Watermark))
		if !ok || t.Equal(epoch) {
			return Candidate{}, NoTime, NoWatermarkYet
		}
		c = s.reported(ev, t)
	case TimeTrigger:
		if ev.Timestamp.IsZero() {
			return Candidate{}, NoTime, "the progress has no timestamp"
		}
		if !s.ProcessingTime {
			if why := s.behind(ev); why != "" {
				return Candidate{}, NotCaughtUp, why + "; set processing_time: true only if the table's time column is current_timestamp()"
			}
		}
		c = s.reported(ev, ev.Timestamp.UTC())
	default:
		return Candidate{}, NoTime, "no time kind"
	}
	c.Until = Floor(c.Time.Add(-s.Delay), s.Granularity, s.location())
	return c, OK, ""
}

// unboundedBy says why the stateful operators do not bound the output by
// the watermark, or "" when they do.
func unboundedBy(ops []StateOperator) string {
	if len(ops) == 0 {
		return "the query has no stateful operator, and Spark drops no late row without one"
	}
	for _, op := range ops {
		if !boundedOperators[op.Name] {
			if op.Name == "" {
				return "a stateful operator has no operatorName (Spark before 3.1), so it may be a join or flatMapGroupsWithState"
			}
			return fmt.Sprintf("stateful operator %s: its output is not bounded by the progress's watermark", op.Name)
		}
	}
	return ""
}

// behind says which tracked source has not caught up, or "" when all have.
func (s Spec) behind(ev *Event) string {
	first, last := s.Source, s.Source
	if s.Source == SourceAll {
		first, last = 0, len(ev.Sources)-1
	}
	for i := first; i <= last; i++ {
		src := ev.Sources[i]
		if src.LatestOffset == nil {
			return fmt.Sprintf("source %d reports no latestOffset, so rows stamped before the trigger may still wait in it", i)
		}
		if !sameJSON(src.EndOffset, src.LatestOffset) {
			return fmt.Sprintf("source %d is behind (endOffset differs from latestOffset: maxOffsetsPerTrigger, maxFilesPerTrigger, a backlog)", i)
		}
	}
	return ""
}

// sameJSON reports whether two JSON documents are equal as values (object
// key order aside; numbers compared as written).
func sameJSON(a, b json.RawMessage) bool {
	if bytes.Equal(a, b) {
		return true
	}
	var va, vb any
	da, db := json.NewDecoder(bytes.NewReader(a)), json.NewDecoder(bytes.NewReader(b))
	da.UseNumber()
	db.UseNumber()
	if da.Decode(&va) != nil || db.Decode(&vb) != nil {
		return false
	}
	return reflect.DeepEqual(va, vb)
}

// reported fills in the source and end offset of a watermark or trigger
// candidate.
func (s Spec) reported(ev *Event, t time.Time) Candidate {
	if s.Source != SourceAll {
		return Candidate{Time: t, Source: s.Source, EndOffset: ev.Sources[s.Source].EndOffset}
	}
	buf := []byte{'['}
	for i, src := range ev.Sources {
		if i > 0 {
			buf = append(buf, ',')
		}
		if src.EndOffset == nil {
			buf = append(buf, "null"...)
		} else {
			buf = append(buf, src.EndOffset...)
		}
	}
	return Candidate{Time: t, Source: SourceAll, EndOffset: append(buf, ']')}
}

// offsetTime reads the time at the pointer in one endOffset.
func (s Spec) offsetTime(off json.RawMessage, tokens []string) (time.Time, Outcome, string) {
	if off == nil {
		return time.Time{}, NoTime, "endOffset is null"
	}
	v, ok := lookupPointer(off, tokens)
	if !ok {
		return time.Time{}, NoTime, fmt.Sprintf("pointer %q finds nothing in endOffset", s.Pointer)
	}
	t, err := ParseTimeIn(v, s.Unit, s.NaiveLocation)
	switch {
	case errors.Is(err, ErrImplausible):
		return time.Time{}, Implausible, err.Error()
	case err != nil:
		return time.Time{}, NoTime, err.Error()
	}
	return t, OK, ""
}

// splitPointer splits an RFC 6901 JSON Pointer into its unescaped
// reference tokens. "" is the whole document.
func splitPointer(p string) ([]string, error) { return appendPointer(nil, p) }

// appendPointer is splitPointer appending the tokens to dst.
func appendPointer(dst []string, p string) ([]string, error) {
	if p == "" {
		return dst, nil
	}
	if p[0] != '/' {
		return nil, errors.New(`a JSON Pointer starts with "/"`)
	}
	for rest, more := p[1:], true; more; {
		var tok string
		tok, rest, more = strings.Cut(rest, "/")
		for j := 0; j < len(tok); j++ {
			if tok[j] == '~' && (j+1 == len(tok) || (tok[j+1] != '0' && tok[j+1] != '1')) {
				return nil, errors.New(`"~" in a JSON Pointer must be followed by 0 or 1`)
			}
		}
		if strings.IndexByte(tok, '~') >= 0 {
			tok = strings.ReplaceAll(strings.ReplaceAll(tok, "~1", "/"), "~0", "~")
		}
		dst = append(dst, tok)
	}
	return dst, nil
}

// lookupPointer returns the value the reference tokens point at in doc,
// or false when doc is not valid JSON or the pointer finds nothing. In an
// object with a repeated key the last one counts, as in encoding/json.
func lookupPointer(doc []byte, tokens []string) ([]byte, bool) {
	i := skipWS(doc, 0)
	end, err := skipValue(doc, i, 0)
	if err != nil || skipWS(doc, end) != len(doc) {
		return nil, false
	}
	v := span{i, end}
	for _, tok := range tokens {
		var next span
		switch doc[v.s] {
		case '{':
			_, _ = eachMember(doc, v.s, 0, func(key []byte, esc bool, m span) error {
				if keyIs(key, esc, tok) {
					next = m
				}
				return nil
			})
		case '[':
			idx, ok := arrayIndex(tok)
			if !ok {
				return nil, false
			}
			n := 0
			_, _ = eachElement(doc, v.s, 0, func(el span) error {
				if n == idx {
					next = el
					return errStop
				}
				n++
				return nil
			})
		}
		if !next.present() {
			return nil, false
		}
		v = next
	}
	return doc[v.s:v.e], true
}

// errStop ends a walk early.
var errStop = errors.New("stop")

// arrayIndex reads an RFC 6901 array index: "0" or digits without a
// leading zero. "-" (past the end) and anything else find nothing.
func arrayIndex(tok string) (int, bool) {
	if tok == "" || len(tok) > 9 || (tok[0] == '0' && len(tok) > 1) {
		return 0, false
	}
	n := 0
	for i := 0; i < len(tok); i++ {
		c := tok[i]
		if c < '0' || c > '9' {
			return 0, false
		}
		n = n*10 + int(c-'0')
	}
	return n, true
}
