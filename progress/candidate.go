package progress

import (
	"encoding/json"
	"errors"
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

// Candidate returns the candidate verdict of a progress event. It returns
// false, not an error, when the event has no usable time: it is not a
// progress; it has no sources, or the Spec's source index is out of range;
// under TimeOffset the pointer finds nothing or no readable time (see
// ParseTime) in that source's endOffset, or, under SourceAll, in any one
// source's (never run ahead of the slowest source); under
// SourceByDescription no source or several match; under TimeWatermark
// the watermark is absent, unreadable or the epoch (Spark's "no watermark
// yet"); under TimeTrigger the timestamp is zero; or s is not valid (a
// zero TimeKind or Granularity, a negative Source other than SourceAll, a
// bad Pointer).
func (s Spec) Candidate(ev *Event) (Candidate, bool) {
	if ev == nil || ev.Kind != KindProgress || !s.Granularity.valid() || len(ev.Sources) == 0 {
		return Candidate{}, false
	}
	if s.Source != SourceAll {
		// An index, or the one source the description picks.
		i, n := s.PickSource(ev)
		if n != 1 {
			return Candidate{}, false
		}
		s.Source = i
	}
	var c Candidate
	switch s.Time {
	case TimeOffset:
		tokens, err := splitPointer(s.Pointer)
		if err != nil {
			return Candidate{}, false
		}
		if s.Source != SourceAll {
			t, ok := offsetTime(ev.Sources[s.Source].EndOffset, tokens)
			if !ok {
				return Candidate{}, false
			}
			c = Candidate{Time: t, Source: s.Source, EndOffset: ev.Sources[s.Source].EndOffset}
			break
		}
		for i, src := range ev.Sources {
			t, ok := offsetTime(src.EndOffset, tokens)
			if !ok {
				return Candidate{}, false
			}
			if i == 0 || t.Before(c.Time) {
				c = Candidate{Time: t, Source: i, EndOffset: src.EndOffset}
			}
		}
	case TimeWatermark:
		if ev.Watermark == "" {
			return Candidate{}, false
		}
		t, ok := parseTimeBytes([]byte(ev.Watermark))
		if !ok || t.Equal(epoch) {
			return Candidate{}, false
		}
		c = s.reported(ev, t)
	case TimeTrigger:
		if ev.Timestamp.IsZero() {
			return Candidate{}, false
		}
		c = s.reported(ev, ev.Timestamp.UTC())
	default:
		return Candidate{}, false
	}
	c.Until = Floor(c.Time.Add(-s.Delay), s.Granularity, s.location())
	return c, true
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
func offsetTime(off json.RawMessage, tokens []string) (time.Time, bool) {
	v, ok := lookupPointer(off, tokens)
	if !ok {
		return time.Time{}, false
	}
	t, err := ParseTime(v)
	return t, err == nil
}

// splitPointer splits an RFC 6901 JSON Pointer into its unescaped
// reference tokens. "" is the whole document.
func splitPointer(p string) ([]string, error) {
	if p == "" {
		return nil, nil
	}
	if p[0] != '/' {
		return nil, errors.New(`a JSON Pointer starts with "/"`)
	}
	tokens := strings.Split(p[1:], "/")
	for i, tok := range tokens {
		for j := 0; j < len(tok); j++ {
			if tok[j] == '~' && (j+1 == len(tok) || (tok[j+1] != '0' && tok[j+1] != '1')) {
				return nil, errors.New(`"~" in a JSON Pointer must be followed by 0 or 1`)
			}
		}
		if strings.IndexByte(tok, '~') >= 0 {
			tokens[i] = strings.ReplaceAll(strings.ReplaceAll(tok, "~1", "/"), "~0", "~")
		}
	}
	return tokens, nil
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
