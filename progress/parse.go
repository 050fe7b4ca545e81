package progress

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
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
	p := parser{d: data}
	end, err := p.body(i, 0, &p.top, true)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrMalformed, err)
	}
	if skipWS(data, end) != len(data) {
		return nil, malformed("trailing data after the JSON object")
	}
	top := &p.top
	if top.dup != nil {
		return nil, fmt.Errorf("%w: %w", ErrMalformed, top.dup)
	}
	body := top
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
			if pr := top.progress; !pr.present() || data[pr.s] != '{' {
				return nil, malformed(`QueryProgressEvent without a "progress" object`)
			}
			if p.prog.dup != nil {
				return nil, fmt.Errorf("%w: %w", ErrMalformed, p.prog.dup)
			}
			body = &p.prog
		}
	case kind == KindUnknown:
		kind = top.inferKind()
	}
	return build(data, body, kind)
}

// The keys Parse reads, in any object it reads (a key Parse reads may
// appear once in an object: a repeated one is malformed, wherever Parse
// reads it).
const (
	keyEvent = iota
	keyProgress
	keyID
	keyRunID
	keyName
	keyTimestamp
	keyBatchID
	keySources
	keyEventTime
	keyException
	keyErrorClass
	keyDescription
	keyStartOffset
	keyEndOffset
	keyWatermark
	keyLatestOffset
	keyNumInputRows
	keyDurationMs
	keyStateOperators
	keyAddBatch
	keyTriggerExecution
	keyOperatorName
	keyRowsDropped
	keyLate
	keyOther // a key Parse does not read
)

// keyOf returns the key's number (keyOther for a key Parse does not read).
func keyOf(key []byte, esc bool) int {
	k := key[1 : len(key)-1]
	if esc {
		k = appendUnquoted(nil, key)
	}
	switch string(k) {
	case "Event":
		return keyEvent
	case "progress":
		return keyProgress
	case "id":
		return keyID
	case "runId":
		return keyRunID
	case "name":
		return keyName
	case "timestamp":
		return keyTimestamp
	case "batchId":
		return keyBatchID
	case "sources":
		return keySources
	case "eventTime":
		return keyEventTime
	case "exception":
		return keyException
	case "errorClassOnException":
		return keyErrorClass
	case "description":
		return keyDescription
	case "startOffset":
		return keyStartOffset
	case "endOffset":
		return keyEndOffset
	case "watermark":
		return keyWatermark
	case "latestOffset":
		return keyLatestOffset
	case "numInputRows":
		return keyNumInputRows
	case "durationMs":
		return keyDurationMs
	case "stateOperators":
		return keyStateOperators
	case "addBatch":
		return keyAddBatch
	case "triggerExecution":
		return keyTriggerExecution
	case "operatorName":
		return keyOperatorName
	case "numRowsDroppedByWatermark":
		return keyRowsDropped
	case "numLateInputs": // its name before Spark 3.1
		return keyLate
	}
	return keyOther
}

// keySet notes the keys Parse reads that one object holds, and the first
// one found twice. A key read twice would make a reader that takes the
// first and one that takes the last disagree (the router's peek and this
// parser did, and a good progress lost to a duplicated batchId): it is
// refused, when the object is one Parse reads.
type keySet struct {
	seen uint32
	dup  error
}

// note records key k of the member whose value starts at d[vs].
func (ks *keySet) note(k int, key []byte, esc bool, vs int) {
	if k == keyOther {
		return
	}
	if ks.seen&(1<<k) != 0 {
		if ks.dup == nil {
			name := key[1 : len(key)-1]
			if esc {
				name = appendUnquoted(nil, key)
			}
			ks.dup = errAt(vs, fmt.Sprintf("duplicate key %q", clip(string(name))))
		}
		return
	}
	ks.seen |= 1 << k
}

// parser is the state of one Parse: one validating pass over the document
// that records, as it goes, the members Parse reads at every level it
// reads (the event, the event-log form's progress, its eventTime,
// durationMs, sources and stateOperators), so that nothing is walked
// twice. It lives on the caller's stack.
type parser struct {
	d    []byte
	top  bodyFields // the document
	prog bodyFields // its "progress" object, when it is one
}

// bodyFields is what Parse reads of an event or progress object: the
// spans of its members, and what it found inside the members it descends
// into. Which of them are used depends on the kind, decided after the
// pass; a fault inside a member (a duplicate key, an element of the wrong
// type) is kept and reported only when the member is read.
type bodyFields struct {
	keySet
	event, progress                     span
	id, runID, name, timestamp, batchID span
	sources, eventTime                  span
	exception, errorClass               span
	durationMs, stateOperators          span

	watermark     span  // of eventTime, when it is an object
	eventTimeDup  error // a key read twice in eventTime
	addBatch      bool  // durationMs, when it is an object, has addBatch
	triggerExec   span  // durationMs's triggerExecution, when it is an object
	durationMsDup error // a key read twice in durationMs
	// The elements of sources and stateOperators: the first ones in
	// the arrays, the others (rare) in the slices. (A slice of the
	// array would point into the parser itself, and make the compiler
	// move it to the heap.)
	nsrc    int
	srcArr  [2]sourceFields
	srcMore []sourceFields
	srcErr  error // an element of sources that is not an object, or holds a key twice
	nop     int
	opArr   [2]operatorFields
	opMore  []operatorFields
	opsErr  error
}

// sourceFields is what Parse reads of one element of sources.
type sourceFields struct {
	description, startOffset, endOffset, latestOffset, numInputRows span
	desc                                                            strRef // the description, once read into the strings
}

// operatorFields is what Parse reads of one element of stateOperators.
type operatorFields struct {
	operatorName, rowsDropped, late span
	name                            strRef // the name, once read into the strings
}

// object opens the object at d[i] ('{') at nesting depth (outside it):
// it returns the index of its first key, or done and the index after it
// when it is empty.
func (p *parser) object(i, depth int) (j int, done bool, err error) {
	if depth+1 > maxDepth {
		return i, false, errAt(i, errDepth.Error())
	}
	d := p.d
	j = skipWS(d, i+1)
	if j < len(d) && d[j] == '}' {
		return j + 1, true, nil
	}
	return j, false, nil
}

// key reads the member key at d[j] and its ':'; it returns the key token
// (with quotes), whether it holds an escape, and where the value starts.
func (p *parser) key(j int) (key []byte, esc bool, vs int, err error) {
	d := p.d
	if j >= len(d) || d[j] != '"' {
		return nil, false, j, errAt(j, "want an object key")
	}
	ke, esc, err := skipString(d, j)
	if err != nil {
		return nil, false, ke, err
	}
	key = d[j:ke]
	j = skipWS(d, ke)
	if j >= len(d) || d[j] != ':' {
		return nil, false, j, errAt(j, "want ':' after object key")
	}
	vs = skipWS(d, j+1)
	if vs >= len(d) {
		return nil, false, vs, errAt(vs, "unexpected end of input")
	}
	return key, esc, vs, nil
}

// next goes past the ',' or the closing c after a value ending at ve: it
// returns the index of the next member or element, or done and the index
// after the closing c.
func (p *parser) next(ve int, c byte) (j int, done bool, err error) {
	d := p.d
	j = skipWS(d, ve)
	if j < len(d) && d[j] == ',' {
		return skipWS(d, j+1), false, nil
	}
	if j < len(d) && d[j] == c {
		return j + 1, true, nil
	}
	if c == '}' {
		return j, false, errAt(j, "want ',' or '}' in object")
	}
	return j, false, errAt(j, "want ',' or ']' in array")
}

// body validates the event or progress object at d[i] and records its
// members in f; top is true for the document itself (whose "progress"
// object is read into p.prog).
func (p *parser) body(i, depth int, f *bodyFields, top bool) (int, error) {
	d := p.d
	j, done, err := p.object(i, depth)
	if err != nil || done {
		return j, err
	}
	depth++
	for {
		key, esc, vs, err := p.key(j)
		if err != nil {
			return vs, err
		}
		k := keyOf(key, esc)
		f.note(k, key, esc, vs)
		var ve int
		c := d[vs]
		switch {
		case k == keyProgress && top && c == '{':
			ve, err = p.body(vs, depth, &p.prog, false)
		case k == keySources && c == '[':
			ve, err = p.sourceList(vs, depth, f)
		case k == keyStateOperators && c == '[':
			ve, err = p.operatorList(vs, depth, f)
		case k == keyEventTime && c == '{':
			ve, err = p.eventTime(vs, depth, f)
		case k == keyDurationMs && c == '{':
			ve, err = p.durationMs(vs, depth, f)
		default:
			ve, err = skipValue(d, vs, depth)
		}
		if err != nil {
			return ve, err
		}
		v := span{vs, ve}
		switch k {
		case keyEvent:
			f.event = v
		case keyProgress:
			f.progress = v
		case keyID:
			f.id = v
		case keyRunID:
			f.runID = v
		case keyName:
			f.name = v
		case keyTimestamp:
			f.timestamp = v
		case keyBatchID:
			f.batchID = v
		case keySources:
			f.sources = v
		case keyEventTime:
			f.eventTime = v
		case keyException:
			f.exception = v
		case keyErrorClass:
			f.errorClass = v
		case keyDurationMs:
			f.durationMs = v
		case keyStateOperators:
			f.stateOperators = v
		}
		if j, done, err = p.next(ve, '}'); err != nil || done {
			return j, err
		}
	}
}

// eventTime validates the eventTime object at d[i] and records its
// watermark in f.
func (p *parser) eventTime(i, depth int, f *bodyFields) (int, error) {
	j, done, err := p.object(i, depth)
	if err != nil || done {
		return j, err
	}
	depth++
	var ks keySet
	for {
		key, esc, vs, err := p.key(j)
		if err != nil {
			return vs, err
		}
		k := keyOf(key, esc)
		ks.note(k, key, esc, vs)
		ve, err := skipValue(p.d, vs, depth)
		if err != nil {
			return ve, err
		}
		if k == keyWatermark {
			f.watermark = span{vs, ve}
		}
		if j, done, err = p.next(ve, '}'); err != nil || done {
			f.eventTimeDup = ks.dup
			return j, err
		}
	}
}

// durationMs validates the durationMs object at d[i] and records in f
// whether it has addBatch.
func (p *parser) durationMs(i, depth int, f *bodyFields) (int, error) {
	j, done, err := p.object(i, depth)
	if err != nil || done {
		return j, err
	}
	depth++
	var ks keySet
	for {
		key, esc, vs, err := p.key(j)
		if err != nil {
			return vs, err
		}
		k := keyOf(key, esc)
		ks.note(k, key, esc, vs)
		ve, err := skipValue(p.d, vs, depth)
		if err != nil {
			return ve, err
		}
		switch k {
		case keyAddBatch:
			f.addBatch = true
		case keyTriggerExecution:
			f.triggerExec = span{vs, ve}
		}
		if j, done, err = p.next(ve, '}'); err != nil || done {
			f.durationMsDup = ks.dup
			return j, err
		}
	}
}

// array opens the array at d[i] ('['), as object does for objects.
func (p *parser) array(i, depth int) (j int, done bool, err error) {
	if depth+1 > maxDepth {
		return i, false, errAt(i, errDepth.Error())
	}
	d := p.d
	j = skipWS(d, i+1)
	if j < len(d) && d[j] == ']' {
		return j + 1, true, nil
	}
	return j, false, nil
}

// sourceList validates the sources array at d[i] and records each
// element in f (addSource).
func (p *parser) sourceList(i, depth int, f *bodyFields) (int, error) {
	d := p.d
	f.nsrc, f.srcMore, f.srcErr = 0, f.srcMore[:0], nil
	j, done, err := p.array(i, depth)
	if err != nil || done {
		return j, err
	}
	depth++
	for {
		var ve int
		if j < len(d) && d[j] == '{' {
			ve, err = p.source(j, depth, f, f.addSource())
		} else if ve, err = skipValue(d, j, depth); err == nil && f.srcErr == nil {
			f.srcErr = malformed(fmt.Sprintf("sources[%d] %s: want an object", f.nsrc, clip(string(d[j:ve]))))
		}
		if err != nil {
			return ve, err
		}
		if j, done, err = p.next(ve, ']'); err != nil || done {
			return j, err
		}
	}
}

// addSource adds an element to f's sources and returns it.
func (f *bodyFields) addSource() *sourceFields {
	f.nsrc++
	if f.nsrc <= len(f.srcArr) {
		f.srcArr[f.nsrc-1] = sourceFields{}
		return &f.srcArr[f.nsrc-1]
	}
	f.srcMore = append(f.srcMore, sourceFields{})
	return &f.srcMore[len(f.srcMore)-1]
}

// source returns element i of f's sources.
func (f *bodyFields) source(i int) *sourceFields {
	if i < len(f.srcArr) {
		return &f.srcArr[i]
	}
	return &f.srcMore[i-len(f.srcArr)]
}

// addOperator adds an element to f's state operators and returns it.
func (f *bodyFields) addOperator() *operatorFields {
	f.nop++
	if f.nop <= len(f.opArr) {
		f.opArr[f.nop-1] = operatorFields{}
		return &f.opArr[f.nop-1]
	}
	f.opMore = append(f.opMore, operatorFields{})
	return &f.opMore[len(f.opMore)-1]
}

// operator returns element i of f's state operators.
func (f *bodyFields) operator(i int) *operatorFields {
	if i < len(f.opArr) {
		return &f.opArr[i]
	}
	return &f.opMore[i-len(f.opArr)]
}

// source validates one element of sources into s; a key read twice is
// recorded in f.srcErr.
func (p *parser) source(i, depth int, f *bodyFields, s *sourceFields) (int, error) {
	j, done, err := p.object(i, depth)
	if err != nil || done {
		return j, err
	}
	depth++
	var ks keySet
	for {
		key, esc, vs, err := p.key(j)
		if err != nil {
			return vs, err
		}
		k := keyOf(key, esc)
		ks.note(k, key, esc, vs)
		ve, err := skipValue(p.d, vs, depth)
		if err != nil {
			return ve, err
		}
		switch k {
		case keyDescription:
			s.description = span{vs, ve}
		case keyStartOffset:
			s.startOffset = span{vs, ve}
		case keyEndOffset:
			s.endOffset = span{vs, ve}
		case keyLatestOffset:
			s.latestOffset = span{vs, ve}
		case keyNumInputRows:
			s.numInputRows = span{vs, ve}
		}
		if j, done, err = p.next(ve, '}'); err != nil || done {
			if ks.dup != nil && f.srcErr == nil {
				f.srcErr = fmt.Errorf("%w: %w", ErrMalformed, ks.dup)
			}
			return j, err
		}
	}
}

// operatorList validates the stateOperators array at d[i] and records
// each element in f (addOperator).
func (p *parser) operatorList(i, depth int, f *bodyFields) (int, error) {
	d := p.d
	f.nop, f.opMore, f.opsErr = 0, f.opMore[:0], nil
	j, done, err := p.array(i, depth)
	if err != nil || done {
		return j, err
	}
	depth++
	for {
		var ve int
		if j < len(d) && d[j] == '{' {
			ve, err = p.operator(j, depth, f, f.addOperator())
		} else if ve, err = skipValue(d, j, depth); err == nil && f.opsErr == nil {
			f.opsErr = malformed(fmt.Sprintf("stateOperators[%d] %s: want an object", f.nop, clip(string(d[j:ve]))))
		}
		if err != nil {
			return ve, err
		}
		if j, done, err = p.next(ve, ']'); err != nil || done {
			return j, err
		}
	}
}

// operator validates one element of stateOperators into o; a key read
// twice is recorded in f.opsErr.
func (p *parser) operator(i, depth int, f *bodyFields, o *operatorFields) (int, error) {
	j, done, err := p.object(i, depth)
	if err != nil || done {
		return j, err
	}
	depth++
	var ks keySet
	for {
		key, esc, vs, err := p.key(j)
		if err != nil {
			return vs, err
		}
		k := keyOf(key, esc)
		ks.note(k, key, esc, vs)
		ve, err := skipValue(p.d, vs, depth)
		if err != nil {
			return ve, err
		}
		switch k {
		case keyOperatorName:
			o.operatorName = span{vs, ve}
		case keyRowsDropped:
			o.rowsDropped = span{vs, ve}
		case keyLate:
			o.late = span{vs, ve}
		}
		if j, done, err = p.next(ve, '}'); err != nil || done {
			if ks.dup != nil && f.opsErr == nil {
				f.opsErr = fmt.Errorf("%w: %w", ErrMalformed, ks.dup)
			}
			return j, err
		}
	}
}

// inferKind guesses the kind of a listener-form document from its keys.
func (f *bodyFields) inferKind() Kind {
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

// progressEvent is an Event of a progress with room for its first sources
// and state operators, allocated at once.
type progressEvent struct {
	ev  Event
	src [1]Source
	ops [2]StateOperator
}

// build makes the Event of the given kind out of the members of f.
func build(d []byte, f *bodyFields, kind Kind) (*Event, error) {
	var ids [72]byte
	if err := readUUID(d, f.id, "id", ids[:36]); err != nil {
		return nil, err
	}
	if err := readUUID(d, f.runID, "runId", ids[36:]); err != nil {
		return nil, err
	}
	// The Event's strings share one allocation: the ids, then the others
	// as they are read (strs), converted once at the end.
	var strArr [256]byte
	strs := append(strArr[:0], ids[:]...)
	var ev *Event
	var pe *progressEvent
	if kind == KindProgress {
		pe = &progressEvent{}
		ev = &pe.ev
	} else {
		ev = &Event{}
	}
	ev.Kind, ev.BatchID = kind, -1
	var name, exception, errorClass, watermark strRef
	var err error
	switch kind {
	case KindStarted:
		if strs, name, err = optString(strs, d, f.name, "name"); err != nil {
			return nil, err
		}
		ev.Timestamp = readTimestamp(d, f.timestamp)
	case KindIdle:
		ev.Timestamp = readTimestamp(d, f.timestamp)
	case KindTerminated:
		if strs, exception, err = optString(strs, d, f.exception, "exception"); err != nil {
			return nil, err
		}
		if strs, errorClass, err = optString(strs, d, f.errorClass, "errorClassOnException"); err != nil {
			return nil, err
		}
	case KindProgress:
		if strs, name, err = optString(strs, d, f.name, "name"); err != nil {
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
		if strs, watermark, err = readWatermark(strs, d, f); err != nil {
			return nil, err
		}
		if ev.Sources, strs, err = readSources(strs, d, f, pe.src[:]); err != nil {
			return nil, err
		}
		ev.NumInputRows = sumInputRows(ev.Sources)
		if ev.Executed, err = readExecuted(d, f); err != nil {
			return nil, err
		}
		ev.TriggerExecutionMs = readMillis(d, f.triggerExec)
		if ev.StateOperators, strs, err = readStateOperators(strs, d, f, pe.ops[:]); err != nil {
			return nil, err
		}
		all := string(strs)
		ev.Watermark = watermark.in(all)
		for i := range ev.Sources {
			ev.Sources[i].Description = f.source(i).desc.in(all)
		}
		for i := range ev.StateOperators {
			ev.StateOperators[i].Name = f.operator(i).name.in(all)
		}
		ev.QueryID, ev.RunID, ev.Name = all[:36], all[36:72], name.in(all)
		return ev, nil
	}
	all := string(strs)
	ev.QueryID, ev.RunID = all[:36], all[36:72]
	ev.Name, ev.Exception, ev.ErrorClass = name.in(all), exception.in(all), errorClass.in(all)
	return ev, nil
}

// strRef is where a string of the Event lies in the strings' buffer.
type strRef struct{ s, e int }

// in returns the string strRef refers to in all, the buffer as a string.
func (r strRef) in(all string) string { return all[r.s:r.e] }

// appendStr appends the decoded string token tok (with quotes) to strs.
func appendStr(strs, tok []byte) ([]byte, strRef) {
	s := len(strs)
	if body := tok[1 : len(tok)-1]; plainString(body) {
		strs = append(strs, body...)
	} else {
		strs = appendUnquoted(strs, tok)
	}
	return strs, strRef{s, len(strs)}
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

// optString reads a member that is a string or null into strs; absent
// and null give "".
func optString(strs, d []byte, v span, field string) ([]byte, strRef, error) {
	if !v.present() {
		return strs, strRef{}, nil
	}
	tok := d[v.s:v.e]
	switch tok[0] {
	case '"':
		strs, r := appendStr(strs, tok)
		return strs, r, nil
	case 'n':
		return strs, strRef{}, nil
	}
	return strs, strRef{}, malformed(fmt.Sprintf("%s %s: want a string or null", field, clip(string(tok))))
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

// readWatermark reads eventTime.watermark into strs; an absent or null
// eventTime or watermark gives "".
func readWatermark(strs, d []byte, f *bodyFields) ([]byte, strRef, error) {
	v := f.eventTime
	if !v.present() || d[v.s] == 'n' {
		return strs, strRef{}, nil
	}
	if d[v.s] != '{' {
		return strs, strRef{}, malformed(fmt.Sprintf("eventTime %s: want an object", clip(string(d[v.s:v.e]))))
	}
	if f.eventTimeDup != nil {
		return strs, strRef{}, fmt.Errorf("%w: %w", ErrMalformed, f.eventTimeDup)
	}
	return optString(strs, d, f.watermark, "eventTime.watermark")
}

// readSources reads the sources array, into room when it fits, and their
// descriptions into strs; absent or null gives nil.
func readSources(strs, d []byte, f *bodyFields, room []Source) ([]Source, []byte, error) {
	v := f.sources
	if !v.present() || d[v.s] == 'n' {
		return nil, strs, nil
	}
	if d[v.s] != '[' {
		return nil, strs, malformed(fmt.Sprintf("sources %s: want an array", clip(string(d[v.s:v.e]))))
	}
	if f.srcErr != nil {
		return nil, strs, f.srcErr
	}
	n := f.nsrc
	if n == 0 {
		return nil, strs, nil
	}
	size := 0
	for i := range n {
		s := f.source(i)
		size += s.startOffset.e - s.startOffset.s + s.endOffset.e - s.endOffset.s + s.latestOffset.e - s.latestOffset.s
	}
	var out []Source
	if n <= len(room) {
		out = room[:n:n]
	} else {
		out = make([]Source, n)
	}
	buf := make([]byte, 0, size)
	var err error
	for i := range n {
		f := f.source(i)
		if desc := f.description; desc.present() && d[desc.s] != 'n' {
			if d[desc.s] != '"' {
				return nil, strs, malformed(fmt.Sprintf("sources[%d].description %s: want a string or null", i, clip(string(d[desc.s:desc.e]))))
			}
			strs, f.desc = appendStr(strs, d[desc.s:desc.e])
		}
		if buf, out[i].StartOffset, err = normOffset(buf, d, f.startOffset, i, "startOffset"); err != nil {
			return nil, strs, err
		}
		if buf, out[i].EndOffset, err = normOffset(buf, d, f.endOffset, i, "endOffset"); err != nil {
			return nil, strs, err
		}
		if buf, out[i].LatestOffset, err = normOffset(buf, d, f.latestOffset, i, "latestOffset"); err != nil {
			return nil, strs, err
		}
		out[i].NumInputRows = readCount(d, f.numInputRows)
	}
	return out, strs, nil
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
func readExecuted(d []byte, f *bodyFields) (bool, error) {
	v := f.durationMs
	if !v.present() || d[v.s] == 'n' {
		return false, nil
	}
	if d[v.s] != '{' {
		return false, malformed(fmt.Sprintf("durationMs %s: want an object", clip(string(d[v.s:v.e]))))
	}
	if f.durationMsDup != nil {
		return false, fmt.Errorf("%w: %w", ErrMalformed, f.durationMsDup)
	}
	return f.addBatch, nil
}

// readMillis reads durationMs's triggerExecution, a count of
// milliseconds Spark writes as an integer; absent, null, negative,
// anything else or beyond an int32 gives 0 (the progress is then taken as
// posted at its trigger's start, as before).
func readMillis(d []byte, v span) int32 {
	n := readCount(d, v)
	if n < 0 || n > math.MaxInt32 {
		return 0
	}
	return int32(n)
}

// readStateOperators reads the stateOperators array, into room when it
// fits, and their names into strs: nil when it is absent or null, an
// empty non-nil slice when it is [].
func readStateOperators(strs, d []byte, f *bodyFields, room []StateOperator) ([]StateOperator, []byte, error) {
	v := f.stateOperators
	if !v.present() || d[v.s] == 'n' {
		return nil, strs, nil
	}
	if d[v.s] != '[' {
		return nil, strs, malformed(fmt.Sprintf("stateOperators %s: want an array", clip(string(d[v.s:v.e]))))
	}
	if f.opsErr != nil {
		return nil, strs, f.opsErr
	}
	var ops []StateOperator
	if f.nop <= len(room) {
		ops = room[:f.nop:f.nop]
	} else {
		ops = make([]StateOperator, f.nop)
	}
	for i := range f.nop {
		o := f.operator(i)
		op := &ops[i]
		op.RowsDroppedByWatermark = readCount(d, o.rowsDropped)
		if op.RowsDroppedByWatermark < 0 {
			op.RowsDroppedByWatermark = readCount(d, o.late)
		}
		if n := o.operatorName; n.present() && d[n.s] == '"' {
			strs, o.name = appendStr(strs, d[n.s:n.e])
		}
	}
	return ops, strs, nil
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
