package control

import (
	"encoding/binary"
	"encoding/json"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// PostgreSQL's type OIDs of the columns notifyAndReturn returns.
const (
	oidBool        = 16
	oidInt8        = 20
	oidInt4        = 23
	oidText        = 25
	oidTimestamptz = 1184
	oidJSONB       = 3802
)

// moveColumns are the types of what notifyAndReturn returns, in order:
// moved, readColumns, notified, solo, written; notified and written are
// integer or bigint (a literal 0 or a count), see intColumn.
var moveColumns = [...]uint32{
	oidBool,
	oidText, oidTimestamptz, oidTimestamptz, oidJSONB, oidText, oidText, oidInt8, oidJSONB, oidTimestamptz, // verdictColumns
	oidText, oidTimestamptz, oidInt8, oidTimestamptz, // markColumns
	oidInt8, oidBool, oidInt8,
}

// fastMoves reports whether readMove can decode rows of these columns:
// the types notifyAndReturn returns, each in the format pgx asks for
// (binary, but text and jsonb, whose text is the same either way).
func fastMoves(fds []pgconn.FieldDescription) bool {
	if len(fds) != len(moveColumns) {
		return false
	}
	for i, fd := range fds {
		if fd.DataTypeOID != moveColumns[i] && !(intColumn(i) && fd.DataTypeOID == oidInt4) {
			return false
		}
		if fd.Format != pgx.BinaryFormatCode && fd.DataTypeOID != oidText && fd.DataTypeOID != oidJSONB {
			return false
		}
	}
	return true
}

// readMove decodes one row of notifyAndReturn, whose columns fastMoves
// accepted, from its raw values, without reflection: a group commit reads
// one per table it moved (1,000 at the top of a period), and scanVerdict
// through pgx's Scan cost about 4 µs each (issue 12). It returns what
// scanVerdict returns for the row, or ok false for a value it does not
// read (a NULL where scanVerdict fails, an infinite time, a jsonb of
// another version), which the caller then scans with scanVerdict.
func readMove(fds []pgconn.FieldDescription, vals [][]byte) (v Verdict, moved, solo bool, written int64, ok bool) {
	if len(vals) != len(moveColumns) {
		return Verdict{}, false, false, 0, false
	}
	ok = true
	b := func(i int) bool {
		if len(vals[i]) != 1 {
			ok = false
			return false
		}
		return vals[i][0] != 0
	}
	i8 := func(i int) int64 {
		switch {
		case fds[i].DataTypeOID == oidInt4 && len(vals[i]) == 4:
			return int64(int32(binary.BigEndian.Uint32(vals[i])))
		case fds[i].DataTypeOID == oidInt8 && len(vals[i]) == 8:
			return int64(binary.BigEndian.Uint64(vals[i]))
		}
		ok = false
		return 0
	}
	str := func(i int) string { return string(vals[i]) }
	ts := func(i int) time.Time {
		if vals[i] == nil {
			return time.Time{}
		}
		t, good := binaryTime(vals[i])
		if !good {
			ok = false
		}
		return t
	}
	js := func(i int) []byte {
		src := vals[i]
		if src == nil || fds[i].Format == pgx.TextFormatCode {
			return src
		}
		if len(src) == 0 || src[0] != 1 {
			ok = false
			return nil
		}
		return src[1:]
	}
	if vals[0] == nil || vals[1] == nil || vals[9] == nil || vals[12] == nil || vals[14] == nil || vals[15] == nil || vals[16] == nil {
		return Verdict{}, false, false, 0, false // scanVerdict's error
	}
	moved = b(0)
	v.Table = str(1)
	v.FinalizedUntil = ts(2)
	v.EndTime = ts(3)
	if off := js(4); len(off) > 0 {
		v.EndOffset = json.RawMessage(append([]byte(nil), off...))
	}
	v.QueryID, v.RunID = str(5), str(6)
	if vals[7] != nil {
		v.BatchID = i8(7)
	}
	if srcs := js(8); len(srcs) > 0 {
		v.Sources = readSources(srcs)
	}
	v.UpdatedAt = ts(9)
	v.Mark = str(10)
	v.MarkedAt = ts(11)
	v.Marks = i8(12)
	v.RewoundAt = ts(13)
	i8(14) // notified: read only for its effect in the statement
	solo = b(15)
	written = i8(16)
	if !ok {
		return Verdict{}, false, false, 0, false
	}
	return v, moved, solo, written, true
}

// intColumn reports whether column i of notifyAndReturn is notified or
// written, which the statements return as integer or bigint.
func intColumn(i int) bool { return i == 14 || i == 16 }

// binaryTime decodes a timestamptz in PostgreSQL's binary format as pgx
// does, in UTC; good is false for an infinite one (which pgx does not
// scan into a time.Time).
func binaryTime(src []byte) (t time.Time, good bool) {
	const (
		microsecFromUnixEpochToY2K = 946_684_800 * 1_000_000
		infinity                   = 9223372036854775807
		negativeInfinity           = -9223372036854775808
	)
	if len(src) != 8 {
		return time.Time{}, false
	}
	us := int64(binary.BigEndian.Uint64(src))
	if us == infinity || us == negativeInfinity {
		return time.Time{}, false
	}
	return time.Unix(microsecFromUnixEpochToY2K/1_000_000+us/1_000_000,
		(microsecFromUnixEpochToY2K%1_000_000*1_000)+(us%1_000_000*1_000)).UTC(), true
}

// readSources is what scanVerdict's json.Unmarshal of a sources column
// (sourcesJSON's array of strings, as jsonb writes it back) leaves in a
// []string, without encoding/json when the array holds only strings that
// need no decoding (plainString); anything else goes to encoding/json
// (FuzzReadSources: the same result on every input).
func readSources(src []byte) []string {
	if out, ok := plainSources(string(src)); ok {
		return out
	}
	var out []string
	_ = json.Unmarshal(src, &out)
	return out
}

// plainSources reads s when it is a JSON array of plain strings
// (plainString), with the spacing jsonb or encoding/json writes (none, or
// blanks around the brackets and commas); ok is false for anything else.
func plainSources(s string) (out []string, ok bool) {
	s = trimSpace(s)
	if len(s) < 2 || s[0] != '[' || s[len(s)-1] != ']' {
		return nil, false
	}
	s = trimSpace(s[1 : len(s)-1])
	out = []string{}
	if s == "" {
		return out, true
	}
	for {
		if len(s) == 0 || s[0] != '"' {
			return nil, false
		}
		str, rest, ok := plainString(s[1:])
		if !ok {
			return nil, false
		}
		out = append(out, str)
		s = trimSpace(rest[1:]) // past the closing quote
		if s == "" {
			return out, true
		}
		if s[0] != ',' {
			return nil, false
		}
		s = trimSpace(s[1:])
	}
}

// trimSpace trims JSON's white space (space, tab, newline, carriage
// return) from both ends of s.
func trimSpace(s string) string {
	isSpace := func(c byte) bool { return c == ' ' || c == '\t' || c == '\n' || c == '\r' }
	for len(s) > 0 && isSpace(s[0]) {
		s = s[1:]
	}
	for len(s) > 0 && isSpace(s[len(s)-1]) {
		s = s[:len(s)-1]
	}
	return s
}
