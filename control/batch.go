package control

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"time"

	"github.com/jackc/pgx/v5"
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

// AdvanceBatch applies many advances in one statement, so in one
// transaction and one round trip: the group commit of advances that land
// at the same moment (ADR 0008). Each advance is treated as Advance treats
// it (the feeder's watermark and the table's verdict move forward-only, a
// notification per moved table in the same transaction), and its result
// is at the same index of the returned slice. Advances of the same feeder
// of a table are applied as if one after the other, highest candidate
// first; advances of several feeders of one table move the table once, to
// the lowest watermark, and the first of them reports the move.
//
// An advance whose table ends behind its candidate (held by another
// feeder, or read from a snapshot that missed a concurrent writer) is
// settled by a second statement, which sees every commit before it began:
// so whichever of two concurrent feeders commits last moves the table to
// where both allow (ADR 0015). A table with one feeder never needs it.
//
// An invalid advance gets ErrInvalidAdvance in its result and is not sent.
// One advance the database refuses never fails the others, whatever the
// error: when the statement fails for any reason but the database's
// availability, the batch is applied again in halves, down to single
// advances (each applied as Advance applies it, so an EndOffset the
// database refuses is dropped), so that k refused advances cost about
// k·log2(n) statements and only they carry an error.
//
// The returned error is for the batch as a whole: PostgreSQL unreachable
// (ErrUnavailable), no control table (ErrNotMigrated), the store closed
// (ErrClosed) or ctx done. Then the advances not applied before it carry
// it in their results; those applied before it (by earlier halves) carry
// their own.
func (s *Store) AdvanceBatch(ctx context.Context, as []Advance) ([]AdvanceResult, error) {
	res := make([]AdvanceResult, len(as))
	if s.closed.Load() {
		err := fmt.Errorf("advance batch: %w", ErrClosed)
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
		if prev, ok := b.rows[k]; ok && !r.until.After(prev.until) {
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
	b.settled = make(map[string]bool)
	b.failed = make(map[feederKey]error)
	batchErr := s.applyBatch(ctx, b, order, true)
	if batchErr != nil {
		batchErr = wrap(ctx, fmt.Sprintf("advance batch of %d feeders", len(order)), batchErr)
	}
	// Tables left behind a candidate are settled by a new statement.
	var behind []string
	for _, k := range order {
		v, ok := b.verdicts[k.table]
		applied := ok || b.moved[k.table]
		if b.failed[k] != nil || b.settled[k.table] || (!applied && batchErr != nil) {
			continue
		}
		if (!ok || v.FinalizedUntil.Before(b.rows[k].until)) && (len(behind) == 0 || behind[len(behind)-1] != k.table) {
			behind = append(behind, k.table)
		}
	}
	var settleErr error
	if len(behind) > 0 && batchErr == nil {
		settled, settledMoved, err := s.settle(ctx, behind)
		if err != nil {
			// The feeders' watermarks are stored; a retry of their
			// advances (the trackers do) is a no-op for them and settles
			// the tables.
			settleErr = wrap(ctx, fmt.Sprintf("advance batch: settle %d tables", len(behind)), err)
		}
		for table, v := range settled {
			b.verdicts[table] = v
			b.moved[table] = b.moved[table] || settledMoved[table]
		}
	}
	unsettled := make(map[string]bool, len(behind))
	if settleErr != nil {
		for _, t := range behind {
			unsettled[t] = true
		}
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
		case !ok && !b.moved[a.Table] && batchErr != nil:
			res[i].Err = batchErr
		case unsettled[a.Table]:
			res[i].Err = settleErr
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
	if batchErr == nil && settleErr != nil && len(unsettled) == len(b.verdicts) {
		batchErr = settleErr
	}
	return res, batchErr
}

// batch is the state of one AdvanceBatch across its statements.
type batch struct {
	as       []Advance
	rows     map[feederKey]*batchRow // the row sent for each feeder of a table: its highest candidate
	verdicts map[string]Verdict      // the table rows the statements returned
	moved    map[string]bool         // which of them moved
	settled  map[string]bool         // tables an Advance of its own settled already
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

// applyBatch applies the rows of the feeders in order (sorted) with one
// statement and records what it returned in b. When the statement fails
// for a reason that may be one row's, it applies each half in turn; a
// single feeder left is applied with Advance, and its failure is recorded
// in b.failed. It returns only an error of the batch as a whole (see
// batchWide), at which point it stops.
func (s *Store) applyBatch(ctx context.Context, b *batch, order []feederKey, top bool) error {
	if len(order) == 1 && !top {
		k := order[0]
		v, moved, err := s.Advance(ctx, b.as[b.rows[k].i])
		switch {
		case err == nil:
			b.verdicts[k.table], b.moved[k.table] = v, b.moved[k.table] || moved
			b.settled[k.table] = true
		case batchWide(ctx, err):
			return err
		default:
			b.failed[k] = err
		}
		return nil
	}
	verdicts, moved, err := s.advance(ctx, b.as, b.rows, order)
	switch {
	case err == nil:
		// Recorded only once the statement succeeded: a failed one
		// committed nothing.
		for t, v := range verdicts {
			b.verdicts[t], b.moved[t] = v, b.moved[t] || moved[t]
		}
		return nil
	case batchWide(ctx, err):
		return err
	case top:
		s.log.Warn("postgresql refused a group commit of advances; applying it in halves so that one advance cannot fail the others",
			zap.Int("feeders", len(order)), zap.Error(err))
	}
	n := len(order)
	if n == 1 {
		return s.applyBatch(ctx, b, order, false)
	}
	if err := s.applyBatch(ctx, b, order[:n/2], false); err != nil {
		return err
	}
	return s.applyBatch(ctx, b, order[n/2:], false)
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

// advance runs the advance statement over the rows in order and returns
// the table rows it returned, by table, and which of them moved.
func (s *Store) advance(ctx context.Context, as []Advance, rows map[feederKey]*batchRow, order []feederKey) (map[string]Verdict, map[string]bool, error) {
	n := len(order)
	var (
		tables   = make([]string, n)
		feeders  = make([]string, n)
		names    = make([]*string, n)
		untils   = make([]time.Time, n)
		ends     = make([]*time.Time, n)
		offsets  = make([]*string, n)
		runs     = make([]*string, n)
		batches  = make([]int64, n)
		sources  = make([]*string, n)
		payloads = make([]string, n)
	)
	for j, k := range order {
		r := rows[k]
		a := &as[r.i]
		tables[j], feeders[j], untils[j], offsets[j], batches[j], sources[j], payloads[j] = k.table, k.feeder, r.until, r.offset, a.BatchID, r.sources, r.payload
		if !a.EndTime.IsZero() {
			ends[j] = &a.EndTime
		}
		if a.QueryName != "" {
			names[j] = &a.QueryName
		}
		if a.RunID != "" {
			runs[j] = &a.RunID
		}
	}
	verdicts, moved, err := scanMoves(s.pool.Query(ctx, s.sql.advance, tables, feeders, names, untils, ends, offsets, runs, batches, sources, payloads))
	if err == nil {
		s.stats.advanceStatements.Add(1)
		s.stats.advanced.Add(int64(n))
	}
	return verdicts, moved, err
}

// settle moves each of tables to the lowest watermark of its feeders as
// they stand, forward-only, and returns their rows and which moved.
func (s *Store) settle(ctx context.Context, tables []string) (map[string]Verdict, map[string]bool, error) {
	payloads := make([]string, len(tables))
	for i, t := range tables {
		p, err := payloadPrefix(t)
		if err != nil {
			return nil, nil, err
		}
		payloads[i] = p
	}
	verdicts, moved, err := scanMoves(s.pool.Query(ctx, s.sql.settle, tables, payloads))
	if err == nil {
		s.stats.settleStatements.Add(1)
		s.stats.settled.Add(int64(len(tables)))
	}
	return verdicts, moved, err
}

// scanMoves reads what moveToLowest returns.
func scanMoves(rows pgx.Rows, err error) (map[string]Verdict, map[string]bool, error) {
	if err != nil {
		return nil, nil, err
	}
	defer rows.Close()
	verdicts := make(map[string]Verdict)
	moved := make(map[string]bool)
	for rows.Next() {
		var (
			mv       bool
			notified int64
		)
		v, err := scanVerdict(rows, &mv, &notified)
		if err != nil {
			return nil, nil, err
		}
		verdicts[v.Table] = v
		moved[v.Table] = mv
	}
	if err := rows.Err(); err != nil {
		return nil, nil, err
	}
	return verdicts, moved, nil
}
