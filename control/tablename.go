package control

import (
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
