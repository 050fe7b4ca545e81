//go:build linux

package tests

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/finalizer-dev/finalizer/internal/embeddednats"
	"github.com/finalizer-dev/finalizer/internal/pgcluster"
)

// replicaCost is what one replica count cost in PostgreSQL.
type replicaCost struct {
	replicas         int
	mode             string // ownership: off, on (one owner), balanced
	events, periods  int
	writes           int64 // rows inserted or updated in the control table
	advanceStmts     int64 // advance statements (single and group commit), not the statements the table's triggers run
	allStmts         int64 // every statement the replicas ran on the database
	lockStmts        int64 // of which the ownership's polls of the advisory locks
	xacts            int64 // committed transactions of the database
	writesPerPeriod  float64
	advancesPerEvent float64
	stmtsPerEvent    float64
	// From each replica's /metrics: the advances its trackers made, its
	// group commits, the advances of tables it does not own that it held
	// (answered without a statement) and the held advances it wrote (a
	// flush or a fallback).
	advances, groups, held, heldWritten []float64
}

// checkOneWriter checks, for a run with ownership on, that one replica
// (the owner of every bucket) held nothing and every other replica held
// every advance it made and wrote none of them: a replica that does not
// own a table makes no statement for its advances. It also bounds the
// database's advance statements by the owner's group commits, each at
// most three statements (the sole upsert, then for a table's first or
// shared verdict the promotion and the feeders' advance), and the held
// advances written. The bound counts statements, not group commits: a
// bound relative to one replica's statements, which the grouping (so the
// machine's load) moves by 2x, failed on a loaded machine with a correct
// service (15 against 8).
func (c replicaCost) checkOneWriter(t *testing.T) {
	t.Helper()
	t.Logf("ownership on, %d replicas: advances %v, group commits %v, held %v, held written %v: %d advance statements",
		c.replicas, c.advances, c.groups, c.held, c.heldWritten, c.advanceStmts)
	owners, bound := 0, 2.0
	for i := range c.groups {
		bound += 3 * c.heldWritten[i]
		switch {
		case c.held[i] == 0:
			owners++
			bound += 3 * c.groups[i]
		case c.held[i] != c.advances[i] || c.heldWritten[i] != 0:
			t.Errorf("ownership on, %d replicas: replica %d held %v of its %v advances and wrote %v of them: a replica that does not own a table must not write it",
				c.replicas, i, c.held[i], c.advances[i], c.heldWritten[i])
		}
	}
	if owners != 1 {
		t.Errorf("ownership on, %d replicas: %d replicas held no advance, want 1 (the owner of every bucket)", c.replicas, owners)
	}
	if float64(c.advanceStmts) > bound {
		t.Errorf("ownership on, %d replicas: %d advance statements, more than the owner's group commits allow (%v): a replica that does not own a table must not write it",
			c.replicas, c.advanceStmts, bound)
	}
}

// TestReplicaCost measures what a second and a third replica cost the
// control database under one load, without and with the ownership of
// tables (ADR 0020), in the same run: rows written per (table, period)
// and statements per event, from pg_stat_statements and
// pg_stat_user_tables on a dedicated cluster. The writes must not grow
// with the replicas (the forward-only upsert turns a replica's late
// advance into a read); without ownership the statements do, one advance
// per replica per group of tables; with it a replica that does not own a
// table makes no statement for its advances. The figures are in
// BENCHMARKS.md. FINALIZER_COST_BALANCED=1 measures balanced ownership
// too.
func TestReplicaCost(t *testing.T) {
	dir := filepath.Join(openDir(t), "pg")
	settings := map[string]string{"shared_preload_libraries": "pg_stat_statements", "pg_stat_statements.track": "all"}
	for k, v := range fastPG {
		settings[k] = v
	}
	pg := startCluster(t, dir, 0, settings)
	const nRuns, batches = 20, 24 // 13:05 to 15:00 in 5-minute steps: 3 hourly periods per table
	var costs []replicaCost
	modes := []string{"off", "on"}
	if os.Getenv("FINALIZER_COST_BALANCED") == "1" {
		// The balanced rows of BENCHMARKS.md: 3 more clusters of
		// replicas, so not in every run of the suite.
		modes = append(modes, "balanced")
	}
	for m, mode := range modes {
		for n := 1; n <= 3; n++ {
			costs = append(costs, measureReplicas(t, pg, n, m, mode, nRuns, batches))
		}
	}
	t.Log("ownership  replicas  events  (table,period)  writes  writes/period  advance stmts  advances/event  lock stmts  all stmts/event  xacts")
	for _, c := range costs {
		t.Logf("%9s  %8d  %6d  %14d  %6d  %13.2f  %13d  %14.3f  %10d  %15.3f  %5d",
			c.mode, c.replicas, c.events, c.periods, c.writes, c.writesPerPeriod, c.advanceStmts, c.advancesPerEvent, c.lockStmts, c.stmtsPerEvent, c.xacts)
	}
	for _, c := range costs {
		if c.writesPerPeriod > 1.05 {
			t.Errorf("%d replicas (ownership %s): %.2f control-table writes per (table, period), want 1: a replica's late advance must be a read",
				c.replicas, c.mode, c.writesPerPeriod)
		}
	}
	// With ownership (one owner), a table has one writer.
	for _, c := range costs[3:6] {
		c.checkOneWriter(t)
	}
}

func measureReplicas(t *testing.T, pg *pgcluster.Cluster, n, m int, mode string, nRuns, batches int) replicaCost {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	db := fmt.Sprintf("cost_%d_%s", n, mode)
	admin, err := pgx.Connect(ctx, pg.URL())
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close(ctx)
	if _, err := admin.Exec(ctx, "CREATE DATABASE "+db); err != nil {
		t.Fatal(err)
	}
	url := strings.Replace(pg.URL(), "/finalizer?", "/"+db+"?", 1)
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, "CREATE EXTENSION IF NOT EXISTS pg_stat_statements"); err != nil {
		t.Fatal(err)
	}

	ns, err := embeddednats.Start(embeddednats.Options{Port: embeddednats.RandomPort, StoreDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer ns.Shutdown()
	config := fmt.Sprintf(`
ownership: {enabled: %v, balance: %v}
tables:
  - table: "cost.{name}"
    query: "cost_*"
    granularity: hour
`, mode != "off", mode == "balanced")
	var procs []*proc
	for range n {
		procs = append(procs, startServe(t, serveOpts{pgURL: url, natsURL: ns.ClientURL(), config: config, args: []string{"--log-level", "info"}}))
	}
	pub := connect(t, ns.ClientURL())
	type run struct{ q, r, name string }
	var rs []run
	for i := range nRuns {
		x := run{id(0xc000 + 2*i + 100*n + 1000*m), id(0xc001 + 2*i + 100*n + 1000*m), fmt.Sprintf("cost_%d", i)}
		pub.publish("started", x.q, x.r, startedJSON(x.q, x.r, x.name))
		rs = append(rs, x)
	}
	for _, p := range procs {
		eventually(t, "every replica tracks every run", func() bool { return len(liveRuns(t, p.httpURL)) == nRuns })
	}
	// Count from here: the load only.
	if _, err := conn.Exec(ctx, "SELECT pg_stat_statements_reset()"); err != nil {
		t.Fatal(err)
	}
	before := dbCounters(t, ctx, conn, db)
	base := time.Date(2026, 9, 28, 13, 0, 0, 0, time.UTC)
	for b := 1; b <= batches; b++ {
		ts := base.Add(time.Duration(b) * 5 * time.Minute).Format("2006-01-02T15:04:05")
		for _, x := range rs {
			pub.publish("progress", x.q, x.r, progressAt(x.q, x.r, x.name, int64(b), ts))
		}
		time.Sleep(20 * time.Millisecond)
	}
	final := base.Add(time.Duration(batches) * 5 * time.Minute).Truncate(time.Hour).Format(time.RFC3339)
	for _, x := range rs {
		waitVerdict(t, url, "cost."+x.name, final)
	}
	c := replicaCost{replicas: n, mode: mode, events: nRuns * batches, periods: nRuns * 3}
	// The replicas that do not own the tables take the last events in
	// after the owner's verdicts: their counters are read once they stand
	// still (the same twice, 200 ms apart), not after a fixed 200 ms. A
	// replica still taking them in counts a held advance (held) before
	// its statement's time (advances), each read on its own, and its
	// counters would disagree.
	read := func() (advances, groups, held, heldWritten []float64) {
		for _, p := range procs {
			advances = append(advances, metric(t, p.httpURL, "finalizer_advance_seconds_count"))
			groups = append(groups, metric(t, p.httpURL, "finalizer_advance_batch_size_count"))
			held = append(held, metric(t, p.httpURL, "finalizer_ownership_advances_held_total"))
			heldWritten = append(heldWritten, metric(t, p.httpURL, "finalizer_ownership_held_written_total"))
		}
		return
	}
	c.advances, c.groups, c.held, c.heldWritten = read()
	for deadline := time.Now().Add(30 * time.Second); ; {
		time.Sleep(200 * time.Millisecond)
		a, g, h, w := read()
		if slices.Equal(a, c.advances) && slices.Equal(g, c.groups) && slices.Equal(h, c.held) && slices.Equal(w, c.heldWritten) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d replicas (ownership %s): their counters still moved 30 s after the last verdict", n, mode)
		}
		c.advances, c.groups, c.held, c.heldWritten = a, g, h, w
	}
	for _, p := range procs {
		p.stop() // a backend flushes its statistics when it exits
	}
	var after [2]int64
	eventually(t, "the statistics of the replicas' sessions", func() bool {
		after = dbCounters(t, ctx, conn, db)
		return after[0] > before[0]
	})
	c.writes = after[0] - before[0]
	c.xacts = after[1] - before[1]
	if err := conn.QueryRow(ctx, `SELECT
		coalesce(sum(calls) FILTER (WHERE toplevel AND query ILIKE '%INSERT INTO%table_finalization%'), 0),
		coalesce(sum(calls) FILTER (WHERE query NOT ILIKE '%pg_stat%' AND query NOT ILIKE '%/* test */%'), 0),
		coalesce(sum(calls) FILTER (WHERE query ILIKE '%pg_locks%' OR query ILIKE '%advisory%'), 0)
		FROM pg_stat_statements WHERE dbid = (SELECT oid FROM pg_database WHERE datname = $1)`, db).Scan(&c.advanceStmts, &c.allStmts, &c.lockStmts); err != nil {
		t.Fatal(err)
	}
	if testing.Verbose() {
		rows, err := conn.Query(ctx, `SELECT calls, left(regexp_replace(query, '\s+', ' ', 'g'), 90) FROM pg_stat_statements
			WHERE dbid = (SELECT oid FROM pg_database WHERE datname = $1) AND query NOT ILIKE '%pg_stat%' ORDER BY calls DESC LIMIT 8`, db)
		if err != nil {
			t.Fatal(err)
		}
		for rows.Next() {
			var calls int64
			var q string
			if err := rows.Scan(&calls, &q); err != nil {
				t.Fatal(err)
			}
			t.Logf("%s, %d replicas: %4d  %s", mode, n, calls, q)
		}
		rows.Close()
	}
	c.writesPerPeriod = float64(c.writes) / float64(c.periods)
	c.advancesPerEvent = float64(c.advanceStmts) / float64(c.events)
	c.stmtsPerEvent = float64(c.allStmts) / float64(c.events)
	return c
}

// dbCounters returns the control table's inserted plus updated rows and
// the database's committed transactions.
func dbCounters(t *testing.T, ctx context.Context, conn *pgx.Conn, db string) [2]int64 {
	t.Helper()
	var w, x int64
	if _, err := conn.Exec(ctx, "SELECT pg_stat_clear_snapshot()"); err != nil {
		t.Fatal(err)
	}
	if err := conn.QueryRow(ctx, `SELECT
		coalesce((SELECT n_tup_ins + n_tup_upd FROM pg_stat_user_tables WHERE relname = 'table_finalization'), 0),
		(SELECT xact_commit FROM pg_stat_database WHERE datname = $1)`, db).Scan(&w, &x); err != nil {
		t.Fatal(err)
	}
	return [2]int64{w, x}
}

// liveRuns lists the runs a replica tracks and has not finished.
func liveRuns(t *testing.T, httpURL string) []runStatus {
	var live []runStatus
	for _, r := range runs(t, httpURL) {
		if !r.Done {
			live = append(live, r)
		}
	}
	return live
}
