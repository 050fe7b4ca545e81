package control

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"
)

// PostgreSQL's array type OIDs of the sole statement's parameters.
const (
	oidTextArray        = 1009
	oidInt8Array        = 1016
	oidTimestamptzArray = 1185
)

// soleParams are the types of the sole statement's parameters, in order
// (see columns and runSole).
var soleParams = [...]uint32{oidTextArray, oidTextArray, oidTimestamptzArray, oidTimestamptzArray, oidTextArray, oidTextArray, oidInt8Array, oidTextArray, oidTextArray, oidTimestamptzArray}

// binaryFormats are the format codes of the sole statement's parameters
// and results: binary, each.
var binaryFormats = [...]int16{1, 1, 1, 1, 1, 1, 1, 1, 1, 1}

// soleDirect runs the sole statement over c on a connection of the pool,
// through the statement that connection prepared, with its ten arrays
// encoded here in PostgreSQL's binary format into one buffer sized
// beforehand, and reads what it returns with readMove. It is runSole's
// way for a group (2 advances or more) when the pool prepares statements
// (pgx's default): pgx's own encoding of 1,000 rows took each element
// through an interface, reflection for the nullable ones, and grew its
// buffers from a few hundred bytes to the group's size at every
// statement, about 5 µs per row in a burst's profile (issue 12, fourth
// pass). ok is false when the connection's statement does not take
// exactly the parameters this encodes: the caller then runs it through
// pgx.
func (s *Store) soleDirect(ctx context.Context, c *columns) (m moves, ok bool, err error) {
	conn, err := s.pool.Acquire(ctx)
	if err != nil {
		return moves{}, true, err
	}
	defer conn.Release()
	sd, err := conn.Conn().Prepare(ctx, s.sql.sole, s.sql.sole)
	if err != nil {
		return moves{}, true, err
	}
	if len(sd.ParamOIDs) != len(soleParams) {
		return moves{}, false, nil
	}
	for i, oid := range sd.ParamOIDs {
		if oid != soleParams[i] {
			return moves{}, false, nil
		}
	}
	bp, _ := soleBufs.Get().(*[]byte)
	if bp == nil {
		bp = new([]byte)
	}
	params, buf := encodeSole(c, (*bp)[:0])
	// setLockWait and the statement in one pipeline and one Sync: one
	// round trip, one implicit transaction, so the lock wait is the
	// statement's.
	pc := conn.Conn().PgConn()
	pl := pc.StartPipeline(ctx)
	pl.SendQueryParams(setLockWait, [][]byte{[]byte(s.lockWait)}, nil, nil, nil)
	// The Bind message copies the parameters into the connection's write
	// buffer, which pgx keeps at 1 KB between flushes: grown by appending
	// to the group's size (300 KB for 1,000 rows), about ten times, at
	// every statement, it was 2.5 µs per row of a burst's profile (issue
	// 12, sixth pass). Grown once, to what the statement's messages need.
	pc.Frontend().Send(reserve(len(buf) + len(sd.Name) + reserveSlack))
	pl.SendQueryPrepared(sd.Name, params, binaryFormats[:], binaryFormats[:1])
	// Bind copied the parameters (or, the pipeline closed or an encoding
	// error pending, took nothing): buf is free again.
	*bp = buf
	soleBufs.Put(bp)
	if err := pl.Sync(); err != nil {
		_ = pl.Close()
		return moves{}, true, err
	}
	m, err = readPipelined(pl, func(rr *pgconn.ResultReader) (moves, error) {
		return readMoves(rr, conn.Conn().TypeMap(), len(c.tables))
	})
	if cerr := pl.Close(); err == nil && cerr != nil {
		err = cerr
	}
	return m, true, err
}

// readPipelined reads soleDirect's pipeline up to the statement's
// result: setLockWait's (discarded), then the statement's, through read.
// The caller's Close of pl reads the Sync (and skips what an error left).
func readPipelined(pl *pgconn.Pipeline, read func(*pgconn.ResultReader) (moves, error)) (moves, error) {
	for i := range 2 {
		r, err := pl.GetResults()
		if err != nil {
			return moves{}, err
		}
		rr, ok := r.(*pgconn.ResultReader)
		if !ok {
			return moves{}, fmt.Errorf("sole statement's pipeline: result %d is %T", i, r)
		}
		if i == 1 {
			return read(rr)
		}
		if _, err := rr.Close(); err != nil {
			return moves{}, err
		}
	}
	panic("unreachable")
}

// readMoves reads what notifyAndReturn returns from rr (raw values)
// and closes it: each row through readMove when it can, else as
// scanVerdict reads it (through tm, as pgx's Scan would).
func readMoves(rr *pgconn.ResultReader, tm *pgtype.Map, n int) (moves, error) {
	m := moves{rows: make([]move, 0, n)}
	var (
		fds      []pgconn.FieldDescription
		fast     bool
		firstErr error
	)
	for rr.NextRow() {
		if fds == nil {
			fds = rr.FieldDescriptions()
			fast = fastMoves(fds)
		}
		vals := rr.Values()
		if firstErr != nil {
			continue // read to the end, then close
		}
		v, mv, solo, written, ok := Verdict{}, false, false, int64(0), false
		if fast {
			v, mv, solo, written, ok = readMove(fds, vals)
		}
		if !ok {
			var notified int64
			var err error
			v, err = scanVerdict(rawRow{tm: tm, fds: fds, vals: vals}, &mv, &notified, &solo, &written)
			if err != nil {
				firstErr = err
				continue
			}
		}
		m.set(v, mv, solo)
		m.written = written
	}
	if _, err := rr.Close(); err != nil {
		return moves{}, err
	}
	if firstErr != nil {
		return moves{}, firstErr
	}
	return m, nil
}

// rawRow is one row's raw values as a pgx.Row, scanned as pgx's Rows
// would scan them.
type rawRow struct {
	tm   *pgtype.Map
	fds  []pgconn.FieldDescription
	vals [][]byte
}

func (r rawRow) Scan(dest ...any) error {
	if len(dest) != len(r.vals) {
		return fmt.Errorf("number of field descriptions must equal number of destinations, got %d and %d", len(r.vals), len(dest))
	}
	for i, d := range dest {
		if err := r.tm.Scan(r.fds[i].DataTypeOID, r.fds[i].Format, r.vals[i], d); err != nil {
			return pgx.ScanArgError{ColumnIndex: i, FieldName: r.fds[i].Name, Err: err}
		}
	}
	return nil
}

// soleBufs are encodeSole's buffers between statements (*[]byte).
var soleBufs sync.Pool

// reserveSlack is what reserve adds to the parameters' length for the
// rest of a statement's messages: the Bind's header, its statement name
// aside, formats and lengths (under 100 bytes for ten parameters), the
// Describe, the Execute and the Sync.
const reserveSlack = 256

// reserve is a message of no bytes that grows the connection's write
// buffer to hold n more bytes at once (pgproto3.Frontend.Send); it never
// reaches the wire.
type reserve int

func (reserve) Frontend() {}

func (reserve) Decode([]byte) error { return errors.New("reserve is not a wire message") }

func (n reserve) Encode(dst []byte) ([]byte, error) { return slices.Grow(dst, int(n)), nil }

// encodeSole encodes the sole statement's parameters (tables, feeders,
// untils, ends, offsets, runs, batches, srcs, payloads, knowns) as pgx would,
// into one buffer, buf's if it is large enough (a new one otherwise),
// which it returns with them.
func encodeSole(c *columns, buf []byte) ([][]byte, []byte) {
	n := len(c.tables)
	size := 10*arrayHeaderLen + 10*4*n + 3*8*n + 8*n // headers, lengths, times, batch ids
	for i := range n {
		size += len(c.tables[i]) + len(c.feeders[i]) + len(c.payloads[i]) + lenOf(c.offsets[i]) + lenOf(c.runs[i]) + lenOf(c.srcs[i])
	}
	if cap(buf) < size {
		buf = make([]byte, 0, size)
	}
	params := make([][]byte, 0, len(soleParams))
	add := func(from int) { params = append(params, buf[from:len(buf):len(buf)]) }
	from := len(buf)
	buf = appendTexts(buf, c.tables)
	add(from)
	from = len(buf)
	buf = appendTexts(buf, c.feeders)
	add(from)
	from = len(buf)
	buf = appendTimes(buf, c.untils)
	add(from)
	from = len(buf)
	buf = appendNullTimes(buf, c.ends)
	add(from)
	from = len(buf)
	buf = appendNullTexts(buf, c.offsets)
	add(from)
	from = len(buf)
	buf = appendNullTexts(buf, c.runs)
	add(from)
	from = len(buf)
	buf = appendInt8s(buf, c.batches)
	add(from)
	from = len(buf)
	buf = appendNullTexts(buf, c.srcs)
	add(from)
	from = len(buf)
	buf = appendTexts(buf, c.payloads)
	add(from)
	from = len(buf)
	buf = appendNullTimes(buf, c.knowns)
	add(from)
	return params, buf
}

func lenOf(p *string) int {
	if p == nil {
		return 0
	}
	return len(*p)
}

// arrayHeaderLen is the length of a one-dimensional array's header in
// PostgreSQL's binary format: the dimensions, the null flag, the element
// type, the length and the lower bound.
const arrayHeaderLen = 20

// appendArrayHeader appends the header of a one-dimensional array of n
// elements of type oid, with or without NULLs.
func appendArrayHeader(buf []byte, n int, hasNull bool, oid uint32) []byte {
	null := uint32(0)
	if hasNull {
		null = 1
	}
	buf = binary.BigEndian.AppendUint32(buf, 1)
	buf = binary.BigEndian.AppendUint32(buf, null)
	buf = binary.BigEndian.AppendUint32(buf, oid)
	buf = binary.BigEndian.AppendUint32(buf, uint32(n))
	return binary.BigEndian.AppendUint32(buf, 1)
}

func appendTexts(buf []byte, ss []string) []byte {
	buf = appendArrayHeader(buf, len(ss), false, oidText)
	for _, s := range ss {
		buf = binary.BigEndian.AppendUint32(buf, uint32(len(s)))
		buf = append(buf, s...)
	}
	return buf
}

func appendNullTexts(buf []byte, ps []*string) []byte {
	hasNull := false
	for _, p := range ps {
		hasNull = hasNull || p == nil
	}
	buf = appendArrayHeader(buf, len(ps), hasNull, oidText)
	for _, p := range ps {
		if p == nil {
			buf = binary.BigEndian.AppendUint32(buf, 0xFFFFFFFF) // -1: NULL
			continue
		}
		buf = binary.BigEndian.AppendUint32(buf, uint32(len(*p)))
		buf = append(buf, *p...)
	}
	return buf
}

// appendTime appends t as pgx encodes a time.Time into a timestamptz:
// microseconds since 2000-01-01 UTC, the nanoseconds truncated.
func appendTime(buf []byte, t time.Time) []byte {
	const microsecFromUnixEpochToY2K = 946_684_800 * 1_000_000
	us := t.Unix()*1_000_000 + int64(t.Nanosecond())/1_000 - microsecFromUnixEpochToY2K
	buf = binary.BigEndian.AppendUint32(buf, 8)
	return binary.BigEndian.AppendUint64(buf, uint64(us))
}

func appendTimes(buf []byte, ts []time.Time) []byte {
	buf = appendArrayHeader(buf, len(ts), false, oidTimestamptz)
	for _, t := range ts {
		buf = appendTime(buf, t)
	}
	return buf
}

func appendNullTimes(buf []byte, ps []*time.Time) []byte {
	hasNull := false
	for _, p := range ps {
		hasNull = hasNull || p == nil
	}
	buf = appendArrayHeader(buf, len(ps), hasNull, oidTimestamptz)
	for _, p := range ps {
		if p == nil {
			buf = binary.BigEndian.AppendUint32(buf, 0xFFFFFFFF)
			continue
		}
		buf = appendTime(buf, *p)
	}
	return buf
}

func appendInt8s(buf []byte, xs []int64) []byte {
	buf = appendArrayHeader(buf, len(xs), false, oidInt8)
	for _, x := range xs {
		buf = binary.BigEndian.AppendUint32(buf, 8)
		buf = binary.BigEndian.AppendUint64(buf, uint64(x))
	}
	return buf
}
