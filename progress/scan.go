package progress

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math/bits"
	"unicode/utf16"
	"unicode/utf8"
)

// This file is a small JSON scanner over a byte slice: it validates and
// skips values and walks object members without building maps, so that
// Parse reads only the few fields an Event needs. Its grammar is RFC 8259's,
// as encoding/json accepts it (strings are not checked for valid UTF-8;
// decoding replaces invalid bytes with U+FFFD, as encoding/json does).

// maxDepth bounds the nesting of arrays and objects, as encoding/json does.
const maxDepth = 10000

// syntaxError is a JSON syntax error at a byte offset.
type syntaxError struct {
	off int
	msg string
}

func (e *syntaxError) Error() string {
	return fmt.Sprintf("invalid JSON at byte %d: %s", e.off, e.msg)
}

func errAt(off int, msg string) error { return &syntaxError{off: off, msg: msg} }

// errDepth is returned (wrapped in a syntaxError) for too deep nesting.
var errDepth = errors.New("nesting too deep")

// span is the extent d[s:e] of one JSON value; e == 0 means absent.
type span struct{ s, e int }

func (sp span) present() bool { return sp.e > 0 }

func isWS(c byte) bool { return c == ' ' || c == '\t' || c == '\n' || c == '\r' }

// skipWS returns the index of the first non-whitespace byte at or after i.
func skipWS(d []byte, i int) int {
	for i < len(d) && isWS(d[i]) {
		i++
	}
	return i
}

// skipValue validates the value starting at d[i] (no leading whitespace)
// and returns the index just after it.
func skipValue(d []byte, i, depth int) (int, error) {
	if i >= len(d) {
		return i, errAt(i, "unexpected end of input")
	}
	switch c := d[i]; {
	case c == '"':
		end, _, err := skipString(d, i)
		return end, err
	case c == '{':
		return eachMember(d, i, depth, nil)
	case c == '[':
		return eachElement(d, i, depth, nil)
	case c == '-' || (c >= '0' && c <= '9'):
		return skipNumber(d, i)
	case c == 't':
		return skipLiteral(d, i, "true")
	case c == 'f':
		return skipLiteral(d, i, "false")
	case c == 'n':
		return skipLiteral(d, i, "null")
	default:
		return i, errAt(i, fmt.Sprintf("unexpected character %q", c))
	}
}

func skipLiteral(d []byte, i int, lit string) (int, error) {
	if len(d)-i < len(lit) || string(d[i:i+len(lit)]) != lit {
		return i, errAt(i, "invalid literal")
	}
	return i + len(lit), nil
}

// skipString validates the string starting at d[i] ('"') and returns the
// index after its closing quote and whether it holds a backslash escape.
// It goes eight bytes at a time to the next quote, backslash or control
// character (specials).
func skipString(d []byte, i int) (end int, escaped bool, err error) {
	j := i + 1
	for {
		if j+8 <= len(d) {
			m := specials(binary.LittleEndian.Uint64(d[j:]))
			if m == 0 {
				j += 8
				continue
			}
			j += bits.TrailingZeros64(m) >> 3
		} else {
			for j < len(d) && d[j] != '"' && d[j] != '\\' && d[j] >= 0x20 {
				j++
			}
			if j >= len(d) {
				return j, escaped, errAt(j, "unterminated string")
			}
		}
		switch c := d[j]; {
		case c == '"':
			return j + 1, escaped, nil
		case c == '\\':
			escaped = true
			if j+1 >= len(d) {
				return j, escaped, errAt(j, "unexpected end of input in string")
			}
			switch d[j+1] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
				j += 2
			case 'u':
				if len(d)-j < 6 {
					return j, escaped, errAt(j, "short \\u escape")
				}
				for k := j + 2; k < j+6; k++ {
					if unhex(d[k]) < 0 {
						return k, escaped, errAt(k, "invalid \\u escape")
					}
				}
				j += 6
			default:
				return j, escaped, errAt(j, "invalid escape")
			}
		default: // below 0x20
			return j, escaped, errAt(j, "control character in string")
		}
	}
}

// specials returns a mask of the bytes of x (eight bytes of a string, the
// first in the lowest bits) that are a quote, a backslash or below 0x20:
// the high bit of each such byte. Bytes above (after) the first one may be
// marked wrongly; the lowest mark is always the first such byte, and x has
// none exactly when the mask is 0 (the classic has-zero-byte and
// has-less-than tests).
func specials(x uint64) uint64 {
	const ones, highs = 0x0101010101010101, 0x8080808080808080
	q := x ^ (ones * '"')
	b := x ^ (ones * '\\')
	return ((q-ones)&^q | (b-ones)&^b | (x-ones*0x20)&^x) & highs
}

func unhex(c byte) int {
	switch {
	case c >= '0' && c <= '9':
		return int(c - '0')
	case c >= 'a' && c <= 'f':
		return int(c-'a') + 10
	case c >= 'A' && c <= 'F':
		return int(c-'A') + 10
	}
	return -1
}

// skipNumber validates the number starting at d[i] and returns the index
// after it.
func skipNumber(d []byte, i int) (int, error) {
	j := i
	if j < len(d) && d[j] == '-' {
		j++
	}
	switch {
	case j < len(d) && d[j] == '0':
		j++
	case j < len(d) && d[j] >= '1' && d[j] <= '9':
		for j < len(d) && d[j] >= '0' && d[j] <= '9' {
			j++
		}
	default:
		return j, errAt(j, "invalid number")
	}
	if j < len(d) && d[j] == '.' {
		j++
		k := j
		for j < len(d) && d[j] >= '0' && d[j] <= '9' {
			j++
		}
		if j == k {
			return j, errAt(j, "invalid number")
		}
	}
	if j < len(d) && (d[j] == 'e' || d[j] == 'E') {
		j++
		if j < len(d) && (d[j] == '+' || d[j] == '-') {
			j++
		}
		k := j
		for j < len(d) && d[j] >= '0' && d[j] <= '9' {
			j++
		}
		if j == k {
			return j, errAt(j, "invalid number")
		}
	}
	return j, nil
}

// memberFunc receives one object member: the key token (with its quotes),
// whether it holds an escape, and the value's span.
type memberFunc func(key []byte, escaped bool, v span) error

// eachMember validates the object starting at d[i] ('{'), calls fn (if
// not nil) for each member in order, and returns the index after the
// object. depth is the nesting depth outside the object.
func eachMember(d []byte, i, depth int, fn memberFunc) (int, error) {
	if depth++; depth > maxDepth {
		return i, errAt(i, errDepth.Error())
	}
	j := skipWS(d, i+1)
	if j < len(d) && d[j] == '}' {
		return j + 1, nil
	}
	for {
		if j >= len(d) || d[j] != '"' {
			return j, errAt(j, "want an object key")
		}
		ke, esc, err := skipString(d, j)
		if err != nil {
			return ke, err
		}
		key := d[j:ke]
		j = skipWS(d, ke)
		if j >= len(d) || d[j] != ':' {
			return j, errAt(j, "want ':' after object key")
		}
		vs := skipWS(d, j+1)
		ve, err := skipValue(d, vs, depth)
		if err != nil {
			return ve, err
		}
		if fn != nil {
			if err := fn(key, esc, span{vs, ve}); err != nil {
				return ve, err
			}
		}
		j = skipWS(d, ve)
		if j < len(d) && d[j] == ',' {
			j = skipWS(d, j+1)
			continue
		}
		if j < len(d) && d[j] == '}' {
			return j + 1, nil
		}
		return j, errAt(j, "want ',' or '}' in object")
	}
}

// eachElement is eachMember for arrays: fn gets each element's span.
func eachElement(d []byte, i, depth int, fn func(v span) error) (int, error) {
	if depth++; depth > maxDepth {
		return i, errAt(i, errDepth.Error())
	}
	j := skipWS(d, i+1)
	if j < len(d) && d[j] == ']' {
		return j + 1, nil
	}
	for {
		ve, err := skipValue(d, j, depth)
		if err != nil {
			return ve, err
		}
		if fn != nil {
			if err := fn(span{j, ve}); err != nil {
				return ve, err
			}
		}
		j = skipWS(d, ve)
		if j < len(d) && d[j] == ',' {
			j = skipWS(d, j+1)
			continue
		}
		if j < len(d) && d[j] == ']' {
			return j + 1, nil
		}
		return j, errAt(j, "want ',' or ']' in array")
	}
}

// validDocument reports whether d is exactly one JSON value, with optional
// surrounding whitespace.
func validDocument(d []byte) bool {
	i := skipWS(d, 0)
	end, err := skipValue(d, i, 0)
	return err == nil && skipWS(d, end) == len(d)
}

// keyIs reports whether the key token (with quotes) names want.
func keyIs(key []byte, escaped bool, want string) bool {
	if !escaped {
		return string(key[1:len(key)-1]) == want
	}
	return string(appendUnquoted(nil, key)) == want
}

// stringValue decodes a validated string token (with quotes).
func stringValue(tok []byte) string {
	body := tok[1 : len(tok)-1]
	if plainString(body) {
		return string(body)
	}
	return string(appendUnquoted(nil, tok))
}

// plainString reports whether body needs no decoding: no escapes and valid
// UTF-8.
func plainString(body []byte) bool {
	for _, c := range body {
		if c == '\\' || c >= utf8.RuneSelf {
			if c == '\\' {
				return false
			}
			return utf8.Valid(body)
		}
	}
	return true
}

// appendUnquoted appends the decoded contents of a validated string token
// (with quotes) to dst. Like encoding/json, it replaces invalid UTF-8 and
// unpaired surrogates with U+FFFD.
func appendUnquoted(dst, tok []byte) []byte {
	s := tok[1 : len(tok)-1]
	for i := 0; i < len(s); {
		c := s[i]
		switch {
		case c == '\\':
			switch s[i+1] {
			case 'b':
				dst = append(dst, '\b')
			case 'f':
				dst = append(dst, '\f')
			case 'n':
				dst = append(dst, '\n')
			case 'r':
				dst = append(dst, '\r')
			case 't':
				dst = append(dst, '\t')
			case 'u':
				r := hex4(s[i+2:])
				i += 6
				if utf16.IsSurrogate(r) {
					if len(s)-i >= 6 && s[i] == '\\' && s[i+1] == 'u' {
						if r2 := utf16.DecodeRune(r, hex4(s[i+2:])); r2 != utf8.RuneError {
							dst = utf8.AppendRune(dst, r2)
							i += 6
							continue
						}
					}
					r = utf8.RuneError
				}
				dst = utf8.AppendRune(dst, r)
				continue
			default: // '"', '\\', '/'
				dst = append(dst, s[i+1])
			}
			i += 2
		case c < utf8.RuneSelf:
			dst = append(dst, c)
			i++
		default:
			r, size := utf8.DecodeRune(s[i:])
			if r == utf8.RuneError && size == 1 {
				dst = utf8.AppendRune(dst, utf8.RuneError)
			} else {
				dst = append(dst, s[i:i+size]...)
			}
			i += size
		}
	}
	return dst
}

func hex4(b []byte) rune {
	return rune(unhex(b[0])<<12 | unhex(b[1])<<8 | unhex(b[2])<<4 | unhex(b[3]))
}

// appendCompact appends the validated JSON value v to dst without
// insignificant whitespace. Numbers and strings are copied byte for byte.
func appendCompact(dst, v []byte) []byte {
	inString := false
	start := 0
	for i := 0; i < len(v); i++ {
		c := v[i]
		if inString {
			switch c {
			case '\\':
				i++
			case '"':
				inString = false
			}
			continue
		}
		switch {
		case c == '"':
			inString = true
		case isWS(c):
			dst = append(dst, v[start:i]...)
			start = i + 1
		}
	}
	return append(dst, v[start:]...)
}

// parseInt64 parses a validated JSON number that must be an integer in
// int64's range.
func parseInt64(b []byte) (int64, bool) {
	neg := false
	if len(b) > 0 && b[0] == '-' {
		neg = true
		b = b[1:]
	}
	if len(b) == 0 || len(b) > 19 {
		return 0, false
	}
	var u uint64
	for _, c := range b {
		if c < '0' || c > '9' {
			return 0, false
		}
		u = u*10 + uint64(c-'0')
	}
	switch {
	case !neg && u <= 1<<63-1:
		return int64(u), true
	case neg && u <= 1<<63:
		return int64(-u), true
	}
	return 0, false
}
