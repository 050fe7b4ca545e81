package control

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// TestGroupStatementsFindRowsByKey (ADR 0023): the statements of a group
// (a feeder join, an advance through the feeders table) find the rows of
// their input by primary key, never by scanning every table's row (a
// group of 16 among 5,000 tables: the old statements scanned). Left
// to join the input to the whole table, the planner scanned the control
// table (promote, lockRows) and the feeders table (the retired check, the
// resolution of an expected feeder) at every group: a cost that grew with
// the tables tracked, about 50 ms a statement at 100,000 tables, so
// tracking ran slower the more runs it had tracked.
func TestGroupStatementsFindRowsByKey(t *testing.T) {
	s, url := newStore(t, Options{})
	ctx := context.Background()
	conn := connect(t, url)
	const tables, group = 5000, 16
	var js []FeederJoin
	var as []Advance
	for i := range tables {
		j := FeederJoin{Table: fmt.Sprintf("bench.t%06d", i), Query: fmt.Sprintf("q%06d", i), Name: fmt.Sprintf("n%06d", i)}
		js = append(js, j)
		as = append(as, Advance{Table: j.Table, QueryID: j.Query, FinalizedUntil: at(12, 0), EndTime: at(12, 5), RunID: "r", BatchID: 1})
	}
	for i := 0; i < tables; i += 500 {
		for _, r := range s.JoinFeeders(ctx, js[i:i+500]) {
			if r.Err != nil {
				t.Fatal(r.Err)
			}
		}
		if _, err := s.AdvanceBatch(ctx, as[i:i+500]); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := conn.Exec(ctx, "ANALYZE"); err != nil {
		t.Fatal(err)
	}
	var tabs, queries, names []string
	var untils []time.Time
	for i := range group {
		j := js[(i*37)%tables]
		tabs, queries, names, untils = append(tabs, j.Table), append(queries, j.Query), append(names, j.Name), append(untils, at(14, 0))
	}
	for _, q := range []struct {
		name string
		sql  string
		args []any
	}{
		{"promote", s.sql.promote, []any{tabs, queries}},
		{"lockRows", s.sql.lockRows, []any{tabs, queries, untils}},
		{"join", s.sql.join, []any{tabs, queries, names}},
		{"retired", s.sql.retired, []any{tabs, queries}},
		{"known", s.sql.known, []any{tabs, queries, names}},
	} {
		tx, err := conn.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		p := explain(t, tx, q.sql, q.args...)
		_ = tx.Rollback(ctx)
		if strings.Contains(p, "Seq Scan on table_finalization") {
			t.Errorf("%s scans a whole table for a group of %d of %d tables:\n%s", q.name, group, tables, p)
		}
	}
	// The sole statement of a group commit at a boundary: 1,000 of the
	// 5,000 tables. Its check that each row is solo and behind its
	// candidate was written as EXISTS and planned as a hash join over a
	// scan of every table's row.
	b := &batch{rows: map[feederKey]*batchRow{}}
	var keys []feederKey
	for i := 0; i < tables; i += 5 {
		a := as[i]
		a.FinalizedUntil = at(14, 0)
		b.as = append(b.as, a)
		r, err := newBatchRow(len(b.as)-1, a)
		if err != nil {
			t.Fatal(err)
		}
		k := feederKey{a.Table, a.QueryID}
		b.rows[k] = r
		keys = append(keys, k)
	}
	c := b.columns(keys)
	p := explain(t, conn, s.sql.sole, c.tables, c.feeders, c.untils, c.ends, c.offsets, c.runs, c.batches, c.srcs, c.payloads, c.knowns)
	if strings.Contains(p, "Seq Scan on table_finalization") {
		t.Errorf("the sole statement scans the whole table for a group of %d of %d tables:\n%s", len(keys), tables, p)
	}
}

// explain returns the plan PostgreSQL makes for sql with args, one line a
// node, without running it.
func explain(t *testing.T, q interface {
	Query(context.Context, string, ...any) (pgx.Rows, error)
}, sql string, args ...any) string {
	t.Helper()
	rows, err := q.Query(context.Background(), "EXPLAIN "+sql, args...)
	if err != nil {
		t.Fatal(err)
	}
	plan, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	return strings.Join(plan, "\n")
}
