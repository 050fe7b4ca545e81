package service

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/finalizer-dev/finalizer/control"
	"github.com/finalizer-dev/finalizer/finalizer"
	"github.com/finalizer-dev/finalizer/internal/embeddednats"
	"github.com/finalizer-dev/finalizer/internal/pgcluster/pgtest"
	"github.com/finalizer-dev/finalizer/listener"
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

// TestALockedTableDoesNotHoldARestart: the same lock at a restart. The
// service recovers the runs the stream retains (here: 20 runs that began
// while it was down, each the first of its query on a table another query
// fed so far) and joins them together; the run whose table another
// session holds locked waits for its join on a goroutine of its own, so
// that the restart ends (and the other runs are tracked and caught up)
// without waiting for a lock another session may hold for hours.
func TestALockedTableDoesNotHoldARestart(t *testing.T) {
	const n, held = 20, 11
	spec, err := progress.ParseSpec(progress.SpecOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ns, err := embeddednats.Start(embeddednats.Options{Host: "127.0.0.1", Port: embeddednats.RandomPort, StoreDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer ns.Shutdown()
	url := pgtest.URL(t)
	opts := Options{DataDir: t.TempDir(), PostgresURL: url, NATS: listener.Options{URL: ns.ClientURL()}, Logger: zap.NewNop(),
		Registry: finalizer.RegistryConfig{Rules: []finalizer.Rule{{Table: "lk.{name}", Query: "lk-*", Spec: spec}}}}
	ctx := context.Background()
	svc, err := Start(ctx, opts) // makes the stream and the control table
	if err != nil {
		t.Fatal(err)
	}
	table := func(i int) string { return fmt.Sprintf("lk.lk-%02d", i) }
	query := func(i int) string { return fmt.Sprintf("00000000-0000-4000-8000-%012d", i) }
	runID := func(i int) string { return fmt.Sprintf("00000000-3333-4000-8000-%012d", i) }
	for i := range n {
		if _, _, err := svc.Store().Advance(ctx, control.Advance{Table: table(i), QueryID: "q-old",
			FinalizedUntil: time.Date(2026, 9, 28, 12, 0, 0, 0, time.UTC)}); err != nil {
			t.Fatal(err)
		}
	}
	svc.Stop(ctx)
	// The runs begin while the service is down: the stream keeps them.
	nc, err := nats.Connect(ns.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	for i := range n {
		body := fmt.Sprintf(`{"id":%q,"runId":%q,"name":"lk-%02d","timestamp":"2026-09-28T12:00:00.000Z"}`, query(i), runID(i), i)
		if _, err := js.Publish(ctx, fmt.Sprintf("spark.started.%s.%s", query(i), runID(i)), []byte(body)); err != nil {
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
	started := make(chan error, 1)
	go func() {
		s, err := Start(ctx, opts)
		if err == nil {
			svc = s
		}
		started <- err
	}()
	select {
	case err := <-started:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(15 * time.Second):
		_ = tx.Rollback(ctx) // lets the start end, for the cleanup
		<-started
		svc.Stop(ctx)
		t.Fatal("the restart waits for a lock another session holds on one table")
	}
	defer svc.Stop(ctx)
	t.Logf("restart with one table locked: %v", time.Since(start).Round(time.Millisecond))
	tracked := func() map[string]bool {
		m := map[string]bool{}
		for _, st := range svc.Registry().Status() {
			m[st.Table] = true
		}
		return m
	}
	if got := tracked(); len(got) != n-1 || got[table(held)] {
		t.Fatalf("%d runs tracked after the restart (the locked table's among them: %v), want the %d others", len(got), got[table(held)], n-1)
	}
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(20 * time.Second); !tracked()[table(held)]; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the run of %s is not tracked after the lock went", table(held))
		}
	}
	fs, err := svc.Store().Feeders(ctx, table(held))
	if err != nil {
		t.Fatal(err)
	}
	joined := false
	for _, f := range fs {
		joined = joined || f.Feeder == query(held)
	}
	if !joined {
		t.Errorf("%s: tracked without joining its feeders: %+v", table(held), fs)
	}
}
