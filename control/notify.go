package control

import (
	"encoding/json"
	"strings"
	"unicode/utf8"
)

// Keys of a move's notification, in the order the statements write them
// (payloadPrefix, rfc3339, notifyEnd).
const (
	moveTableKey   = `{"table":"`
	moveUntilKey   = `","finalized_until":"`
	moveControlKey = `","control_table":"`
)

// readNotification reads a payload sent on NotifyChannel into n, as
// json.Unmarshal does. A move's payload as this release's statements
// write it (and an earlier release's, without the control table) is read
// without reflection: the service's own LISTEN connection hears one per
// verdict that moves, and decoding each with encoding/json cost about
// 4 µs (issue 12). Anything else (a rewind's payload, escapes, other key
// orders or spacing, a payload by hand) goes to encoding/json, so the
// result is always json.Unmarshal's (FuzzReadNotification).
func readNotification(payload string) (notification, error) {
	if n, ok := fastNotification(payload); ok {
		return n, nil
	}
	var n notification
	err := json.Unmarshal([]byte(payload), &n)
	return n, err
}

// fastNotification reads payload when it is exactly
// {"table":"T","finalized_until":"U"} or
// {"table":"T","finalized_until":"U","control_table":"C"}
// with strings that hold no escape, no control character, no quote and
// only valid UTF-8 (what json.Unmarshal returns for them is the bytes
// themselves); it reports false for anything else.
func fastNotification(payload string) (notification, bool) {
	rest, ok := strings.CutPrefix(payload, moveTableKey)
	if !ok {
		return notification{}, false
	}
	table, rest, ok := plainString(rest)
	if !ok {
		return notification{}, false
	}
	if rest, ok = strings.CutPrefix(rest, moveUntilKey); !ok {
		return notification{}, false
	}
	until, rest, ok := plainString(rest)
	if !ok {
		return notification{}, false
	}
	control := ""
	switch {
	case rest == `"}`:
	case strings.HasPrefix(rest, moveControlKey):
		if control, rest, ok = plainString(rest[len(moveControlKey):]); !ok || rest != `"}` {
			return notification{}, false
		}
	default:
		return notification{}, false
	}
	return notification{Table: table, FinalizedUntil: until, ControlTable: control}, true
}

// plainString returns the string s starts with, up to its closing quote
// (which rest starts with), when it needs no decoding: no backslash, no
// control character, valid UTF-8. ok is false otherwise, or when the
// quote is missing.
func plainString(s string) (str, rest string, ok bool) {
	ascii := true
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c == '"':
			if !ascii && !utf8.ValidString(s[:i]) {
				return "", "", false
			}
			return s[:i], s[i:], true
		case c == '\\' || c < 0x20:
			return "", "", false
		case c >= utf8.RuneSelf:
			ascii = false
		}
	}
	return "", "", false
}

// plainJSON reports whether json.Marshal writes s as it is between its
// quotes: printable ASCII without the quote, the backslash and the three
// characters it escapes for HTML (<, >, &).
func plainJSON(s string) bool {
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c < 0x20 || c >= utf8.RuneSelf, c == '"', c == '\\', c == '<', c == '>', c == '&':
			return false
		}
	}
	return true
}
