package finalizer_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/finalizer-dev/finalizer/control"
	"github.com/finalizer-dev/finalizer/finalizer"
	"github.com/finalizer-dev/finalizer/listener"
	"github.com/finalizer-dev/finalizer/progress"
)

// joinGateStore is a fakeStore that is also a FeederJoiner: the join of
// query gated waits for the gate, and every join and advance is logged.
type joinGateStore struct {
	*fakeStore
	gated string
	gate  chan struct{}
	mu    sync.Mutex
	log   []string
}

func (s *joinGateStore) note(what string) {
	s.mu.Lock()
	s.log = append(s.log, what)
	s.mu.Unlock()
}

func (s *joinGateStore) events() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.log...)
}

func (s *joinGateStore) JoinFeeder(ctx context.Context, table, query, _ string) (control.Joined, error) {
	if query == s.gated {
		select {
		case <-s.gate:
		case <-ctx.Done():
			return control.Joined{}, ctx.Err()
		}
	}
	s.note("join " + query)
	return control.Joined{Added: true}, nil
}

func (s *joinGateStore) Advance(ctx context.Context, a control.Advance) (control.Verdict, bool, error) {
	s.note("advance " + a.QueryID)
	return s.fakeStore.Advance(ctx, a)
}

// Two runs of two queries that feed one table, discovered one after the
// other: the second one's tracker joins the table's feeders (and so
// advances it) only after the first one joined. Started in parallel
// (issue 12), the second run joined and moved the table as its sole
// feeder while the first one's join waited: the verdict ran ahead of the
// first query's data, which the service had seen first
// (tests/TestRetiredFeederRunningAgainIsNotSilent, flaky under load).
func TestDiscoveredRunsJoinATableInTheirOrder(t *testing.T) {
	const queryB = "0b0b0b0b-bc9c-4be8-97a9-b135d2943028"
	store := &joinGateStore{fakeStore: newFakeStore(), gated: queryB, gate: make(chan struct{})}
	bus := newFakeBus()
	reg := finalizer.NewRegistry(finalizer.RegistryConfig{Bus: bus, Store: store,
		Clock: newFakeClock(utc("2026-09-29T00:00:00Z")), Logger: zap.NewNop(),
		Rules: []finalizer.Rule{
			{Table: "t", Query: "backfill", Spec: hourSpec(t)},
			{Table: "t", Query: "live", Spec: hourSpec(t)},
		}})
	defer func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := reg.Close(ctx); err != nil {
			t.Error(err)
		}
	}()
	var openGate sync.Once
	open := func() { openGate.Do(func() { close(store.gate) }) }
	defer open() // before Close, when the test fails with the gate shut
	bf := cdcProgress(runB, "2026-09-28T10:30:00")
	bf.QueryID, bf.Name = queryB, "backfill"
	live := cdcProgress(runA, "2026-09-28T14:05:00")
	live.Name = "live"
	reg.Discovered(listener.Run{QueryID: queryB, RunID: runB, Name: "backfill", Kind: progress.KindProgress, Event: bf})
	reg.Discovered(listener.Run{QueryID: queryA, RunID: runA, Name: "live", Kind: progress.KindProgress, Event: live})
	time.Sleep(300 * time.Millisecond) // the live run's start, were it not waiting
	if got := store.events(); len(got) != 0 {
		t.Fatalf("while the first run's join waits: %v; want nothing (the second run waits for it)", got)
	}
	open()
	eventually(t, "both joined and advanced", func() bool { return len(store.events()) == 4 })
	got := store.events()
	if got[0] != "join "+queryB {
		t.Fatalf("events %v: want the first run's join first", got)
	}
}

// busyStore is a fakeStore whose feeder joins of table held fail with
// control.ErrBusy (another session holds the table locked) until
// released; it logs every join that succeeds.
type busyStore struct {
	*fakeStore
	held   string
	mu     sync.Mutex
	locked bool
	joins  []string // query ids, in the order they joined
}

func (s *busyStore) JoinFeeder(_ context.Context, table, query, _ string) (control.Joined, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if table == s.held && s.locked {
		return control.Joined{}, control.ErrBusy
	}
	s.joins = append(s.joins, query)
	return control.Joined{Added: true}, nil
}

func (s *busyStore) release() {
	s.mu.Lock()
	s.locked = false
	s.mu.Unlock()
}

func (s *busyStore) joined() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.joins...)
}

// More runs into a table another session holds locked than discovery
// starts at once (DefaultDiscoverParallelism): each waits for its join off
// discovery's start slots, so a run into another table is tracked at
// once; and once the lock goes, the held table's runs join in the order
// they were discovered. While the wait held a slot (as first landed),
// the 257th start into the held table stopped discovery.
func TestBusyJoinsHoldNoDiscoverySlot(t *testing.T) {
	n := finalizer.DefaultDiscoverParallelism + 44
	store := &busyStore{fakeStore: newFakeStore(), held: "held", locked: true}
	reg := finalizer.NewRegistry(finalizer.RegistryConfig{Bus: newFakeBus(), Store: store, Logger: zap.NewNop(),
		Tracker: finalizer.TrackerOptions{RetryDelay: 20 * time.Millisecond},
		Rules: []finalizer.Rule{
			{Table: "held", Query: "h-*", Spec: hourSpec(t)},
			{Table: "free", Query: "free", Spec: hourSpec(t)},
		}})
	defer func() {
		store.release()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := reg.Close(ctx); err != nil {
			t.Error(err)
		}
	}()
	id := func(kind, i int) string { return fmt.Sprintf("%08d-0000-4000-8000-%012d", kind, i) }
	discover := func(q, r, name string) {
		reg.Discovered(listener.Run{QueryID: q, RunID: r, Name: name, Kind: progress.KindStarted,
			Event: &progress.Event{Kind: progress.KindStarted, QueryID: q, RunID: r, Name: name, BatchID: -1,
				Timestamp: utc("2026-09-28T12:00:00Z")}})
	}
	var order []string
	for i := range n {
		order = append(order, id(1, i))
		discover(id(1, i), id(2, i), fmt.Sprintf("h-%d", i))
	}
	discover(id(3, 0), id(4, 0), "free")
	eventually(t, "the run into the free table tracked while the held one's runs wait", func() bool {
		st := reg.Status()
		return len(st) == 1 && st[0].Table == "free"
	})
	store.release()
	eventually(t, "every run tracked once the lock went", func() bool { return len(reg.Status()) == n+1 })
	var held []string
	for _, q := range store.joined() {
		if q != id(3, 0) {
			held = append(held, q)
		}
	}
	if !slices.Equal(held, order) {
		t.Fatalf("the held table's runs joined in the order %v, want their discovery's %v", held, order)
	}
}
