package control

import (
	"context"
	"encoding/json"
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
	SELECT * FROM unnest($1::text[], $2::timestamptz[], $3::timestamptz[], $4::text[], $5::text[], $6::text[], $7::bigint[], $8::text[])
		AS i(table_name, finalized_until, end_time, end_offset, query_id, run_id, batch_id, payload)
), moved AS (
	INSERT INTO ` + n.table + ` AS c (` + verdictColumns + `)
	SELECT i.table_name, i.finalized_until, i.end_time, i.end_offset::jsonb, i.query_id, i.run_id, i.batch_id, now()
	FROM input i
	WHERE NOT EXISTS (SELECT FROM ` + n.table + ` WHERE table_name = i.table_name AND finalized_until >= i.finalized_until)
	ORDER BY i.table_name
` + forwardOnly + `
), notified AS (
	SELECT pg_notify('` + NotifyChannel + `', i.payload) FROM moved m JOIN input i USING (table_name)
)
SELECT true, ` + verdictColumns + `, (SELECT count(*) FROM notified) FROM moved
UNION ALL
SELECT false, ` + verdictColumns + `, 0 FROM ` + n.table + `
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
// The returned error is for the batch as a whole (ErrUnavailable,
// ErrNotMigrated, ErrClosed, ctx's): then nothing was written, or
// everything, and every result carries the same error. An EndOffset the
// database refuses makes the batch fall back to one Advance per entry.
func (s *Store) AdvanceBatch(ctx context.Context, as []Advance) ([]AdvanceResult, error) {
	res := make([]AdvanceResult, len(as))
	if s.closed.Load() {
		err := fmt.Errorf("advance batch: %w", ErrClosed)
		for i := range res {
			res[i].Err = err
		}
		return res, err
	}
	// The row sent for each table: the highest candidate.
	type row struct {
		i       int // index into as
		until   time.Time
		offset  *string
		payload string
	}
	rows := make(map[string]*row, len(as))
	var order []string
	for i, a := range as {
		switch {
		case a.Table == "":
			res[i].Err = fmt.Errorf("advance: %w: no table", ErrInvalidAdvance)
			continue
		case a.FinalizedUntil.IsZero():
			res[i].Err = fmt.Errorf("advance %s: %w: no finalized_until", a.Table, ErrInvalidAdvance)
			continue
		case len(a.EndOffset) > 0 && !json.Valid(a.EndOffset):
			res[i].Err = fmt.Errorf("advance %s: %w: end offset is not JSON", a.Table, ErrInvalidAdvance)
			continue
		}
		until := a.FinalizedUntil.UTC().Truncate(time.Microsecond)
		if r, ok := rows[a.Table]; ok && !until.After(r.until) {
			continue
		}
		payload, err := json.Marshal(notification{Table: a.Table, FinalizedUntil: until.Format(time.RFC3339Nano)})
		if err != nil {
			res[i].Err = fmt.Errorf("advance %s: %w", a.Table, err)
			continue
		}
		r := &row{i: i, until: until, payload: string(payload)}
		if len(a.EndOffset) > 0 {
			off := string(jsonbSafe(a.EndOffset))
			r.offset = &off
		}
		if _, ok := rows[a.Table]; !ok {
			order = append(order, a.Table)
		}
		rows[a.Table] = r
	}
	if len(order) == 0 {
		return res, nil
	}
	sort.Strings(order)
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
	)
	for j, table := range order {
		r := rows[table]
		a := as[r.i]
		tables[j], untils[j], offsets[j], batches[j], payloads[j] = table, r.until, r.offset, a.BatchID, r.payload
		if !a.EndTime.IsZero() {
			t := a.EndTime
			ends[j] = &t
		}
		if a.QueryID != "" {
			queries[j] = &as[r.i].QueryID
		}
		if a.RunID != "" {
			runs[j] = &as[r.i].RunID
		}
	}
	verdicts, moved, err := s.advanceBatch(ctx, tables, untils, ends, offsets, queries, runs, batches, payloads)
	if err != nil && offsetRefused(err) {
		// As Advance does, per entry: the offset is provenance and must not
		// block a verdict.
		s.log.Warn("postgresql refused an end offset of a batch; advancing its entries one by one",
			zap.Int("advances", len(as)), zap.Error(err))
		for i, a := range as {
			if res[i].Err == nil {
				res[i].Verdict, res[i].Moved, res[i].Err = s.Advance(ctx, a)
			}
		}
		return res, nil
	}
	if err != nil {
		err = wrap(ctx, fmt.Sprintf("advance batch of %d tables", n), err)
		for i := range res {
			if res[i].Err == nil {
				res[i].Err = err
			}
		}
		return res, err
	}
	for i, a := range as {
		if res[i].Err != nil {
			continue
		}
		r := rows[a.Table]
		until := a.FinalizedUntil.UTC().Truncate(time.Microsecond)
		v, ok := verdicts[a.Table]
		switch {
		case r.i == i && moved[a.Table]:
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
			verdicts[a.Table] = v
			res[i] = AdvanceResult{Verdict: v}
		}
	}
	return res, nil
}

// advanceBatch runs the batch statement and returns the rows it returned,
// by table, and which of them moved.
func (s *Store) advanceBatch(ctx context.Context, tables []string, untils []time.Time, ends []*time.Time,
	offsets, queries, runs []*string, batches []int64, payloads []string) (map[string]Verdict, map[string]bool, error) {
	rows, err := s.pool.Query(ctx, s.sql.advanceBatch, tables, untils, ends, offsets, queries, runs, batches, payloads)
	if err != nil {
		return nil, nil, err
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
