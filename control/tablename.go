package control

import (
	"errors"
	"fmt"
	"unicode"
	"unicode/utf8"
)

// MaxTableNameLen is the longest tracked-table name, in bytes, that the
// store accepts. Any longer name is refused with ErrInvalidTable before it
// reaches PostgreSQL: the name travels in the notification of every move,
// and pg_notify refuses a payload of maxNotifyPayload bytes or more. JSON
// escapes one byte of a valid name into at most six ("<" is \u003c), so
// a name of this length leaves the payload well inside the limit.
const MaxTableNameLen = 1024

// maxNotifyPayload is PostgreSQL's limit on a NOTIFY payload (the payload
// must be shorter than this many bytes in the default configuration).
const maxNotifyPayload = 8000

// CheckTableName reports why name cannot be a tracked table's name, or nil
// when it can: it must be non-empty, valid UTF-8, free of control
// characters (PostgreSQL's text refuses NUL; the others are never a
// table's name and garble logs) and of bidirectional formatting characters
// (U+202E and its kind reorder what follows them in a terminal and on the
// status page: a query named under a "bronze.{name}" rule could show
// `finalizer status` one table's name for another), and at most
// MaxTableNameLen bytes. The
// error wraps ErrInvalidTable and says why in plain words, without the
// name (which may be huge or binary).
func CheckTableName(name string) error {
	switch {
	case name == "":
		return fmt.Errorf("%w: empty", ErrInvalidTable)
	case len(name) > MaxTableNameLen:
		return fmt.Errorf("%w: %d bytes, at most %d", ErrInvalidTable, len(name), MaxTableNameLen)
	case !utf8.ValidString(name):
		return fmt.Errorf("%w: not valid UTF-8", ErrInvalidTable)
	}
	for _, r := range name {
		if unicode.IsControl(r) {
			return fmt.Errorf("%w: contains a control character (%U)", ErrInvalidTable, r)
		}
		if unicode.Is(unicode.Bidi_Control, r) {
			return fmt.Errorf("%w: contains a bidirectional formatting character (%U)", ErrInvalidTable, r)
		}
	}
	return nil
}

// ErrInvalidText means an operator's free text (who, why) holds a
// character a terminal would obey rather than print.
var ErrInvalidText = errors.New("invalid operator text")

// MaxOperatorText is the longest operator's free text (a reason, who) kept,
// in bytes: one line an operator reads in audit and status.
const MaxOperatorText = 1000

// CheckOperatorText reports why s cannot be kept as an operator's free
// text (field names it: "--reason", "by"), or nil when it can: valid UTF-8,
// at most MaxOperatorText bytes, one line of plain text without control
// characters (Cc: ESC starts a terminal's escape sequence; a newline or a
// carriage return forges lines of `finalizer audit` and `status`), format
// characters (Cf: bidirectional overrides, which reorder what an operator
// reads; zero-width and invisible characters, U+200B, U+FEFF, U+00AD,
// which hide text) or line and paragraph separators (Zl, Zp: U+2028 and
// U+2029 start a line in many viewers). `finalizer audit`, `status` and
// `feeders list` print it to an operator's terminal. The error names the
// character and its kind, and wraps ErrInvalidText.
func CheckOperatorText(field, s string) error {
	if !utf8.ValidString(s) {
		return fmt.Errorf("%w: %s is not valid UTF-8", ErrInvalidText, field)
	}
	if len(s) > MaxOperatorText {
		return fmt.Errorf("%w: %s is %d bytes long, more than %d: write it as one short line", ErrInvalidText, field, len(s), MaxOperatorText)
	}
	for _, r := range s {
		if kind := TextCharKind(r); kind != "" {
			return fmt.Errorf("%w: %s contains the %s %U; write it as plain text on one line (no escape sequences, tabs, newlines, line separators, invisible or direction characters)", ErrInvalidText, field, kind, r)
		}
	}
	return nil
}

// TextCharKind names the kind of r when an operator's free text must not
// hold it ("control character", "bidirectional formatting character",
// "invisible formatting character", "line separator", "paragraph
// separator"), or "" when it may.
func TextCharKind(r rune) string {
	switch {
	case unicode.Is(unicode.Cc, r):
		return "control character"
	case unicode.Is(unicode.Bidi_Control, r):
		return "bidirectional formatting character"
	case unicode.Is(unicode.Cf, r):
		return "invisible formatting character"
	case unicode.Is(unicode.Zl, r):
		return "line separator"
	case unicode.Is(unicode.Zp, r):
		return "paragraph separator"
	}
	return ""
}
