package progress

import (
	"fmt"
	"testing"
)

// The trusted walkers must end every valid value where the validating ones
// do, and see the same members and elements.
func TestTrustedWalkersAgree(t *testing.T) {
	values := []string{
		`""`, `"plain"`, `"a\"b"`, `"a\\"`, `"a\\\"b"`, `"\\\\"`, `"x\\\\\"y"`, `"\u00e9\n"`, `"é ü"`,
		`0`, `-1`, `12.5e-3`, `1E+9`, `true`, `false`, `null`,
		`{}`, `[]`, `{"a":1}`, `{ "a" : [1, {"b":"}"}] , "c":"]" }`, `[{"k":"\"{["},[[]],-0.5,"x"]`,
		`{"Event":"x$QueryProgressEvent","progress":{"id":"q","sources":[{"endOffset":"{\"t\":{\"0\":1}}"}]}}`,
	}
	for _, v := range values {
		d := []byte(v + ` ,`)
		want, err := skipValue(d, 0, 0)
		if err != nil {
			t.Fatalf("%s is not valid: %v", v, err)
		}
		got, err := skipValueTrusted(d, 0)
		if err != nil || got != want {
			t.Errorf("skipValueTrusted(%s) = %d, %v; want %d", v, got, err, want)
		}
		switch v[0] {
		case '{':
			var a, b []string
			_, _ = eachMember(d, 0, 0, func(k []byte, esc bool, s span) error {
				a = append(a, fmt.Sprint(string(k), esc, s))
				return nil
			})
			_, err := eachMemberTrusted(d, 0, func(k []byte, esc bool, s span) error {
				b = append(b, fmt.Sprint(string(k), esc, s))
				return nil
			})
			if err != nil || fmt.Sprint(a) != fmt.Sprint(b) {
				t.Errorf("members of %s: trusted %v (%v), validating %v", v, b, err, a)
			}
		case '[':
			var a, b []span
			_, _ = eachElement(d, 0, 0, func(s span) error { a = append(a, s); return nil })
			_, err := eachElementTrusted(d, 0, func(s span) error { b = append(b, s); return nil })
			if err != nil || fmt.Sprint(a) != fmt.Sprint(b) {
				t.Errorf("elements of %s: trusted %v (%v), validating %v", v, b, err, a)
			}
		}
	}
}

// On input validation would have refused, a trusted walk returns an error
// or a position, never panics.
func TestTrustedWalkersNeverPanic(t *testing.T) {
	for _, v := range []string{``, `"`, `"abc`, `"a\"`, `{`, `{"a"`, `{"a":`, `{"a":1`, `[`, `[1,`, `{"a" 1}`, `[}`, `t`, `f`} {
		_, _ = skipValueTrusted([]byte(v), 0)
		if len(v) > 0 && v[0] == '{' {
			_, _ = eachMemberTrusted([]byte(v), 0, func([]byte, bool, span) error { return nil })
		}
		if len(v) > 0 && v[0] == '[' {
			_, _ = eachElementTrusted([]byte(v), 0, func(span) error { return nil })
		}
	}
}
