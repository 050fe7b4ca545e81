package control

import (
	"bytes"
	"errors"
	"unicode/utf8"

	"github.com/jackc/pgx/v5/pgconn"
)

// jsonbSafe returns a JSON text that PostgreSQL's jsonb accepts and that
// means the same as raw wherever jsonb can say it. raw must be valid JSON
// (json.Valid). JSON allows, and a source's offset may hold, three things
// jsonb refuses, each of which would make every advance of the table fail:
//
//   - the escape \u0000 (SQLSTATE 22P05): stored as the six characters
//     \u0000 (the JSON text "\\u0000");
//   - a \uD800-\uDFFF escape that is not half of a surrogate pair (22P02):
//     stored as its six characters the same way;
//   - bytes that are not UTF-8 (22021): each stored as U+FFFD.
//
// raw is returned unchanged, without a copy, when it holds none of them.
func jsonbSafe(raw []byte) []byte {
	if utf8.Valid(raw) && !bytes.Contains(raw, []byte(`\u`)) {
		return raw
	}
	out := make([]byte, 0, len(raw)+16)
	inString := false
	for i := 0; i < len(raw); {
		c := raw[i]
		switch {
		case !inString:
			if c == '"' {
				inString = true
			}
			out = append(out, c)
			i++
		case c == '"':
			inString = false
			out = append(out, c)
			i++
		case c == '\\' && i+1 < len(raw) && raw[i+1] == 'u' && i+6 <= len(raw):
			code, ok := hex4(raw[i+2 : i+6])
			if !ok { // not valid JSON; leave it to PostgreSQL to refuse
				out = append(out, raw[i:i+6]...)
				i += 6
				continue
			}
			switch {
			case code == 0:
				out = append(out, `\\`...)
				out = append(out, raw[i+1:i+6]...)
				i += 6
			case code >= 0xD800 && code <= 0xDBFF: // high surrogate: needs a low one next
				if i+12 <= len(raw) && raw[i+6] == '\\' && raw[i+7] == 'u' {
					if low, ok := hex4(raw[i+8 : i+12]); ok && low >= 0xDC00 && low <= 0xDFFF {
						out = append(out, raw[i:i+12]...)
						i += 12
						continue
					}
				}
				out = append(out, `\\`...)
				out = append(out, raw[i+1:i+6]...)
				i += 6
			case code >= 0xDC00 && code <= 0xDFFF: // a low surrogate on its own
				out = append(out, `\\`...)
				out = append(out, raw[i+1:i+6]...)
				i += 6
			default:
				out = append(out, raw[i:i+6]...)
				i += 6
			}
		case c == '\\' && i+1 < len(raw):
			out = append(out, raw[i:i+2]...)
			i += 2
		case c < utf8.RuneSelf:
			out = append(out, c)
			i++
		default:
			r, n := utf8.DecodeRune(raw[i:])
			if r == utf8.RuneError && n == 1 {
				out = append(out, `\ufffd`...)
			} else {
				out = append(out, raw[i:i+n]...)
			}
			i += n
		}
	}
	return out
}

// hex4 decodes four hex digits.
func hex4(b []byte) (rune, bool) {
	var r rune
	for _, c := range b {
		switch {
		case c >= '0' && c <= '9':
			r = r<<4 | rune(c-'0')
		case c >= 'a' && c <= 'f':
			r = r<<4 | rune(c-'a'+10)
		case c >= 'A' && c <= 'F':
			r = r<<4 | rune(c-'A'+10)
		default:
			return 0, false
		}
	}
	return r, true
}

// offsetRefused reports whether PostgreSQL refused a value as jsonb or
// text: bad JSON (22P02), an escape it cannot store (22P05), or bytes not
// valid in the database's encoding (22021).
func offsetRefused(err error) bool {
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) {
		return false
	}
	switch pgErr.Code {
	case "22P02", "22P05", "22021":
		return true
	}
	return false
}
