package main

import (
	"fmt"
	"io"
	"strings"
	"unicode/utf8"

	"github.com/finalizer-dev/finalizer/control"
)

// escapeRune writes r as an escape a terminal prints rather than obeys:
// \u001b for ESC, \u202e for a bidirectional override. It is also a valid
// escape inside a JSON string, so JSON output stays JSON.
func escapeRune(b *strings.Builder, r rune) {
	fmt.Fprintf(b, `\u%04x`, r)
}

// hostile reports whether r must not reach a terminal as it is: what an
// operator's free text may not hold (control.TextCharKind: control,
// format, line and paragraph separator characters, U+2028 and the
// invisible U+200B included).
func hostile(r rune) bool {
	return control.TextCharKind(r) != ""
}

// field is a free-text value read from the database (a reason, a mark, a
// query name, a table name written by hand in SQL) as the commands print
// it in a column: every control character escaped, newlines included, so
// that it can neither drive the terminal nor forge a line.
func field(s string) string {
	if strings.IndexFunc(s, hostile) < 0 && utf8.ValidString(s) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); {
		r, n := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && n == 1:
			fmt.Fprintf(&b, `\x%02x`, s[i])
		case hostile(r):
			escapeRune(&b, r)
		default:
			b.WriteString(s[i : i+n])
		}
		i += n
	}
	return b.String()
}

// safeWriter escapes, in what the commands that print the database's free
// text write (audit, status, feeders, rewind), every control character but
// the newline, so that a row written before the input was checked, or by
// hand in SQL, cannot drive the operator's terminal; field also escapes
// the newlines of a value. A rune split across two writes is kept until
// the next one; Flush writes what is left.
type safeWriter struct {
	w    io.Writer
	part []byte // the start of a rune the last write ended in
}

func newSafeWriter(w io.Writer) *safeWriter { return &safeWriter{w: w} }

func (s *safeWriter) Write(p []byte) (int, error) {
	buf := append(s.part, p...)
	s.part = nil
	end := len(buf)
	// Keep an incomplete rune at the end for the next write.
	for k := 1; k <= utf8.UTFMax-1 && k <= len(buf); k++ {
		if utf8.RuneStart(buf[len(buf)-k]) {
			if !utf8.FullRune(buf[len(buf)-k:]) {
				end = len(buf) - k
			}
			break
		}
	}
	s.part = append([]byte(nil), buf[end:]...)
	if _, err := io.WriteString(s.w, escapeLines(string(buf[:end]))); err != nil {
		return 0, err
	}
	return len(p), nil
}

// Flush writes what is left of a rune the last write ended in, escaped.
func (s *safeWriter) Flush() error {
	if len(s.part) == 0 {
		return nil
	}
	part := s.part
	s.part = nil
	_, err := io.WriteString(s.w, field(string(part)))
	return err
}

// escapeLines is field for each line of s: the newlines are kept.
func escapeLines(s string) string {
	if strings.IndexFunc(s, func(r rune) bool { return r != '\n' && hostile(r) }) < 0 && utf8.ValidString(s) {
		return s
	}
	lines := strings.Split(s, "\n")
	for i, l := range lines {
		lines[i] = field(l)
	}
	return strings.Join(lines, "\n")
}
