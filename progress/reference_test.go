package progress

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"regexp"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"
)

// refParse is a plain encoding/json implementation of Parse's documented
// behaviour, written for clarity, not speed. The fuzz and table tests
// compare Parse with it, and the benchmark measures it as a baseline.
func refParse(data []byte, kind Kind) (*Event, error) {
	if kind > KindTerminated {
		return nil, fmt.Errorf("%w: kind", ErrKindMismatch)
	}
	trimmed := bytes.TrimLeft(data, " \t\r\n")
	if len(trimmed) == 0 || trimmed[0] != '{' {
		return nil, fmt.Errorf("%w: not an object", ErrMalformed)
	}
	var top map[string]json.RawMessage
	if err := json.Unmarshal(data, &top); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrMalformed, err)
	}
	if err := refDuplicate(data); err != nil {
		return nil, err
	}
	body := top
	if raw, ok := top["Event"]; ok {
		var class string
		if err := json.Unmarshal(raw, &class); err != nil || raw[0] != '"' {
			return nil, fmt.Errorf("%w: Event", ErrMalformed)
		}
		if j := strings.LastIndexByte(class, '$'); j >= 0 {
			class = class[j+1:]
		} else if j := strings.LastIndexByte(class, '.'); j >= 0 {
			class = class[j+1:]
		}
		k := map[string]Kind{
			"QueryStartedEvent": KindStarted, "QueryProgressEvent": KindProgress,
			"QueryIdleEvent": KindIdle, "QueryTerminatedEvent": KindTerminated,
		}[class]
		if k == KindUnknown {
			return nil, fmt.Errorf("%w: %s", ErrIgnored, class)
		}
		if kind != KindUnknown && kind != k {
			return nil, fmt.Errorf("%w: %s", ErrKindMismatch, class)
		}
		kind = k
		if k == KindProgress {
			p, ok := top["progress"]
			if !ok || p[0] != '{' {
				return nil, fmt.Errorf("%w: progress", ErrMalformed)
			}
			body = nil
			if err := json.Unmarshal(p, &body); err != nil {
				return nil, fmt.Errorf("%w: %v", ErrMalformed, err)
			}
			if err := refDuplicate(p); err != nil {
				return nil, err
			}
		}
	} else if kind == KindUnknown {
		_, batch := top["batchId"]
		_, sources := top["sources"]
		_, exc := top["exception"]
		_, ec := top["errorClassOnException"]
		_, name := top["name"]
		switch {
		case batch || sources:
			kind = KindProgress
		case exc || ec:
			kind = KindTerminated
		case name:
			kind = KindStarted
		default:
			kind = KindIdle
		}
	}
	ev := &Event{Kind: kind, BatchID: -1}
	var err error
	if ev.QueryID, err = refUUID(body["id"]); err != nil {
		return nil, err
	}
	if ev.RunID, err = refUUID(body["runId"]); err != nil {
		return nil, err
	}
	switch kind {
	case KindStarted:
		if ev.Name, err = refOptString(body["name"]); err != nil {
			return nil, err
		}
		ev.Timestamp = refTime(body["timestamp"])
	case KindIdle:
		ev.Timestamp = refTime(body["timestamp"])
	case KindTerminated:
		if ev.Exception, err = refOptString(body["exception"]); err != nil {
			return nil, err
		}
		if ev.ErrorClass, err = refOptString(body["errorClassOnException"]); err != nil {
			return nil, err
		}
	case KindProgress:
		if ev.Name, err = refOptString(body["name"]); err != nil {
			return nil, err
		}
		ev.Timestamp = refTime(body["timestamp"])
		raw, ok := body["batchId"]
		if !ok {
			return nil, fmt.Errorf("%w: batchId", ErrMalformed)
		}
		if raw[0] != '-' && (raw[0] < '0' || raw[0] > '9') {
			return nil, fmt.Errorf("%w: batchId", ErrMalformed)
		}
		if ev.BatchID, err = strconv.ParseInt(string(raw), 10, 64); err != nil {
			return nil, fmt.Errorf("%w: batchId", ErrMalformed)
		}
		if et, ok := body["eventTime"]; ok && string(et) != "null" {
			var m map[string]json.RawMessage
			if et[0] != '{' || json.Unmarshal(et, &m) != nil || refDuplicate(et) != nil {
				return nil, fmt.Errorf("%w: eventTime", ErrMalformed)
			}
			if ev.Watermark, err = refOptString(m["watermark"]); err != nil {
				return nil, err
			}
		}
		if raw, ok := body["sources"]; ok && string(raw) != "null" {
			var list []json.RawMessage
			if raw[0] != '[' || json.Unmarshal(raw, &list) != nil {
				return nil, fmt.Errorf("%w: sources", ErrMalformed)
			}
			for _, el := range list {
				if el[0] != '{' {
					return nil, fmt.Errorf("%w: source", ErrMalformed)
				}
			}
			for _, el := range list {
				var m map[string]json.RawMessage
				if err := json.Unmarshal(el, &m); err != nil || refDuplicate(el) != nil {
					return nil, fmt.Errorf("%w: source", ErrMalformed)
				}
				var s Source
				if s.Description, err = refOptString(m["description"]); err != nil {
					return nil, err
				}
				if s.StartOffset, err = refOffset(m["startOffset"]); err != nil {
					return nil, err
				}
				if s.EndOffset, err = refOffset(m["endOffset"]); err != nil {
					return nil, err
				}
				if s.LatestOffset, err = refOffset(m["latestOffset"]); err != nil {
					return nil, err
				}
				s.NumInputRows = refCount(m["numInputRows"])
				ev.Sources = append(ev.Sources, s)
			}
		}
		ev.NumInputRows = -1
		if len(ev.Sources) > 0 {
			ev.NumInputRows = 0
			for _, s := range ev.Sources {
				if s.NumInputRows < 0 {
					ev.NumInputRows = -1
					break
				}
				ev.NumInputRows += s.NumInputRows
			}
		}
		if raw, ok := body["durationMs"]; ok && string(raw) != "null" {
			var m map[string]json.RawMessage
			if raw[0] != '{' || json.Unmarshal(raw, &m) != nil || refDuplicate(raw) != nil {
				return nil, fmt.Errorf("%w: durationMs", ErrMalformed)
			}
			_, ev.Executed = m["addBatch"]
			if raw, ok := m["triggerExecution"]; ok {
				if n, err := strconv.ParseInt(string(raw), 10, 64); err == nil && n >= 0 && n <= math.MaxInt32 {
					ev.TriggerExecutionMs = int32(n)
				}
			}
		}
		if raw, ok := body["stateOperators"]; ok && string(raw) != "null" {
			var list []json.RawMessage
			if raw[0] != '[' || json.Unmarshal(raw, &list) != nil {
				return nil, fmt.Errorf("%w: stateOperators", ErrMalformed)
			}
			ev.StateOperators = []StateOperator{}
			for _, el := range list {
				var m map[string]json.RawMessage
				if el[0] != '{' || json.Unmarshal(el, &m) != nil || refDuplicate(el) != nil {
					return nil, fmt.Errorf("%w: state operator", ErrMalformed)
				}
				op := StateOperator{RowsDroppedByWatermark: refCount(m["numRowsDroppedByWatermark"])}
				if op.RowsDroppedByWatermark < 0 {
					op.RowsDroppedByWatermark = refCount(m["numLateInputs"])
				}
				if n := m["operatorName"]; n != nil && n[0] == '"' {
					_ = json.Unmarshal(n, &op.Name)
				}
				ev.StateOperators = append(ev.StateOperators, op)
			}
		}
	}
	return ev, nil
}

func refCount(raw json.RawMessage) int64 {
	if raw == nil || len(raw) > 19 || (raw[0] != '-' && (raw[0] < '0' || raw[0] > '9')) {
		return -1
	}
	n, err := strconv.ParseInt(string(raw), 10, 64)
	if err != nil || n < 0 {
		return -1
	}
	return n
}

var refUUIDRe = regexp.MustCompile(`^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$`)

func refUUID(raw json.RawMessage) (string, error) {
	var s string
	if raw == nil || raw[0] != '"' || json.Unmarshal(raw, &s) != nil || !refUUIDRe.MatchString(s) {
		return "", fmt.Errorf("%w: id", ErrMalformed)
	}
	return strings.ToLower(s), nil
}

func refOptString(raw json.RawMessage) (string, error) {
	if raw == nil || string(raw) == "null" {
		return "", nil
	}
	var s string
	if raw[0] != '"' || json.Unmarshal(raw, &s) != nil {
		return "", fmt.Errorf("%w: string", ErrMalformed)
	}
	return s, nil
}

func refTime(raw json.RawMessage) time.Time {
	var s string
	if raw == nil || raw[0] != '"' || json.Unmarshal(raw, &s) != nil {
		return time.Time{}
	}
	t, _ := parseTimeString(s)
	return t
}

func refOffset(raw json.RawMessage) (json.RawMessage, error) {
	if raw == nil || string(raw) == "null" {
		return nil, nil
	}
	var out bytes.Buffer
	if raw[0] == '"' {
		var s string
		if err := json.Unmarshal(raw, &s); err != nil {
			return nil, err
		}
		if json.Valid([]byte(s)) {
			_ = json.Compact(&out, []byte(s))
			if out.String() == "null" {
				return nil, nil
			}
			return out.Bytes(), nil
		}
	}
	if err := json.Compact(&out, raw); err != nil {
		return nil, err
	}
	if !utf8.Valid(out.Bytes()) {
		return nil, fmt.Errorf("%w: utf-8", ErrMalformed)
	}
	return out.Bytes(), nil
}

// errClass names the sentinel an error wraps, for comparisons.
func errClass(err error) string {
	switch {
	case err == nil:
		return "nil"
	case errors.Is(err, ErrMalformed):
		return "malformed"
	case errors.Is(err, ErrIgnored):
		return "ignored"
	case errors.Is(err, ErrKindMismatch):
		return "mismatch"
	}
	return "other: " + err.Error()
}

// refLookup is a plain JSON Pointer lookup over a decoded document.
func refLookup(doc []byte, ptr string) (json.RawMessage, bool) {
	dec := json.NewDecoder(bytes.NewReader(doc))
	dec.UseNumber()
	var v any
	if !json.Valid(doc) || dec.Decode(&v) != nil {
		return nil, false
	}
	tokens, err := splitPointer(ptr)
	if err != nil {
		return nil, false
	}
	for _, tok := range tokens {
		switch x := v.(type) {
		case map[string]any:
			next, ok := x[tok]
			if !ok {
				return nil, false
			}
			v = next
		case []any:
			if tok == "" || (tok[0] == '0' && len(tok) > 1) || strings.TrimLeft(tok, "0123456789") != "" {
				return nil, false
			}
			i, err := strconv.Atoi(tok)
			if err != nil || i >= len(x) {
				return nil, false
			}
			v = x[i]
		default:
			return nil, false
		}
	}
	out, err := json.Marshal(v)
	return out, err == nil
}

// refRead are the keys Parse reads; one of them repeated in an object is
// malformed.
var refRead = map[string]bool{"Event": true, "progress": true, "id": true, "runId": true, "name": true,
	"timestamp": true, "batchId": true, "sources": true, "eventTime": true, "exception": true,
	"errorClassOnException": true, "description": true, "startOffset": true, "endOffset": true, "watermark": true,
	"latestOffset": true, "numInputRows": true, "durationMs": true, "stateOperators": true, "addBatch": true, "triggerExecution": true,
	"operatorName": true, "numRowsDroppedByWatermark": true, "numLateInputs": true}

// refDuplicate reports a key of refRead repeated in the object obj (valid
// JSON).
func refDuplicate(obj []byte) error {
	dec := json.NewDecoder(bytes.NewReader(obj))
	if _, err := dec.Token(); err != nil {
		return nil
	}
	seen := map[string]bool{}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return nil
		}
		k, _ := tok.(string)
		if refRead[k] && seen[k] {
			return fmt.Errorf("%w: duplicate key %q", ErrMalformed, k)
		}
		seen[k] = true
		var v json.RawMessage
		if err := dec.Decode(&v); err != nil {
			return nil
		}
	}
	return nil
}
