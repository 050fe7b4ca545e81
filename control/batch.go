package control

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"go.uber.org/zap"
)

// AdvanceResult is the outcome of one Advance of an AdvanceBatch: what
// Advance would have returned for it.
type AdvanceResult struct {
	Verdict Verdict
	Moved   bool
	Err     error
}

// feederKey is one feeder of one table.
type feederKey struct{ table, feeder string }

// AdvanceBatch applies many advances at once: the group commit of
// advances that land at the same moment (ADR 0008). Each advance is
// treated as Advance treats it (the feeder's watermark and the table's
// verdict move forward-only, a notification per moved table in the same
// transaction), and its result is at the same index of the returned
// slice. Advances of the same feeder of a table are applied as if one
// after the other, highest candidate first; advances of several feeders
// of one table move the table once, to the lowest watermark, and the
// first of them reports the move.
//
// It takes one round trip when every table is solo (one feeder, its
// watermark in the table's row, ADR 0015): the sole statement, one row
// written per moved table. The advances it does not apply (a table's
// first verdict, a table with several feeders, another query's advance of
// a solo table, several feeders of one table in the batch) take one more:
// one transaction of four statements (the tables' advisory locks, their
// rows' locks, the promotion of solo tables another query joins, the
// advance through the feeders table), so that each table moves to the
// lowest watermark of its feeders as they stand.
//
// An advance guarded by its sender's known rewind (Advance.Guard) whose
// table was rewound since moves nothing, and its result carries
// ErrBeforeRewind with the table's row (its RewoundAt the later rewind);
// the others of the group are applied as usual. Of several advances of
// one feeder of a table, the one sent is the one that knew the latest
// rewind, then the highest candidate.
//
// An invalid advance gets ErrInvalidAdvance in its result and is not sent.
// One advance the database refuses never fails the others, whatever the
// error: when a statement fails for any reason but the database's
// availability, the batch is applied again in halves, down to single
// advances (an EndOffset the database refuses is then dropped), so that k
// refused advances cost about k·log2(n) statements and only they carry an
// error.
//
// The returned error is for the batch as a whole: PostgreSQL unreachable
// (ErrUnavailable), no control table (ErrNotMigrated), the store closed
// (ErrClosed) or ctx done. Then the advances not applied before it carry
// it in their results; those applied before it (by earlier statements)
// carry their own.
func (s *Store) AdvanceBatch(ctx context.Context, as []Advance) ([]AdvanceResult, error) {
	return s.advanceAll(ctx, as, "")
}

// advanceAll is Advance and AdvanceBatch: it validates the advances, keeps
// the highest candidate of each feeder of a table, applies them and
// assembles the results. op names the call in an error of the whole; ""
// names a batch.
func (s *Store) advanceAll(ctx context.Context, as []Advance, op string) ([]AdvanceResult, error) {
	res := make([]AdvanceResult, len(as))
	if s.closed.Load() {
		if op == "" {
			op = "advance batch"
		}
		err := fmt.Errorf("%s: %w", op, ErrClosed)
		for i := range res {
			res[i].Err = err
		}
		return res, err
	}
	b := &batch{as: as, rows: rowIndex{rows: make([]keyedRow, 0, len(as))}}
	var order []feederKey
	for i, a := range as {
		r, err := newBatchRow(i, a)
		if err != nil {
			res[i].Err = err
			continue
		}
		k := feederKey{a.Table, a.QueryID}
		prev := b.rows.get(k)
		if prev != nil && !keepOver(a, r, b.as[prev.i], prev) {
			continue
		}
		if prev == nil {
			order = append(order, k)
		}
		b.rows.put(k, r)
	}
	if len(order) == 0 {
		return res, nil
	}
	sort.Slice(order, func(x, y int) bool {
		if order[x].table != order[y].table {
			return order[x].table < order[y].table
		}
		return order[x].feeder < order[y].feeder
	})
	b.tables.rows = make([]move, 0, len(order))
	batchErr := s.applyBatch(ctx, b, order, true)
	if batchErr != nil {
		if op == "" {
			op = fmt.Sprintf("advance batch of %d feeders", len(order))
		}
		batchErr = wrap(ctx, op, batchErr)
	}
	var reported map[string]bool // tables whose move a result reported, when several advances share one
	for i, a := range as {
		if res[i].Err != nil {
			continue
		}
		k := feederKey{a.Table, a.QueryID}
		r := b.rows.get(k)
		var v Verdict
		t := b.tables.get(a.Table)
		ok := t != nil
		if ok {
			v = t.v
		}
		switch {
		case r.failed != nil:
			res[i].Err = r.failed
		case !r.applied && batchErr != nil:
			res[i].Err = batchErr
		case ok && a.Guard.Refuses(v.RewoundAt):
			// The statement read the row rewound after what the advance
			// knew, and so moved nothing for it (a row sent for another
			// advance of the feeder, which knew a later rewind, may have
			// moved: this one would have been refused all the same).
			res[i] = AdvanceResult{Verdict: v, Err: beforeRewind(a, v)}
		default:
			if !ok {
				v = Verdict{Table: a.Table} // held before its first verdict
			}
			mv := ok && t.moved && r.i == i && !reported[a.Table]
			if mv && len(b.rows.rows) > 1 {
				if reported == nil {
					reported = make(map[string]bool)
				}
				reported[a.Table] = true
			}
			res[i] = AdvanceResult{Verdict: v, Moved: mv}
		}
	}
	return res, batchErr
}

// keepOver reports whether a (row r) is the advance to send for its
// feeder of its table rather than prev (row pr), the one kept so far: the
// one that knows the later rewind (an advance that knew an earlier one is
// refused anyway, the table's rewound_at being at least the later one's),
// then the higher candidate.
func keepOver(a Advance, r *batchRow, prev Advance, pr *batchRow) bool {
	switch {
	case a.Guard.later(prev.Guard):
		return true
	case prev.Guard.later(a.Guard):
		return false
	}
	return r.until.After(pr.until)
}

// beforeRewind is the error of an advance a refused because its table
// was rewound after the rewind it knew (v, the row the statement read).
func beforeRewind(a Advance, v Verdict) error {
	known := "none"
	if k := a.Guard.Known(); !k.IsZero() {
		known = k.Format(time.RFC3339Nano)
	}
	return fmt.Errorf("advance %s to %s: %w (the table was rewound at %s; the advance knew of the rewind at %s)",
		a.Table, a.FinalizedUntil.UTC().Format(time.RFC3339Nano), ErrBeforeRewind, v.RewoundAt.Format(time.RFC3339Nano), known)
}

// batch is the state of one AdvanceBatch across its statements.
type batch struct {
	as   []Advance
	rows rowIndex // the row sent for each feeder of a table: its highest candidate
	// tables are the table rows the statements returned for the feeders
	// they applied (solo unused), moved when any of them moved the
	// table. One moves rather than two maps (issue 12, third session): a
	// crossing's group of one advance allocates no map for them.
	tables moves
}

// rowIndex is a batch's rows by feeder, in the order first put; looked
// up by a scan while they are at most movesScan, through an index made
// at the first lookup past that (a crossing's group of one advance
// allocates no map, issue 12, third session).
type rowIndex struct {
	rows  []keyedRow
	index map[feederKey]int
}

type keyedRow struct {
	k feederKey
	r *batchRow
}

// get returns k's row, nil when none.
func (x *rowIndex) get(k feederKey) *batchRow {
	if i := x.find(k); i >= 0 {
		return x.rows[i].r
	}
	return nil
}

func (x *rowIndex) find(k feederKey) int { return lookup(x.rows, &x.index, (*keyedRow).key, k) }

func (r *keyedRow) key() feederKey { return r.k }

// lookup returns the position in rows of the element whose key is k, -1
// when none: by a scan while rows are at most movesScan, through *index
// past that, made (from rows, at their capacity) at the first such
// lookup. The caller adds to *index what it appends to rows once it is
// made. rowIndex and moves look their rows up through it.
func lookup[K comparable, E any](rows []E, index *map[K]int, key func(*E) K, k K) int {
	if *index == nil && len(rows) > movesScan {
		*index = make(map[K]int, cap(rows))
		for i := range rows {
			(*index)[key(&rows[i])] = i
		}
	}
	if *index != nil {
		if i, ok := (*index)[k]; ok {
			return i
		}
		return -1
	}
	for i := range rows {
		if key(&rows[i]) == k {
			return i
		}
	}
	return -1
}

// put makes r k's row, replacing one put before.
func (x *rowIndex) put(k feederKey, r *batchRow) {
	if i := x.find(k); i >= 0 {
		x.rows[i].r = r
		return
	}
	if x.index != nil {
		x.index[k] = len(x.rows)
	}
	x.rows = append(x.rows, keyedRow{k: k, r: r})
}

// batchRow is the row of one feeder of one table in a batch.
type batchRow struct {
	i       int // index into as
	until   time.Time
	offset  *string
	sources *string
	payload string // the notification up to the time (payloadPrefix)
	applied bool   // its advance committed
	failed  error  // its own advance failed (not the batch's)
}

// newBatchRow validates a (the i-th advance) and returns its row.
func newBatchRow(i int, a Advance) (*batchRow, error) {
	until, payload, err := a.check()
	if err != nil {
		return nil, err
	}
	r := &batchRow{i: i, until: until, payload: payload}
	if srcs, err := sourcesJSON(a.Sources); err != nil {
		return nil, fmt.Errorf("advance %s: %w", a.Table, err)
	} else if srcs != nil {
		str := srcs.(string)
		r.sources = &str
	}
	if len(a.EndOffset) > 0 {
		off := string(jsonbSafe(a.EndOffset))
		r.offset = &off
	}
	return r, nil
}

// applyBatch applies the rows of the feeders in order (sorted) and records
// what the statements returned in b. When a statement fails for a reason
// that may be one row's, it applies each half in turn; a single feeder
// left whose end offset the database refused is applied again without it
// (the offset is provenance; the verdict must not wait on it), and a
// failure of its own is recorded in b.failed. It returns only an error of
// the batch as a whole (see batchWide), at which point it stops.
func (s *Store) applyBatch(ctx context.Context, b *batch, order []feederKey, top bool) error {
	err := s.apply(ctx, b, order)
	switch {
	case err == nil:
		return nil
	case batchWide(ctx, err):
		return err
	}
	if lockTimedOut(err) {
		// Another session holds a lock this group waited for: apply
		// the tables it does not hold, fail the ones it does (ErrBusy),
		// rather than have one open transaction fail the whole group or
		// cost a lock wait per halving.
		if done, err := s.isolateBusy(ctx, b, order, err); done {
			return err
		}
	}
	switch {
	case len(order) == 1:
		k := order[0]
		if r := b.rows.get(k); r.offset != nil && offsetRefused(err) {
			// A database whose encoding is not UTF-8 refuses more than
			// jsonbSafe knows.
			s.log.Warn("postgresql refused the end offset; advancing without it",
				zap.String("table", k.table), zap.String("run_id", b.as[r.i].RunID), zap.Error(err))
			r.offset = nil
			if err = s.apply(ctx, b, order); err == nil {
				return nil
			}
			if batchWide(ctx, err) {
				return err
			}
		}
		if lockTimedOut(err) {
			// Alone, it still waited too long for a lock the probe
			// could not see: a row another session inserted and has
			// not committed (an INSERT in an open transaction). Busy
			// like the others, so that its retries are sent alone
			// rather than found again by halving, a lock wait per
			// level, in every group they ride in.
			b.rows.get(k).failed = fmt.Errorf("advance %s: %w (waited more than lock_timeout %s; an open transaction that inserted its row? see pg_stat_activity, state 'idle in transaction'): %w",
				k.table, ErrBusy, s.lockWait, err)
			return nil
		}
		b.rows.get(k).failed = wrap(ctx, "advance "+k.table, err)
		return nil
	case top:
		s.log.Warn("postgresql refused a group commit of advances; applying it in halves so that one advance cannot fail the others",
			zap.Int("feeders", len(order)), zap.Error(err))
	}
	n := len(order)
	if err := s.applyBatch(ctx, b, order[:n/2], false); err != nil {
		return err
	}
	return s.applyBatch(ctx, b, order[n/2:], false)
}

// record keeps what a statement that committed returned (res) for the
// feeders in keys.
func (b *batch) record(keys []feederKey, res *moves) {
	for _, k := range keys {
		b.rows.get(k).applied = true
		m := res.get(k.table)
		if m == nil {
			continue
		}
		if t := b.tables.get(k.table); t != nil {
			t.v, t.moved = m.v, t.moved || m.moved
		} else {
			b.tables.set(m.v, m.moved, false)
		}
	}
}

// apply applies the rows of the feeders in order: the sole statement for
// the feeders alone in the batch on their table, then one transaction
// through the feeders table for the rest and for those the sole statement
// did not apply. What committed is recorded in b, so an error of the
// second leaves the first's recorded.
func (s *Store) apply(ctx context.Context, b *batch, order []feederKey) error {
	var sole, rest []feederKey
	for j, k := range order { // sorted: one table's feeders are adjacent
		if (j > 0 && order[j-1].table == k.table) || (j+1 < len(order) && order[j+1].table == k.table) || s.shared.has(k.table) {
			rest = append(rest, k)
		} else {
			sole = append(sole, k)
		}
	}
	if len(sole) > 0 {
		res, err := s.runSole(ctx, b, sole)
		if err != nil {
			return err
		}
		var done []feederKey
		for _, k := range sole {
			m := res.get(k.table)
			ok := m != nil
			var v Verdict
			if ok {
				v = m.v
			}
			switch {
			case ok && m.moved,
				// A no-op: the table is solo, this query is its feeder,
				// and it stands at or past the candidate.
				ok && m.solo && v.QueryID == k.feeder && !v.FinalizedUntil.Before(b.rows.get(k).until),
				// Refused: the table was rewound after the rewind the
				// advance knew (the statement's snapshot says so, and a
				// rewound_at only grows). One the statement found
				// rewound only once it waited for the row's lock goes
				// on to the advance statement, which reads it rewound.
				ok && b.as[b.rows.get(k).i].Guard.Refuses(v.RewoundAt):
				done = append(done, k)
			default:
				rest = append(rest, k)
			}
		}
		b.record(done, &res)
		s.shared.note(&res)
	}
	if len(rest) == 0 {
		return nil
	}
	sort.Slice(rest, func(x, y int) bool {
		if rest[x].table != rest[y].table {
			return rest[x].table < rest[y].table
		}
		return rest[x].feeder < rest[y].feeder
	})
	res, err := s.runShared(ctx, b, rest)
	if err != nil {
		return err
	}
	b.record(rest, &res)
	s.shared.note(&res)
	return nil
}

// moves is what the sole, advance and settle statements return: the table
// rows (one per table, in the order returned), which of them moved, which
// are solo, and how many feeder rows the statement wrote. A few rows are
// looked up by a scan, more through an index made at the first lookup
// past movesScan: the group commit of a crossing, usually one row,
// allocates the slice alone, where three maps took about 1 KiB (issue 12,
// third session).
type moves struct {
	rows    []move
	index   map[string]int // table -> its row; nil while rows are at most movesScan
	written int64
}

// move is one table row a statement returned.
type move struct {
	v     Verdict
	moved bool // the statement moved the table's verdict
	solo  bool // the table has one feeder (ADR 0015)
}

// rowsSource is what scanMoves reads: a batch's results
// (pgx.BatchResults, whose Query returns its next statement's rows) or
// rows already queried (rowsOf).
type rowsSource interface {
	Query() (pgx.Rows, error)
}

// rowsOf is a Query's result as a rowsSource.
type rowsOf struct {
	rows pgx.Rows
	err  error
}

func (r rowsOf) Query() (pgx.Rows, error) { return r.rows, r.err }

// movesScan is the most rows moves looks up by a scan.
const movesScan = 8

// get returns the row of table, nil when none was returned. The pointer
// is valid until the next set.
func (m *moves) get(table string) *move {
	if i := m.find(table); i >= 0 {
		return &m.rows[i]
	}
	return nil
}

// find returns the index of table's row, -1 when none.
func (m *moves) find(table string) int { return lookup(m.rows, &m.index, (*move).table, table) }

func (m *move) table() string { return m.v.Table }

// set records v's table's row, replacing one already recorded.
func (m *moves) set(v Verdict, moved, solo bool) {
	if i := m.find(v.Table); i >= 0 {
		m.rows[i] = move{v: v, moved: moved, solo: solo}
		return
	}
	if m.index != nil {
		m.index[v.Table] = len(m.rows)
	}
	m.rows = append(m.rows, move{v: v, moved: moved, solo: solo})
}

// verdict returns the verdict of table's row and whether it moved; ok is
// false when none was returned.
func (m *moves) verdict(table string) (v Verdict, moved, ok bool) {
	if r := m.get(table); r != nil {
		return r.v, r.moved, true
	}
	return Verdict{}, false, false
}

// columns are the arrays of the rows of keys, as the sole and advance
// statements take them.
type columns struct {
	tables, feeders, payloads  []string
	names, offsets, runs, srcs []*string
	untils                     []time.Time
	ends                       []*time.Time
	knowns                     []*time.Time // each advance's rewind guard (RewindGuard.sqlTime)
	batches                    []int64
}

func (b *batch) columns(keys []feederKey) columns {
	n := len(keys)
	c := columns{
		tables: make([]string, n), feeders: make([]string, n), payloads: make([]string, n),
		names: make([]*string, n), offsets: make([]*string, n), runs: make([]*string, n), srcs: make([]*string, n),
		untils: make([]time.Time, n), ends: make([]*time.Time, n), knowns: make([]*time.Time, n), batches: make([]int64, n),
	}
	for j, k := range keys {
		v := b.values(k)
		c.tables[j], c.feeders[j], c.untils[j], c.offsets[j], c.batches[j], c.srcs[j], c.payloads[j] = v.table, v.feeder, v.until, v.offset, v.batch, v.src, v.payload
		c.ends[j], c.names[j], c.runs[j], c.knowns[j] = v.end, v.name, v.run, v.known
	}
	return c
}

// rowValues are the values of one row of columns.
type rowValues struct {
	table, feeder, payload string
	name, offset, run, src *string
	until                  time.Time
	end                    *time.Time
	known                  *time.Time
	batch                  int64
}

// values returns the values of k's row as the statements take them.
func (b *batch) values(k feederKey) rowValues {
	r := b.rows.get(k)
	a := &b.as[r.i]
	v := rowValues{table: k.table, feeder: k.feeder, until: r.until, offset: r.offset, batch: a.BatchID, src: r.sources, payload: r.payload}
	if !a.EndTime.IsZero() {
		v.end = &a.EndTime
	}
	if a.QueryName != "" {
		v.name = &a.QueryName
	}
	if a.RunID != "" {
		v.run = &a.RunID
	}
	v.known = a.Guard.sqlTime()
	return v
}

// runSole runs the sole statement over the rows of keys, after
// setLockWait in the same implicit transaction.
func (s *Store) runSole(ctx context.Context, b *batch, keys []feederKey) (moves, error) {
	var (
		m      moves
		err    error
		direct bool
		c      columns
	)
	if len(keys) > 1 {
		c = b.columns(keys)
		if s.direct {
			m, direct, err = s.soleDirect(ctx, &c)
		}
	}
	if direct {
		s.stats.direct.Add(1)
	} else {
		var pb pgx.Batch
		pb.Queue(setLockWait, s.lockWait)
		if len(keys) == 1 {
			// One row (a crossing's group, usually): its values as
			// scalars, without the columns' eleven arrays.
			v := b.values(keys[0])
			payload := v.payload + v.until.Format(time.RFC3339Nano) + s.n.notifyEnd
			pb.Queue(s.sql.soleOne, v.table, v.until, v.end, v.offset, v.feeder, v.run, v.batch, payload, v.src, v.known)
		} else {
			pb.Queue(s.sql.sole, c.tables, c.feeders, c.untils, c.ends, c.offsets, c.runs, c.batches, c.srcs, c.payloads, c.knowns)
		}
		m, err = s.sendLocked(ctx, &pb, len(keys))
	}
	if err == nil {
		s.stats.soleStatements.Add(1)
		s.stats.sole.Add(int64(len(keys)))
	}
	return m, err
}

// runShared applies the rows of keys through the feeders table: one
// transaction (implicit: one round trip, one Sync) of lockKeys, lockRows,
// promote and advance.
func (s *Store) runShared(ctx context.Context, b *batch, keys []feederKey) (moves, error) {
	c := b.columns(keys)
	var pb pgx.Batch
	pb.Queue(setLockWait, s.lockWait)
	pb.Queue(setCustomPlans)
	pb.Queue(s.sql.lockKeys, distinct(c.tables), s.n.table)
	pb.Queue(s.sql.lockRows, c.tables, c.feeders, c.untils)
	pb.Queue(s.sql.promote, c.tables, c.feeders)
	// The advance statement finds every row by key in any plan: it keeps
	// the connection's cached plan, which costs no planning per group.
	pb.Queue(setPlanMode, s.planMode)
	pb.Queue(s.sql.advance, c.tables, c.feeders, c.names, c.untils, c.ends, c.offsets, c.runs, c.batches, c.srcs, c.payloads, c.knowns)
	m, err := s.sendLocked(ctx, &pb, len(keys))
	if err == nil {
		s.stats.advanceStatements.Add(1)
		s.stats.advanced.Add(int64(len(keys)))
		s.stats.feederWrites.Add(m.written)
	}
	return m, err
}

// sendLocked sends a batch whose last statement returns moves (advance or
// settle), every statement before it a command or a SELECT whose rows do
// not matter (setLockWait), as one implicit transaction.
func (s *Store) sendLocked(ctx context.Context, pb *pgx.Batch, n int) (m moves, err error) {
	br := s.pool.SendBatch(ctx, pb)
	defer func() {
		if cerr := br.Close(); err == nil && cerr != nil {
			err = cerr
		}
	}()
	for range pb.Len() - 1 {
		if _, err := br.Exec(); err != nil {
			return moves{}, err
		}
	}
	return scanMoves(n, br)
}

// distinct returns the distinct strings of sorted ss.
func distinct(ss []string) []string {
	out := make([]string, 0, len(ss))
	for i, s := range ss {
		if i == 0 || ss[i-1] != s {
			out = append(out, s)
		}
	}
	return out
}

// batchWide reports whether err, from a statement of a batch, is about the
// database or the call rather than any one advance: ctx done, the store
// closed, PostgreSQL unreachable or not migrated. Any other error may be
// one advance's, whatever its SQLSTATE.
func batchWide(ctx context.Context, err error) bool {
	if ctx.Err() != nil || errors.Is(err, ErrClosed) || errors.Is(err, ErrUnavailable) || errors.Is(err, ErrNotMigrated) {
		return true
	}
	switch classify(err) {
	case ErrUnavailable, ErrNotMigrated:
		return true
	}
	return false
}

// settle moves each of tables to the lowest watermark of its feeders as
// they stand, forward-only, in q (a transaction that holds the tables'
// advisory locks), and returns their rows and which moved.
func (s *Store) settle(ctx context.Context, q pgx.Tx, tables []string) (moves, error) {
	payloads := make([]string, len(tables))
	for i, t := range tables {
		p, err := payloadPrefix(t)
		if err != nil {
			return moves{}, err
		}
		payloads[i] = p
	}
	rows, err := q.Query(ctx, s.sql.settle, tables, payloads)
	m, err := scanMoves(len(tables), rowsOf{rows, err})
	if err == nil {
		s.stats.settleStatements.Add(1)
		s.stats.settled.Add(int64(len(tables)))
	}
	return m, err
}

// lockTables takes the advisory locks of tables (see lockKeys) in tx.
func (s *Store) lockTables(ctx context.Context, tx pgx.Tx, tables ...string) error {
	sorted := slices.Clone(tables)
	slices.Sort(sorted)
	_, err := tx.Exec(ctx, s.sql.lockKeys, distinct(sorted), s.n.table)
	return err
}

// scanMoves reads what notifyAndReturn returns: each row through
// readMove when it can (every row of the statements' usual result), else
// through scanVerdict.
//
// n is how many rows the statement returns at most (its tables): the
// rows' slice is made that size at once, so a group of 1,000 allocates
// it once rather than ten times over.
func scanMoves(n int, q rowsSource) (moves, error) {
	rows, err := q.Query()
	if err != nil {
		return moves{}, err
	}
	defer rows.Close()
	m := moves{rows: make([]move, 0, n)}
	var (
		fds        []pgconn.FieldDescription
		fast, seen bool
	)
	for rows.Next() {
		if !seen { // known once the first row is read
			fds, seen = rows.FieldDescriptions(), true
			fast = fastMoves(fds)
		}
		if fast {
			if v, mv, solo, written, ok := readMove(fds, rows.RawValues()); ok {
				m.set(v, mv, solo)
				m.written = written
				continue
			}
		}
		var (
			mv, solo bool
			notified int64
			written  int64
		)
		v, err := scanVerdict(rows, &mv, &notified, &solo, &written)
		if err != nil {
			return moves{}, err
		}
		m.set(v, mv, solo)
		m.written = written
	}
	if err := rows.Err(); err != nil {
		return moves{}, err
	}
	return m, nil
}
