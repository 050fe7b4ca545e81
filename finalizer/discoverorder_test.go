package finalizer_test

import (
	"context"
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
