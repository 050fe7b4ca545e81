package progress

import (
	"bytes"
	"encoding/json"
	"fmt"
	"time"
	"unicode/utf8"
)

// The Event classes of the event-log form, by their simple names.
const (
	classStarted    = "QueryStartedEvent"
	classProgress   = "QueryProgressEvent"
	classIdle       = "QueryIdleEvent"
	classTerminated = "QueryTerminatedEvent"
)

// Parse decodes one listener event in either JSON form Spark writes
// (docs/contract.md §2). kind is the kind the caller expects, from the NATS
// subject; KindUnknown when it does not know (an event-log line).
//
// Event-log (Jackson) form: the document has an "Event" field naming a
// class; the simple name after the last '$' (or, without one, after the
// last '.') selects the kind: QueryStartedEvent, QueryProgressEvent (the
// progress is under "progress"), QueryIdleEvent, QueryTerminatedEvent. Any
// other class gives ErrIgnored; a class that differs from a known kind
// gives ErrKindMismatch.
//
// Listener (json4s) form: no "Event" field; the document is the event
// itself (a StreamingQueryProgress for a progress). The kind is the
// caller's. When the caller passes KindUnknown, Parse infers it from the
// keys present, whatever their values: "batchId" or "sources" means progress;
// "exception" or "errorClassOnException" means terminated; "name" means
// started; anything else is idle.
//
// Every kind needs "id" and "runId" as UUIDs (returned in lowercase), and a
// progress needs an integer "batchId"; otherwise the error wraps
// ErrMalformed, as it does for invalid JSON, a field of the wrong type, a
// key it reads repeated in one object, and an offset holding invalid UTF-8. A missing or unreadable "timestamp"
// leaves Timestamp zero. Fields a kind does not carry (see Event) are not
// read, and unknown fields are ignored. Offsets are normalised as
// documented on Source; the Event shares no memory with data.
func Parse(data []byte, kind Kind) (*Event, error) {
	if kind > KindTerminated {
		return nil, fmt.Errorf("%w: kind %d is not a known kind", ErrKindMismatch, kind)
	}
	i := skipWS(data, 0)
	if i >= len(data) || data[i] != '{' {
		return nil, malformed("want a JSON object")
	}
	var top fields
	end, err := top.scan(data, i, false)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrMalformed, err)
	}
	if skipWS(data, end) != len(data) {
		return nil, malformed("trailing data after the JSON object")
	}
	body := &top
	switch {
	case top.event.present():
		tok := data[top.event.s:top.event.e]
		if tok[0] != '"' {
			return nil, malformed(`"Event" is not a string`)
		}
		class := eventClass(tok)
		k := classKind(class)
		if k == KindUnknown {
			return nil, fmt.Errorf("%w: Event class %q", ErrIgnored, clip(string(class)))
		}
		if kind != KindUnknown && kind != k {
			return nil, fmt.Errorf("%w: want %s, got Event class %s", ErrKindMismatch, kind, clip(string(class)))
		}
		kind = k
		if k == KindProgress {
			p := top.progress
			if !p.present() || data[p.s] != '{' {
				return nil, malformed(`QueryProgressEvent without a "progress" object`)
			}
			var pf fields
			if _, err := pf.scan(data, p.s, true); err != nil {
				return nil, fmt.Errorf("%w: %w", ErrMalformed, err)
			}
			body = &pf
		}
	case kind == KindUnknown:
		kind = top.inferKind()
	}
	return build(data, body, kind)
}

// fields holds the spans of the members Parse reads from one object. A
// key Parse reads may appear once: a repeated one is malformed.
type fields struct {
	event, progress                     span
	id, runID, name, timestamp, batchID span
	sources, eventTime                  span
	exception, errorClass               span
	description, startOffset, endOffset span // of a source
	latestOffset, numInputRows          span // of a source
	watermark                           span // of eventTime
	durationMs, stateOperators          span
	addBatch                            span // of durationMs
	operatorName, rowsDropped, late     span // of a state operator
}

// scan validates the object at d[i] and records its members' spans. With
// trusted, the object lies inside JSON already validated and is only
// walked (see eachMemberTrusted).
func (f *fields) scan(d []byte, i int, trusted bool) (int, error) {
	if trusted {
		return eachMemberTrusted(d, i, f.member)
	}
	return eachMember(d, i, 0, f.member)
}

// member records one member's span when Parse reads it; a member it
// reads that is repeated in the object is an error.
func (f *fields) member(key []byte, esc bool, v span) error {
	k := key[1 : len(key)-1]
	if esc {
		k = appendUnquoted(nil, key)
	}
	// A key read twice would make a reader that takes the first and one
	// that takes the last disagree (the router's peek and this parser did,
	// and a good progress lost to a duplicated batchId): it is refused.
	set := func(sp *span) error {
		if sp.present() {
			return errAt(v.s, fmt.Sprintf("duplicate key %q", clip(string(k))))
		}
		*sp = v
		return nil
	}
	switch string(k) {
	case "Event":
		return set(&f.event)
	case "progress":
		return set(&f.progress)
	case "id":
		return set(&f.id)
	case "runId":
		return set(&f.runID)
	case "name":
		return set(&f.name)
	case "timestamp":
		return set(&f.timestamp)
	case "batchId":
		return set(&f.batchID)
	case "sources":
		return set(&f.sources)
	case "eventTime":
		return set(&f.eventTime)
	case "exception":
		return set(&f.exception)
	case "errorClassOnException":
		return set(&f.errorClass)
	case "description":
		return set(&f.description)
	case "startOffset":
		return set(&f.startOffset)
	case "endOffset":
		return set(&f.endOffset)
	case "watermark":
		return set(&f.watermark)
	case "latestOffset":
		return set(&f.latestOffset)
	case "numInputRows":
		return set(&f.numInputRows)
	case "durationMs":
		return set(&f.durationMs)
	case "stateOperators":
		return set(&f.stateOperators)
	case "addBatch":
		return set(&f.addBatch)
	case "operatorName":
		return set(&f.operatorName)
	case "numRowsDroppedByWatermark":
		return set(&f.rowsDropped)
	case "numLateInputs": // its name before Spark 3.1
		return set(&f.late)
	}
	return nil
}

// inferKind guesses the kind of a listener-form document from its keys.
func (f *fields) inferKind() Kind {
	switch {
	case f.batchID.present() || f.sources.present():
		// A document with sources is a progress even without a batchId
		// (Spark 2.1/2.2): build then calls it malformed, as it does for
		// a progress from the subject, instead of reading it as a
		// started event because it has a name.
		return KindProgress
	case f.exception.present() || f.errorClass.present():
		return KindTerminated
	case f.name.present():
		return KindStarted
	}
	return KindIdle
}

// eventClass returns the simple name of the class in an "Event" string
// token: what follows the last '$', or without one the last '.'.
func eventClass(tok []byte) []byte {
	s := tok[1 : len(tok)-1]
	if !plainString(s) {
		s = appendUnquoted(nil, tok)
	}
	if j := bytes.LastIndexByte(s, '$'); j >= 0 {
		return s[j+1:]
	}
	if j := bytes.LastIndexByte(s, '.'); j >= 0 {
		return s[j+1:]
	}
	return s
}

func classKind(class []byte) Kind {
	switch string(class) {
	case classStarted:
		return KindStarted
	case classProgress:
		return KindProgress
	case classIdle:
		return KindIdle
	case classTerminated:
		return KindTerminated
	}
	return KindUnknown
}

// build makes the Event of the given kind out of the members of f.
func build(d []byte, f *fields, kind Kind) (*Event, error) {
	var ids [72]byte
	if err := readUUID(d, f.id, "id", ids[:36]); err != nil {
		return nil, err
	}
	if err := readUUID(d, f.runID, "runId", ids[36:]); err != nil {
		return nil, err
	}
	both := string(ids[:])
	ev := &Event{Kind: kind, QueryID: both[:36], RunID: both[36:], BatchID: -1}
	var err error
	switch kind {
	case KindStarted:
		if ev.Name, err = optString(d, f.name, "name"); err != nil {
			return nil, err
		}
		ev.Timestamp = readTimestamp(d, f.timestamp)
	case KindIdle:
		ev.Timestamp = readTimestamp(d, f.timestamp)
	case KindTerminated:
		if ev.Exception, err = optString(d, f.exception, "exception"); err != nil {
			return nil, err
		}
		if ev.ErrorClass, err = optString(d, f.errorClass, "errorClassOnException"); err != nil {
			return nil, err
		}
	case KindProgress:
		if ev.Name, err = optString(d, f.name, "name"); err != nil {
			return nil, err
		}
		ev.Timestamp = readTimestamp(d, f.timestamp)
		if !f.batchID.present() {
			return nil, malformed("progress without a batchId")
		}
		n, ok := parseInt64(d[f.batchID.s:f.batchID.e])
		if !ok {
			return nil, malformed(fmt.Sprintf("batchId %s: want an integer", clip(string(d[f.batchID.s:f.batchID.e]))))
		}
		ev.BatchID = n
		if ev.Watermark, err = readWatermark(d, f.eventTime); err != nil {
			return nil, err
		}
		if ev.Sources, err = readSources(d, f.sources); err != nil {
			return nil, err
		}
		ev.NumInputRows = sumInputRows(ev.Sources)
		if ev.Executed, err = readExecuted(d, f.durationMs); err != nil {
			return nil, err
		}
		if ev.StateOperators, err = readStateOperators(d, f.stateOperators); err != nil {
			return nil, err
		}
	}
	return ev, nil
}

// readUUID checks that the member is a UUID string and writes it in
// lowercase to dst (36 bytes).
func readUUID(d []byte, v span, field string, dst []byte) error {
	if !v.present() {
		return malformed(fmt.Sprintf("no %s", field))
	}
	tok := d[v.s:v.e]
	if tok[0] != '"' {
		return malformed(fmt.Sprintf("%s %s: want a UUID string", field, clip(string(tok))))
	}
	s := tok[1 : len(tok)-1]
	if bytes.IndexByte(s, '\\') >= 0 {
		s = appendUnquoted(nil, tok)
	}
	if len(s) != 36 {
		return malformed(fmt.Sprintf("%s %q: want a UUID", field, clip(string(s))))
	}
	for i, c := range s {
		switch i {
		case 8, 13, 18, 23:
			if c != '-' {
				return malformed(fmt.Sprintf("%s %q: want a UUID", field, s))
			}
			dst[i] = c
			continue
		}
		switch {
		case c >= '0' && c <= '9', c >= 'a' && c <= 'f':
			dst[i] = c
		case c >= 'A' && c <= 'F':
			dst[i] = c + ('a' - 'A')
		default:
			return malformed(fmt.Sprintf("%s %q: want a UUID", field, s))
		}
	}
	return nil
}

// optString reads a member that is a string or null; absent and null give
// "".
func optString(d []byte, v span, field string) (string, error) {
	if !v.present() {
		return "", nil
	}
	tok := d[v.s:v.e]
	switch tok[0] {
	case '"':
		return stringValue(tok), nil
	case 'n':
		return "", nil
	}
	return "", malformed(fmt.Sprintf("%s %s: want a string or null", field, clip(string(tok))))
}

// readTimestamp reads the event's timestamp; anything but a readable time
// string gives the zero Time.
func readTimestamp(d []byte, v span) (t time.Time) {
	if !v.present() || d[v.s] != '"' {
		return t
	}
	tok := d[v.s:v.e]
	body := tok[1 : len(tok)-1]
	if !plainString(body) {
		body = appendUnquoted(nil, tok)
	}
	t, _ = parseTimeBytes(body)
	return t
}

// readWatermark reads eventTime.watermark; an absent or null eventTime or
// watermark gives "".
func readWatermark(d []byte, v span) (string, error) {
	if !v.present() || d[v.s] == 'n' {
		return "", nil
	}
	if d[v.s] != '{' {
		return "", malformed(fmt.Sprintf("eventTime %s: want an object", clip(string(d[v.s:v.e]))))
	}
	var et fields
	if _, err := et.scan(d, v.s, true); err != nil {
		return "", fmt.Errorf("%w: %w", ErrMalformed, err)
	}
	return optString(d, et.watermark, "eventTime.watermark")
}

// readSources reads the sources array; absent or null gives nil.
func readSources(d []byte, v span) ([]Source, error) {
	if !v.present() || d[v.s] == 'n' {
		return nil, nil
	}
	if d[v.s] != '[' {
		return nil, malformed(fmt.Sprintf("sources %s: want an array", clip(string(d[v.s:v.e]))))
	}
	var stack [4]fields
	srcs := stack[:0]
	size := 0
	_, err := eachElementTrusted(d, v.s, func(el span) error {
		if d[el.s] != '{' {
			return malformed(fmt.Sprintf("sources[%d] %s: want an object", len(srcs), clip(string(d[el.s:el.e]))))
		}
		var f fields
		if _, err := f.scan(d, el.s, true); err != nil {
			return err
		}
		srcs = append(srcs, f)
		size += f.startOffset.e - f.startOffset.s + f.endOffset.e - f.endOffset.s + f.latestOffset.e - f.latestOffset.s
		return nil
	})
	if err != nil {
		if _, ok := err.(*syntaxError); ok {
			return nil, fmt.Errorf("%w: %w", ErrMalformed, err)
		}
		return nil, err
	}
	if len(srcs) == 0 {
		return nil, nil
	}
	out := make([]Source, len(srcs))
	buf := make([]byte, 0, size)
	for i := range srcs {
		f := &srcs[i]
		if desc := f.description; desc.present() && d[desc.s] != 'n' {
			if d[desc.s] != '"' {
				return nil, malformed(fmt.Sprintf("sources[%d].description %s: want a string or null", i, clip(string(d[desc.s:desc.e]))))
			}
			out[i].Description = stringValue(d[desc.s:desc.e])
		}
		if buf, out[i].StartOffset, err = normOffset(buf, d, f.startOffset, i, "startOffset"); err != nil {
			return nil, err
		}
		if buf, out[i].EndOffset, err = normOffset(buf, d, f.endOffset, i, "endOffset"); err != nil {
			return nil, err
		}
		if buf, out[i].LatestOffset, err = normOffset(buf, d, f.latestOffset, i, "latestOffset"); err != nil {
			return nil, err
		}
		out[i].NumInputRows = readCount(d, f.numInputRows)
	}
	return out, nil
}

// sumInputRows is the progress's numInputRows as Spark computes it (the
// sum over its sources; the event-log form does not write the sum): -1 when
// a source's count is unknown or there are no sources.
func sumInputRows(srcs []Source) int64 {
	if len(srcs) == 0 {
		return -1
	}
	var n int64
	for _, s := range srcs {
		if s.NumInputRows < 0 {
			return -1
		}
		n += s.NumInputRows
	}
	return n
}

// readCount reads a count that Spark writes as an integer; absent, null or
// anything else gives -1 (unknown).
func readCount(d []byte, v span) int64 {
	if !v.present() {
		return -1
	}
	n, ok := parseInt64(d[v.s:v.e])
	if !ok || n < 0 {
		return -1
	}
	return n
}

// readExecuted reports whether durationMs has an "addBatch" entry: Spark
// times addBatch only inside runBatch, so a trigger that ran no batch has
// none (ADR 0012). An absent or null durationMs gives false.
func readExecuted(d []byte, v span) (bool, error) {
	if !v.present() || d[v.s] == 'n' {
		return false, nil
	}
	if d[v.s] != '{' {
		return false, malformed(fmt.Sprintf("durationMs %s: want an object", clip(string(d[v.s:v.e]))))
	}
	var df fields
	if _, err := df.scan(d, v.s, true); err != nil {
		return false, fmt.Errorf("%w: %w", ErrMalformed, err)
	}
	return df.addBatch.present(), nil
}

// readStateOperators reads the stateOperators array: nil when it is
// absent or null, an empty non-nil slice when it is [].
func readStateOperators(d []byte, v span) ([]StateOperator, error) {
	if !v.present() || d[v.s] == 'n' {
		return nil, nil
	}
	if d[v.s] != '[' {
		return nil, malformed(fmt.Sprintf("stateOperators %s: want an array", clip(string(d[v.s:v.e]))))
	}
	ops := []StateOperator{}
	_, err := eachElementTrusted(d, v.s, func(el span) error {
		if d[el.s] != '{' {
			return malformed(fmt.Sprintf("stateOperators[%d] %s: want an object", len(ops), clip(string(d[el.s:el.e]))))
		}
		var f fields
		if _, err := f.scan(d, el.s, true); err != nil {
			return err
		}
		op := StateOperator{RowsDroppedByWatermark: readCount(d, f.rowsDropped)}
		if op.RowsDroppedByWatermark < 0 {
			op.RowsDroppedByWatermark = readCount(d, f.late)
		}
		if n := f.operatorName; n.present() && d[n.s] == '"' {
			op.Name = stringValue(d[n.s:n.e])
		}
		ops = append(ops, op)
		return nil
	})
	if err != nil {
		if _, ok := err.(*syntaxError); ok {
			return nil, fmt.Errorf("%w: %w", ErrMalformed, err)
		}
		return nil, err
	}
	return ops, nil
}

// normOffset appends the normalised offset to buf and returns buf and the
// offset (a slice of buf with its capacity clipped), per Source's rules.
func normOffset(buf, d []byte, v span, i int, field string) ([]byte, json.RawMessage, error) {
	if !v.present() || d[v.s] == 'n' {
		return buf, nil, nil
	}
	tok := d[v.s:v.e]
	start := len(buf)
	if tok[0] == '"' {
		buf = appendUnquoted(buf, tok)
		if inner := buf[start:]; validDocument(inner) {
			buf = appendCompact(buf[:start], inner)
			if string(buf[start:]) == "null" {
				return buf[:start], nil, nil
			}
			return buf, buf[start:len(buf):len(buf)], nil
		}
		buf = buf[:start] // not JSON: keep the string itself
	}
	buf = appendCompact(buf, tok)
	out := buf[start:len(buf):len(buf)]
	if !utf8.Valid(out) {
		return buf[:start], nil, malformed(fmt.Sprintf("sources[%d].%s: invalid UTF-8", i, field))
	}
	return buf, out, nil
}

func malformed(msg string) error { return fmt.Errorf("%w: %s", ErrMalformed, msg) }

// clip shortens s for an error message.
func clip(s string) string {
	const max = 64
	if len(s) <= max {
		return s
	}
	n := max
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n] + "..."
}
