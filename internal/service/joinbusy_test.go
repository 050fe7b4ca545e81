package service

import (
	"context"
	"fmt"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/finalizer-dev/finalizer/control"
	"github.com/finalizer-dev/finalizer/finalizer"
	"github.com/finalizer-dev/finalizer/internal/embeddednats"
	"github.com/finalizer-dev/finalizer/internal/natstest"
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
	ev := &sparkEvents{t: t, nc: nc}
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
	unlock := lockVerdictRow(t, url, table(held))

	start := time.Now()
	for i := range n {
		ev.started(query(i), runID(i), fmt.Sprintf("lk-%02d", i))
	}
	joined := func(i int) bool {
		f, ok := feederOf(t, svc, table(i), query(i))
		return ok && !f.Retired()
	}
	tracked := func() map[string]bool { return trackedTables(svc) }
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
	if err := unlock(); err != nil {
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
	_, js := natstest.Connect(t, ns.ClientURL())
	for i := range n {
		body := startedBody(query(i), runID(i), fmt.Sprintf("lk-%02d", i))
		if _, err := js.Publish(ctx, fmt.Sprintf("spark.started.%s.%s", query(i), runID(i)), []byte(body)); err != nil {
			t.Fatal(err)
		}
	}
	unlock := lockVerdictRow(t, url, table(held))

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
		_ = unlock() // lets the start end, for the cleanup
		<-started
		svc.Stop(ctx)
		t.Fatal("the restart waits for a lock another session holds on one table")
	}
	defer svc.Stop(ctx)
	t.Logf("restart with one table locked: %v", time.Since(start).Round(time.Millisecond))
	tracked := func() map[string]bool { return trackedTables(svc) }
	if got := tracked(); len(got) != n-1 || got[table(held)] {
		t.Fatalf("%d runs tracked after the restart (the locked table's among them: %v), want the %d others", len(got), got[table(held)], n-1)
	}
	if err := unlock(); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(20 * time.Second); !tracked()[table(held)]; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the run of %s is not tracked after the lock went", table(held))
		}
	}
	if _, joined := feederOf(t, svc, table(held), query(held)); !joined {
		fs, _ := svc.Store().Feeders(ctx, table(held))
		t.Errorf("%s: tracked without joining its feeders: %+v", table(held), fs)
	}
}
