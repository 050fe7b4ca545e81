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
	b := &batch{as: as, rows: make(map[feederKey]*batchRow, len(as))}
	var order []feederKey
	for i, a := range as {
		r, err := newBatchRow(i, a)
		if err != nil {
			res[i].Err = err
			continue
		}
		k := feederKey{a.Table, a.QueryID}
		if prev, ok := b.rows[k]; ok && !keepOver(a, r, b.as[prev.i], prev) {
			continue
		}
		if _, ok := b.rows[k]; !ok {
			order = append(order, k)
		}
		b.rows[k] = r
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
	b.verdicts = make(map[string]Verdict, len(order))
	b.moved = make(map[string]bool, len(order))
	b.failed = make(map[feederKey]error)
	batchErr := s.applyBatch(ctx, b, order, true)
	if batchErr != nil {
		if op == "" {
			op = fmt.Sprintf("advance batch of %d feeders", len(order))
		}
		batchErr = wrap(ctx, op, batchErr)
	}
	reported := make(map[string]bool, len(b.verdicts))
	for i, a := range as {
		if res[i].Err != nil {
			continue
		}
		k := feederKey{a.Table, a.QueryID}
		v, ok := b.verdicts[a.Table]
		switch {
		case b.failed[k] != nil:
			res[i].Err = b.failed[k]
		case !b.applied[k] && batchErr != nil:
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
			mv := b.moved[a.Table] && !reported[a.Table] && b.rows[k].i == i
			if mv {
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
	as       []Advance
	rows     map[feederKey]*batchRow // the row sent for each feeder of a table: its highest candidate
	verdicts map[string]Verdict      // the table rows the statements returned
	moved    map[string]bool         // which of them moved
	applied  map[feederKey]bool      // feeders whose advance committed
	failed   map[feederKey]error     // feeders whose own advance failed
}

// batchRow is the row of one feeder of one table in a batch.
type batchRow struct {
	i       int // index into as
	until   time.Time
	offset  *string
	sources *string
	payload string // the notification up to the time (payloadPrefix)
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
		if r := b.rows[k]; r.offset != nil && offsetRefused(err) {
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
			b.failed[k] = fmt.Errorf("advance %s: %w (waited more than lock_timeout %s; an open transaction that inserted its row? see pg_stat_activity, state 'idle in transaction'): %w",
				k.table, ErrBusy, s.lockWait, err)
			return nil
		}
		b.failed[k] = wrap(ctx, "advance "+k.table, err)
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

// record keeps what a statement that committed returned for the feeders
// in keys.
func (b *batch) record(keys []feederKey, verdicts map[string]Verdict, moved map[string]bool) {
	if b.applied == nil {
		b.applied = make(map[feederKey]bool, len(keys))
	}
	for _, k := range keys {
		b.applied[k] = true
		if v, ok := verdicts[k.table]; ok {
			b.verdicts[k.table] = v
		}
		b.moved[k.table] = b.moved[k.table] || moved[k.table]
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
			v, ok := res.verdicts[k.table]
			switch {
			case ok && res.moved[k.table],
				// A no-op: the table is solo, this query is its feeder,
				// and it stands at or past the candidate.
				ok && res.solo[k.table] && v.QueryID == k.feeder && !v.FinalizedUntil.Before(b.rows[k].until),
				// Refused: the table was rewound after the rewind the
				// advance knew (the statement's snapshot says so, and a
				// rewound_at only grows). One the statement found
				// rewound only once it waited for the row's lock goes
				// on to the advance statement, which reads it rewound.
				ok && b.as[b.rows[k].i].Guard.Refuses(v.RewoundAt):
				done = append(done, k)
			default:
				rest = append(rest, k)
			}
		}
		b.record(done, res.verdicts, res.moved)
		s.shared.note(res.solo)
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
	b.record(rest, res.verdicts, res.moved)
	s.shared.note(res.solo)
	return nil
}

// moves is what the sole, advance and settle statements return: the table
// rows, by table, which of them moved, which are solo, and how many feeder
// rows the statement wrote.
type moves struct {
	verdicts map[string]Verdict
	moved    map[string]bool
	solo     map[string]bool
	written  int64
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
		r := b.rows[k]
		a := &b.as[r.i]
		c.tables[j], c.feeders[j], c.untils[j], c.offsets[j], c.batches[j], c.srcs[j], c.payloads[j] = k.table, k.feeder, r.until, r.offset, a.BatchID, r.sources, r.payload
		if !a.EndTime.IsZero() {
			c.ends[j] = &a.EndTime
		}
		if a.QueryName != "" {
			c.names[j] = &a.QueryName
		}
		if a.RunID != "" {
			c.runs[j] = &a.RunID
		}
		c.knowns[j] = a.Guard.sqlTime()
	}
	return c
}

// runSole runs the sole statement over the rows of keys, after
// setLockWait in the same implicit transaction.
func (s *Store) runSole(ctx context.Context, b *batch, keys []feederKey) (moves, error) {
	c := b.columns(keys)
	var (
		m      moves
		err    error
		direct bool
	)
	if len(keys) > 1 && s.direct {
		m, direct, err = s.soleDirect(ctx, &c)
	}
	if direct {
		s.stats.direct.Add(1)
	} else {
		var pb pgx.Batch
		pb.Queue(setLockWait, s.lockWait)
		if len(keys) == 1 {
			payload := c.payloads[0] + c.untils[0].Format(time.RFC3339Nano) + s.n.notifyEnd
			pb.Queue(s.sql.soleOne, c.tables[0], c.untils[0], c.ends[0], c.offsets[0], c.feeders[0], c.runs[0], c.batches[0], payload, c.srcs[0], c.knowns[0])
		} else {
			pb.Queue(s.sql.sole, c.tables, c.feeders, c.untils, c.ends, c.offsets, c.runs, c.batches, c.srcs, c.payloads, c.knowns)
		}
		m, err = s.sendLocked(ctx, &pb)
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
	m, err := s.sendLocked(ctx, &pb)
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
func (s *Store) sendLocked(ctx context.Context, pb *pgx.Batch) (m moves, err error) {
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
	return scanMoves(br.Query())
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
	m, err := scanMoves(q.Query(ctx, s.sql.settle, tables, payloads))
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
func scanMoves(rows pgx.Rows, err error) (moves, error) {
	if err != nil {
		return moves{}, err
	}
	defer rows.Close()
	m := moves{verdicts: make(map[string]Verdict), moved: make(map[string]bool), solo: make(map[string]bool)}
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
				m.verdicts[v.Table], m.moved[v.Table], m.solo[v.Table], m.written = v, mv, solo, written
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
		m.verdicts[v.Table] = v
		m.moved[v.Table] = mv
		m.solo[v.Table] = solo
		m.written = written
	}
	if err := rows.Err(); err != nil {
		return moves{}, err
	}
	return m, nil
}
