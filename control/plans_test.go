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
	js := joinTables(t, s, "bench", tables)
	var as []Advance
	for _, j := range js {
		as = append(as, Advance{Table: j.Table, QueryID: j.Query, FinalizedUntil: at(12, 0), EndTime: at(12, 5), RunID: "r", BatchID: 1})
	}
	for i := 0; i < tables; i += 500 {
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
	b := &batch{}
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
		b.rows.put(k, r)
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

// TestFirstVerdictStatementFindsFeedersByKey: the advance statement (a
// table's first verdict, a shared table) finds the feeder rows of its
// input by key, in the plan made for its arrays and in the generic plan
// PostgreSQL caches for a prepared statement alike. Its feeders' check
// ("fed") was planned for the arrays as a hash anti join over a scan of
// every feeder row, and the other feeders of its tables ("state") in the
// generic plan as a nested loop over a scan of every feeder row, each
// compared with every input row: 0.3-0.5 s a group of 1,000 at 4,000 to
// 10,000 tables, a cost that grew with the tables (BENCHMARKS.md, "The
// burst (eighth pass, 2026-12-06)").
func TestFirstVerdictStatementFindsFeedersByKey(t *testing.T) {
	s, url := newStore(t, Options{})
	ctx := context.Background()
	conn := connect(t, url)
	const tables, group = 5000, 1000
	js := joinTables(t, s, "first", tables)
	var as []Advance
	for _, j := range js {
		as = append(as, Advance{Table: j.Table, QueryID: j.Query, QueryName: j.Name, FinalizedUntil: at(12, 0), EndTime: at(12, 5), RunID: "r", BatchID: 1,
			Guard: KnownRewind(time.Time{})})
	}
	if _, err := s.AdvanceBatch(ctx, as[:tables-group]); err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Exec(ctx, "ANALYZE"); err != nil {
		t.Fatal(err)
	}
	b := &batch{as: as[tables-group:]}
	var keys []feederKey
	for i, a := range b.as {
		r, err := newBatchRow(i, a)
		if err != nil {
			t.Fatal(err)
		}
		k := feederKey{a.Table, a.QueryID}
		b.rows.put(k, r)
		keys = append(keys, k)
	}
	c := b.columns(keys)
	for _, mode := range []string{"force_custom_plan", "force_generic_plan"} {
		if _, err := conn.Exec(ctx, "SET plan_cache_mode = "+mode); err != nil {
			t.Fatal(err)
		}
		p := withoutCTE(explain(t, conn, s.sql.advance, c.tables, c.feeders, c.names, c.untils, c.ends, c.offsets, c.runs, c.batches, c.srcs, c.payloads, c.knowns), "resolved")
		if strings.Contains(p, "Seq Scan on table_finalization") {
			t.Errorf("%s: the advance statement scans a whole table for the first verdicts of %d of %d tables:\n%s", mode, group, tables, p)
		}
	}
}

// withoutCTE returns plan without the lines of its CTE name. The
// resolution of an expected feeder ("resolved", an UPDATE of the feeder
// rows of the input's tables and names) may scan the feeders table with
// the input's arrays hashed, once per statement, when the group is a
// large share of the tables: linear, and left to the planner.
func withoutCTE(plan, name string) string {
	lines := strings.Split(plan, "\n")
	var out []string
	skip := ""
	for _, l := range lines {
		trimmed := strings.TrimLeft(l, " ")
		indent := l[:len(l)-len(trimmed)]
		switch {
		case skip != "" && indent == skip && !strings.HasPrefix(trimmed, "->"):
			skip = ""
		case skip != "":
			continue
		case trimmed == "CTE "+name:
			skip = indent
			continue
		}
		out = append(out, l)
	}
	return strings.Join(out, "\n")
}

// TestFeederStatementsAreNotCachedGeneric: the statements of the
// transactions that write through the feeders table that look rows up by
// "= ANY" of the group's names (lockRows, promote; a feeder join's
// promote) are planned for their arrays at every execution, never with a
// cached generic plan: one made while the control table was a few pages
// scanned it with an unhashed "= ANY($1)" filter and stayed cached while
// the table grew (1-3.6 s a statement at 36,000 to 100,000 tables;
// BENCHMARKS.md, "The burst (eighth pass, 2026-12-06)"). The advance
// statement, which finds every row by key in any plan
// (TestFirstVerdictStatementFindsFeedersByKey), keeps the connection's
// plan mode.
func TestFeederStatementsAreNotCachedGeneric(t *testing.T) {
	s, url := newStore(t, Options{})
	s.Close()
	s = openStore(t, url, Options{MaxConns: 1}) // one session: its prepared statements are the ones read below
	ctx := context.Background()
	for round := range 12 {
		var js []FeederJoin
		var as []Advance
		for i := range 4 {
			j := FeederJoin{Table: fmt.Sprintf("gen.r%02d.t%d", round, i), Query: fmt.Sprintf("q%d", i), Name: fmt.Sprintf("n%d", i)}
			js = append(js, j)
			as = append(as, Advance{Table: j.Table, QueryID: j.Query, FinalizedUntil: at(12, 0), Guard: KnownRewind(time.Time{})})
		}
		for _, r := range s.JoinFeeders(ctx, js) {
			if r.Err != nil {
				t.Fatal(r.Err)
			}
		}
		res, err := s.AdvanceBatch(ctx, as)
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range res {
			if r.Err != nil || !r.Moved {
				t.Fatalf("round %d: %+v", round, r)
			}
		}
	}
	for _, q := range []struct{ name, sql string }{{"lockRows", s.sql.lockRows}, {"promote", s.sql.promote}} {
		var generic, custom int64
		if err := s.pool.QueryRow(ctx, `SELECT coalesce(sum(generic_plans), 0)::bigint, coalesce(sum(custom_plans), 0)::bigint
FROM pg_prepared_statements WHERE statement = $1`, q.sql).Scan(&generic, &custom); err != nil {
			t.Fatal(err)
		}
		t.Logf("%s: %d generic plans, %d custom", q.name, generic, custom)
		if generic != 0 || custom < 12 {
			t.Errorf("%s: %d generic plans and %d custom, want none and at least 12", q.name, generic, custom)
		}
	}
	var mode string
	if err := s.pool.QueryRow(ctx, `SHOW plan_cache_mode`).Scan(&mode); err != nil {
		t.Fatal(err)
	}
	if mode != s.planMode {
		t.Errorf("the session's plan_cache_mode after the groups is %q, want the connections' %q", mode, s.planMode)
	}
}

// joinTables joins n tables of schema, each fed by its own query, in
// groups of 500 as the feeder joins go, and returns the joins.
func joinTables(t *testing.T, s *Store, schema string, n int) []FeederJoin {
	t.Helper()
	js := make([]FeederJoin, 0, n)
	for i := range n {
		js = append(js, FeederJoin{Table: fmt.Sprintf("%s.t%06d", schema, i), Query: fmt.Sprintf("q%06d", i), Name: fmt.Sprintf("n%06d", i)})
	}
	for i := 0; i < n; i += 500 {
		for _, r := range s.JoinFeeders(context.Background(), js[i:min(i+500, n)]) {
			if r.Err != nil {
				t.Fatal(r.Err)
			}
		}
	}
	return js
}
