package finalizer_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/finalizer-dev/finalizer/control"
	"github.com/finalizer-dev/finalizer/finalizer"
	"github.com/finalizer-dev/finalizer/listener"
	"github.com/finalizer-dev/finalizer/progress"
)

// lateBus is a fakeBus that holds catch-ups and records the runs Recover
// asks to be offered late.
type lateBus struct {
	*fakeBus
	mu   sync.Mutex
	late []string
	held bool
}

func (b *lateBus) HoldCatchUps() func(context.Context) error {
	b.mu.Lock()
	b.held = true
	b.mu.Unlock()
	return func(context.Context) error {
		b.mu.Lock()
		b.held = false
		b.mu.Unlock()
		return nil
	}
}

func (b *lateBus) OfferLate(runIDs []string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if !b.held {
		panic("OfferLate outside the hold")
	}
	b.late = append(b.late, runIDs...)
}

// newSharedTableRegistry returns a registry of cfg, closed at cleanup,
// with a fake clock and two rules: queries region-* feed one table
// (silver.all), queries solo-* a table each (t_<name>).
func newSharedTableRegistry(t *testing.T, cfg finalizer.RegistryConfig) *finalizer.Registry {
	t.Helper()
	cfg.Clock = newFakeClock(utc("2026-09-29T00:00:00Z"))
	cfg.Rules = []finalizer.Rule{
		{Table: "silver.all", Query: "region-*", Spec: hourSpec(t)},
		{Table: "t_{name}", Query: "solo-*", Spec: hourSpec(t)},
	}
	reg := finalizer.NewRegistry(cfg)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = reg.Close(ctx)
	})
	return reg
}

// A restart's recovery offers a run its retained events at once (its
// tracker steps while the others start), except the runs of a table that
// another query of the same recovery also feeds: those wait for the
// release, after every run's feeder join, so that a query first seen
// while the service was down holds its table before any other feeder's
// first advance can move it (ADR 0015, ADR 0023 sixth-pass addendum).
// Two runs of one query are one feeder; explicit tracks count as rules do.
func TestRecoverOffersLateTheRunsOfASharedTable(t *testing.T) {
	q := func(i int) string { return fmt.Sprintf("aaaaaaaa-0000-4000-8000-%012d", i) }
	r := func(i int) string { return fmt.Sprintf("bbbbbbbb-0000-4000-8000-%012d", i) }
	bus := &lateBus{fakeBus: newFakeBus()}
	reg := newSharedTableRegistry(t, finalizer.RegistryConfig{Bus: bus, Store: newFakeStore(), Tracks: &fakeTracks{}})
	run := func(i int, query, name string) listener.Run {
		return listener.Run{QueryID: query, RunID: r(i), Name: name, Kind: progress.KindProgress}
	}
	runs := []listener.Run{
		run(0, q(0), "region-us"), // silver.all, with query 1: late
		run(1, q(1), "region-eu"),
		run(2, q(2), "solo-a"), // t_solo-a alone: early
		run(3, q(3), "solo-b"), // t_solo-b, twice by query 3 (one feeder): early
		run(4, q(3), "solo-b"),
		run(5, q(5), "solo-c"), // t_solo-c, with the explicit track of query 6: late
	}
	spec := []byte(`{}`)
	tracks := []control.Track{
		{QueryID: q(6), RunID: r(6), Table: "t_solo-c", Spec: spec},
		{QueryID: q(7), RunID: r(7), Table: "silver.all", Spec: spec, DoneAt: utc("2026-09-28T00:00:00Z")}, // done: not recovered
	}
	_ = reg.Recover(context.Background(), tracks, runs)
	bus.mu.Lock()
	got := slices.Sorted(slices.Values(bus.late))
	bus.mu.Unlock()
	want := []string{r(0), r(1), r(5), r(6)}
	if !slices.Equal(got, want) {
		t.Fatalf("offered late %v, want %v", got, want)
	}
}

// logBus is a fakeBus that notes each subscription in a joinGateStore's
// log, with the joins and advances.
type logBus struct {
	*fakeBus
	store *joinGateStore
}

func (b logBus) Subscribe(queryID, runID string, box *listener.Mailbox) (finalizer.RunSubscription, error) {
	b.store.note("subscribe " + queryID)
	return b.fakeBus.Subscribe(queryID, runID, box)
}

// Offered late, a run of a shared table still gets its live events as
// soon as it is subscribed: a feeder whose query runs during the recovery
// would move the table on its next progress before a query first seen
// while the service was down, started later in the recovery, joined it.
// So every query of a shared table joins it before any run is
// subscribed; a table one query feeds is joined by its run's start only.
func TestRecoverJoinsTheFeedersOfASharedTableFirst(t *testing.T) {
	q := func(i int) string { return fmt.Sprintf("aaaaaaaa-0000-4000-8000-%012d", i) }
	r := func(i int) string { return fmt.Sprintf("bbbbbbbb-0000-4000-8000-%012d", i) }
	store := &joinGateStore{fakeStore: newFakeStore()}
	reg := newSharedTableRegistry(t, finalizer.RegistryConfig{
		Bus: logBus{newFakeBus(), store}, Store: store,
		RecoverParallelism: 1, // one start after the other: the first subscribes before the second joins
	})
	runs := []listener.Run{
		{QueryID: q(0), RunID: r(0), Name: "region-us", Kind: progress.KindProgress},
		{QueryID: q(1), RunID: r(1), Name: "region-eu", Kind: progress.KindProgress},
		{QueryID: q(2), RunID: r(2), Name: "solo-a", Kind: progress.KindProgress},
	}
	if err := reg.Recover(context.Background(), nil, runs); err != nil {
		t.Fatal(err)
	}
	log := store.events()
	first := slices.IndexFunc(log, func(s string) bool { return len(s) > 10 && s[:10] == "subscribe " })
	if first < 0 {
		t.Fatalf("no subscription: %v", log)
	}
	for _, want := range []string{"join " + q(0), "join " + q(1)} {
		if i := slices.Index(log, want); i < 0 || i > first {
			t.Fatalf("%q not before the first subscription: %v", want, log)
		}
	}
	if i := slices.Index(log, "join "+q(2)); i < first {
		t.Fatalf("the solo table's query joined before the first subscription (%v): only shared tables are joined first", log)
	}
}

// Discovery runs while a restart lists the stream and recovers: a run it
// started then (a live event of a feeder whose query runs) stepped on its
// live events before a query first seen while the service was down,
// listed and started later by Recover, joined the table. Under
// HoldDiscovery its decision waits; Recover starts it after joining the
// shared table's feeders.
func TestHoldDiscoveryLetsRecoverJoinFirst(t *testing.T) {
	q := func(i int) string { return fmt.Sprintf("aaaaaaaa-0000-4000-8000-%012d", i) }
	r := func(i int) string { return fmt.Sprintf("bbbbbbbb-0000-4000-8000-%012d", i) }
	store := &joinGateStore{fakeStore: newFakeStore()}
	reg := finalizer.NewRegistry(finalizer.RegistryConfig{
		Bus: logBus{newFakeBus(), store}, Store: store, Clock: newFakeClock(utc("2026-09-29T00:00:00Z")),
		Rules: []finalizer.Rule{{Table: "silver.all", Query: "region-*", Spec: hourSpec(t)}},
	})
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = reg.Close(ctx)
	})
	release := reg.HoldDiscovery()
	runs := []listener.Run{
		{QueryID: q(0), RunID: r(0), Name: "region-us", Kind: progress.KindProgress},
		{QueryID: q(1), RunID: r(1), Name: "region-eu", Kind: progress.KindProgress},
	}
	reg.Discovered(runs[0]) // its live event, while the stream is listed
	for deadline := time.Now().Add(200 * time.Millisecond); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		if len(store.events()) > 0 {
			break
		}
	}
	if log := store.events(); len(log) > 0 {
		t.Fatalf("discovery started a run under the hold: %v", log)
	}
	if err := reg.Recover(context.Background(), nil, runs); err != nil {
		t.Fatal(err)
	}
	release()
	release() // twice: nothing more
	log := store.events()
	first := slices.IndexFunc(log, func(s string) bool { return len(s) > 10 && s[:10] == "subscribe " })
	if i := slices.Index(log, "join "+q(1)); first < 0 || i < 0 || i > first {
		t.Fatalf("the second query did not join before the first subscription: %v", log)
	}
	// After the release, discovery decides again.
	reg.Discovered(listener.Run{QueryID: q(2), RunID: r(2), Name: "region-ap", Kind: progress.KindProgress})
	for deadline := time.Now().Add(5 * time.Second); !slices.Contains(store.events(), "subscribe "+q(2)); time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("a run discovered after the release was not started: %v", store.events())
		}
	}
}

// A run a restart lists without a name (its retained events carry none)
// maps to no table, so sharedTableRuns cannot count it as a feeder of a
// shared table, and Recover starts the table's other feeders, whose
// trackers step on their live events. When its name comes in a live event
// while the recovery runs, discovery's hold kept its decision, and its
// feeder join, until the release: for the rest of the recovery the other
// feeders moved the table without it. Its tables are joined at once; its
// start still waits for the release.
func TestRunNamedDuringRecoveryJoinsAtOnce(t *testing.T) {
	q := func(i int) string { return fmt.Sprintf("aaaaaaaa-0000-4000-8000-%012d", i) }
	r := func(i int) string { return fmt.Sprintf("bbbbbbbb-0000-4000-8000-%012d", i) }
	store := &joinGateStore{fakeStore: newFakeStore()}
	reg := newSharedTableRegistry(t, finalizer.RegistryConfig{Bus: logBus{newFakeBus(), store}, Store: store})
	release := reg.HoldDiscovery()
	defer release()
	runs := []listener.Run{
		{QueryID: q(0), RunID: r(0), Name: "region-us", Kind: progress.KindProgress},
		{QueryID: q(1), RunID: r(1), Kind: progress.KindIdle}, // no name in the stream
	}
	if err := reg.Recover(context.Background(), nil, runs); err != nil {
		t.Fatal(err)
	}
	if log := store.events(); slices.Contains(log, "join "+q(1)) {
		t.Fatalf("the nameless run joined before its name came: %v", log)
	}
	// Its name, live, while the recovery still holds discovery.
	reg.Discovered(listener.Run{QueryID: q(1), RunID: r(1), Name: "region-eu", Kind: progress.KindProgress,
		Event: &progress.Event{Kind: progress.KindProgress, QueryID: q(1), RunID: r(1)}})
	for deadline := time.Now().Add(5 * time.Second); !slices.Contains(store.events(), "join "+q(1)); time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the run named during the recovery did not join its table before the release: %v", store.events())
		}
	}
	if slices.Contains(store.events(), "subscribe "+q(1)) {
		t.Fatalf("the run named during the recovery started under the hold: %v", store.events())
	}
	release()
	for deadline := time.Now().Add(5 * time.Second); !slices.Contains(store.events(), "subscribe "+q(1)); time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the run named during the recovery was not started after the release: %v", store.events())
		}
	}
}
