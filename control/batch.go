package control

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"time"

	"go.uber.org/zap"
)

// AdvanceResult is the outcome of one Advance of an AdvanceBatch: what
// Advance would have returned for it.
type AdvanceResult struct {
	Verdict Verdict
	Moved   bool
	Err     error
}

// advanceBatchSQL is AdvanceBatch's statement: Advance's upsert over the
// rows of parallel arrays, one row per table, in table order (so that two
// batches meeting the same tables lock their rows in the same order and
// cannot deadlock), with one notification per moved row. As in Advance, a
// row the snapshot already shows at or beyond its candidate is not even
// offered to the upsert: a batch of no-ops is a read.
func advanceBatchSQL(n names) string {
	return `
WITH input AS (
	SELECT * FROM unnest($1::text[], $2::timestamptz[], $3::timestamptz[], $4::text[], $5::text[], $6::text[], $7::bigint[], $8::text[], $9::text[])
		AS i(table_name, finalized_until, end_time, end_offset, query_id, run_id, batch_id, payload, sources)
), moved AS (
	INSERT INTO ` + n.table + ` AS c (` + verdictColumns + `)
	SELECT i.table_name, i.finalized_until, i.end_time, i.end_offset::jsonb, i.query_id, i.run_id, i.batch_id, i.sources::jsonb, now()
	FROM input i
	WHERE NOT EXISTS (SELECT FROM ` + n.table + ` WHERE table_name = i.table_name AND finalized_until >= i.finalized_until)
	ORDER BY i.table_name
` + forwardOnly + `
), notified AS (
	SELECT pg_notify('` + NotifyChannel + `', i.payload) FROM moved m JOIN input i USING (table_name)
)
SELECT true, ` + readColumns + `, (SELECT count(*) FROM notified) FROM moved
UNION ALL
SELECT false, ` + readColumns + `, 0 FROM ` + n.table + `
WHERE table_name = ANY($1::text[]) AND table_name NOT IN (SELECT table_name FROM moved)`
}

// AdvanceBatch applies many advances in one statement, so in one
// transaction and one round trip: the group commit of advances that land
// at the same moment. Each advance is treated as Advance treats it
// (forward-only, a notification per moved row in the same transaction),
// and its result is at the same index of the returned slice. Advances of
// the same table are applied as if one after the other, highest candidate
// first: the others do not move it and get its verdict.
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
	b := &batch{as: as, rows: make(map[string]*batchRow, len(as))}
	var order []string
	for i, a := range as {
		until, payload, err := a.check()
		if err != nil {
			res[i].Err = err
			continue
		}
		if r, ok := b.rows[a.Table]; ok && !until.After(r.until) {
			continue
		}
		r := &batchRow{i: i, until: until, payload: payload}
		if srcs, err := sourcesJSON(a.Sources); err != nil {
			res[i].Err = fmt.Errorf("advance %s: %w", a.Table, err)
			continue
		} else if srcs != nil {
			str := srcs.(string)
			r.sources = &str
		}
		if len(a.EndOffset) > 0 {
			off := string(jsonbSafe(a.EndOffset))
			r.offset = &off
		}
		if _, ok := b.rows[a.Table]; !ok {
			order = append(order, a.Table)
		}
		b.rows[a.Table] = r
	}
	if len(order) == 0 {
		return res, nil
	}
	sort.Strings(order)
	b.verdicts = make(map[string]Verdict, len(order))
	b.moved = make(map[string]bool, len(order))
	b.failed = make(map[string]error)
	batchErr := s.applyBatch(ctx, b, order, true)
	if batchErr != nil {
		batchErr = wrap(ctx, fmt.Sprintf("advance batch of %d tables", len(order)), batchErr)
	}
	for i, a := range as {
		if res[i].Err != nil {
			continue
		}
		r := b.rows[a.Table]
		until := a.FinalizedUntil.UTC().Truncate(time.Microsecond)
		v, ok := b.verdicts[a.Table]
		switch {
		case b.failed[a.Table] != nil:
			res[i].Err = b.failed[a.Table]
		case !ok && batchErr != nil:
			res[i].Err = batchErr
		case r.i == i && b.moved[a.Table]:
			res[i] = AdvanceResult{Verdict: v, Moved: true}
		case ok && !v.FinalizedUntil.Before(until):
			res[i] = AdvanceResult{Verdict: v}
		default:
			// Not moved, and the row read by the statement's snapshot is
			// missing or behind the candidate: a concurrent writer got
			// there first. Read it again, as Advance does.
			v, err := s.Get(ctx, a.Table)
			if err != nil {
				res[i].Err = fmt.Errorf("advance %s: read back: %w", a.Table, err)
				continue
			}
			b.verdicts[a.Table] = v
			res[i] = AdvanceResult{Verdict: v}
		}
	}
	return res, batchErr
}

// batch is the state of one AdvanceBatch across its statements.
type batch struct {
	as       []Advance
	rows     map[string]*batchRow // the row sent for each table: its highest candidate
	verdicts map[string]Verdict   // the rows the statements returned
	moved    map[string]bool      // which of them moved
	failed   map[string]error     // tables whose own advance failed
}

// batchRow is the row of one table in a batch.
type batchRow struct {
	i       int // index into as
	until   time.Time
	offset  *string
	sources *string
	payload string
}

// applyBatch applies the rows of the tables in order (sorted) with one
// statement and records what it returned in b. When the statement fails
// for a reason that may be one row's, it applies each half in turn; a
// single table left is applied with Advance, and its failure is recorded
// in b.failed. It returns only an error of the batch as a whole (see
// batchWide), at which point it stops.
func (s *Store) applyBatch(ctx context.Context, b *batch, order []string, top bool) error {
	if len(order) == 1 && !top {
		table := order[0]
		v, moved, err := s.Advance(ctx, b.as[b.rows[table].i])
		switch {
		case err == nil:
			b.verdicts[table], b.moved[table] = v, moved
		case batchWide(ctx, err):
			return err
		default:
			b.failed[table] = err
		}
		return nil
	}
	n := len(order)
	var (
		tables   = make([]string, n)
		untils   = make([]time.Time, n)
		ends     = make([]*time.Time, n)
		offsets  = make([]*string, n)
		queries  = make([]*string, n)
		runs     = make([]*string, n)
		batches  = make([]int64, n)
		payloads = make([]string, n)
		sources  = make([]*string, n)
	)
	for j, table := range order {
		r := b.rows[table]
		a := &b.as[r.i]
		tables[j], untils[j], offsets[j], batches[j], payloads[j], sources[j] = table, r.until, r.offset, a.BatchID, r.payload, r.sources
		if !a.EndTime.IsZero() {
			t := a.EndTime
			ends[j] = &t
		}
		if a.QueryID != "" {
			queries[j] = &a.QueryID
		}
		if a.RunID != "" {
			runs[j] = &a.RunID
		}
	}
	err := s.advanceBatch(ctx, b, tables, untils, ends, offsets, queries, runs, batches, payloads, sources)
	switch {
	case err == nil:
		return nil
	case batchWide(ctx, err):
		return err
	case top:
		s.log.Warn("postgresql refused a group commit of advances; applying it in halves so that one advance cannot fail the others",
			zap.Int("tables", n), zap.Error(err))
	}
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

// advanceBatch runs the batch statement and records the rows it returned,
// by table, and which of them moved, in b.
func (s *Store) advanceBatch(ctx context.Context, b *batch, tables []string, untils []time.Time, ends []*time.Time,
	offsets, queries, runs []*string, batches []int64, payloads []string, sources []*string) error {
	rows, err := s.pool.Query(ctx, s.sql.advanceBatch, tables, untils, ends, offsets, queries, runs, batches, payloads, sources)
	if err != nil {
		return err
	}
	defer rows.Close()
	verdicts := make(map[string]Verdict, len(tables))
	moved := make(map[string]bool, len(tables))
	for rows.Next() {
		var (
			mv       bool
			notified int64
		)
		v, err := scanVerdict(rows, &mv, &notified)
		if err != nil {
			return err
		}
		verdicts[v.Table] = v
		moved[v.Table] = mv
	}
	if err := rows.Err(); err != nil {
		return err
	}
	// Recorded only once the statement succeeded: a failed one committed
	// nothing.
	for t, v := range verdicts {
		b.verdicts[t], b.moved[t] = v, moved[t]
	}
	return nil
}
