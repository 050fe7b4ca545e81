package service

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/finalizer-dev/finalizer/control"
	"github.com/finalizer-dev/finalizer/finalizer"
	"github.com/finalizer-dev/finalizer/internal/pgcluster/pgtest"
	"github.com/finalizer-dev/finalizer/progress"
)

// TestALockedTableHoldsOnlyItsOwnRunsJoin: another session keeps one
// table's control row locked (a downstream job's SELECT ... FOR SHARE in a
// transaction it left open) while 20 runs are discovered together, each
// the first run of its query on a table another query fed so far (its
// join promotes the table). The 19 others are joined and tracked at once
// (about one lock wait); the held table's run waits, said at WARN with
// the table and where to look, and is joined and tracked once the lock
// goes. Before, the group of joins waited for its deadline (10 s) and
// failed whole, and every run was tracked without holding its table.
func TestALockedTableHoldsOnlyItsOwnRunsJoin(t *testing.T) {
	const n, held = 20, 7
	spec, err := progress.ParseSpec(progress.SpecOptions{})
	if err != nil {
		t.Fatal(err)
	}
	url := pgtest.URL(t)
	core, logs := observer.New(zap.InfoLevel)
	svc, nc := startTestWith(t, Options{PostgresURL: url, Logger: zap.New(core),
		Registry: finalizer.RegistryConfig{Rules: []finalizer.Rule{{Table: "lk.{name}", Query: "lk-*", Spec: spec}}}})
	ctx := context.Background()
	table := func(i int) string { return fmt.Sprintf("lk.lk-%02d", i) }
	query := func(i int) string { return fmt.Sprintf("00000000-0000-4000-8000-%012d", i) }
	runID := func(i int) string { return fmt.Sprintf("00000000-1111-4000-8000-%012d", i) }
	for i := range n {
		if _, _, err := svc.Store().Advance(ctx, control.Advance{Table: table(i), QueryID: "q-old",
			FinalizedUntil: time.Date(2026, 9, 28, 12, 0, 0, 0, time.UTC)}); err != nil {
			t.Fatal(err)
		}
	}
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	tx, err := conn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	if _, err := tx.Exec(ctx, `SELECT * FROM table_finalization WHERE table_name = $1 FOR SHARE`, table(held)); err != nil {
		t.Fatal(err)
	}

	start := time.Now()
	for i := range n {
		body := fmt.Sprintf(`{"id":%q,"runId":%q,"name":"lk-%02d","timestamp":"2026-09-28T12:00:00.000Z"}`, query(i), runID(i), i)
		if err := nc.Publish(fmt.Sprintf("spark.started.%s.%s", query(i), runID(i)), []byte(body)); err != nil {
			t.Fatal(err)
		}
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	joined := func(i int) bool {
		fs, err := svc.Store().Feeders(ctx, table(i))
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range fs {
			if f.Feeder == query(i) && !f.Retired() {
				return true
			}
		}
		return false
	}
	tracked := func() map[string]bool {
		m := map[string]bool{}
		for _, st := range svc.Registry().Status() {
			m[st.Table] = true
		}
		return m
	}
	for len(tracked()) < n-1 {
		if time.Since(start) > 6*time.Second {
			t.Fatalf("%d runs tracked after %v, want the %d whose tables are not locked at once", len(tracked()), time.Since(start), n-1)
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Logf("%d runs tracked in %v with one table locked", n-1, time.Since(start).Round(time.Millisecond))
	if tracked()[table(held)] {
		t.Fatalf("the run of the locked table %s is tracked before it joined the table's feeders", table(held))
	}
	for i := range n {
		if i != held && !joined(i) {
			t.Errorf("%s: query %s is not a feeder, want joined before it is tracked", table(i), query(i))
		}
	}
	warned := false
	for _, e := range logs.FilterMessageSnippet("this run waits to join the table's feeders").All() {
		warned = warned || (e.ContextMap()["table"] == table(held) && e.Level == zap.WarnLevel)
	}
	if !warned {
		t.Errorf("no WARN naming %s as held", table(held))
	}

	// The lock goes: the run joins, then is tracked.
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	for !tracked()[table(held)] {
		if time.Since(start) > 20*time.Second {
			t.Fatalf("the run of %s is not tracked after the lock went", table(held))
		}
		time.Sleep(20 * time.Millisecond)
	}
	if !joined(held) {
		t.Errorf("%s: tracked without joining the table's feeders", table(held))
	}
}
