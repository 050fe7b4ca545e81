package finalizer_test

import (
	"context"
	"fmt"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/finalizer-dev/finalizer/control"
	"github.com/finalizer-dev/finalizer/finalizer"
	"github.com/finalizer-dev/finalizer/listener"
	"github.com/finalizer-dev/finalizer/progress"
)

// lockedJoinStore is a fakeStore whose joins of query busy fail with
// control.ErrBusy (another session holds the table locked, and the other
// feeders' joins are known ones, read without the lock), or with err when
// set (the database unavailable, a try that timed out), until unlock; it
// logs the joins that succeed and every advance, in order.
type lockedJoinStore struct {
	*fakeStore
	busy   string
	err    error
	mu     sync.Mutex
	locked bool
	log    []string
}

func (s *lockedJoinStore) JoinFeeder(_ context.Context, _, query, _ string) (control.Joined, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if query == s.busy && s.locked {
		if s.err != nil {
			return control.Joined{}, s.err
		}
		return control.Joined{}, control.ErrBusy
	}
	s.log = append(s.log, "join "+query)
	return control.Joined{Added: true}, nil
}

func (s *lockedJoinStore) Advance(ctx context.Context, a control.Advance) (control.Verdict, bool, error) {
	s.mu.Lock()
	s.log = append(s.log, "advance "+a.QueryID)
	s.mu.Unlock()
	return s.fakeStore.Advance(ctx, a)
}

func (s *lockedJoinStore) unlock() {
	s.mu.Lock()
	s.locked = false
	s.mu.Unlock()
}

func (s *lockedJoinStore) events() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.log...)
}

// joinRace is the rig of the join races: a registry whose rules map the
// queries named live and backfill (and more, by options) to table t, its
// advances retried every 5 ms, three times, through a lockedJoinStore
// whose joins of queryB fail with joinErr (nil: control.ErrBusy) until
// unlocked; at the end of the test the store is unlocked and the registry
// closed.
type joinRace struct {
	store *lockedJoinStore
	reg   *finalizer.Registry
}

// joinRaceQueryB is the query whose joins the rig's store fails.
const joinRaceQueryB = "0b0b0b0b-bc9c-4be8-97a9-b135d2943028"

func startJoinRace(t *testing.T, joinErr error, opts ...func(*finalizer.RegistryConfig)) *joinRace {
	t.Helper()
	store := &lockedJoinStore{fakeStore: newFakeStore(), busy: joinRaceQueryB, err: joinErr, locked: true}
	cfg := finalizer.RegistryConfig{Bus: newFakeBus(), Store: store, Logger: zap.NewNop(),
		Tracker:  finalizer.TrackerOptions{RetryDelay: 5 * time.Millisecond, Retries: 3},
		MaxBatch: -1,
		Rules: []finalizer.Rule{
			{Table: "t", Query: "live", Spec: hourSpec(t)},
			{Table: "t", Query: "backfill", Spec: hourSpec(t)},
		}}
	for _, o := range opts {
		o(&cfg)
	}
	r := &joinRace{store: store, reg: finalizer.NewRegistry(cfg)}
	t.Cleanup(func() {
		store.unlock()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := r.reg.Close(ctx); err != nil {
			t.Error(err)
		}
	})
	return r
}

// live has the known feeder (query live, runA) report commitTS.
func (r *joinRace) live(commitTS string) {
	ev := cdcProgress(runA, commitTS)
	ev.Name = "live"
	r.reg.Discovered(listener.Run{QueryID: queryA, RunID: runA, Name: "live", Kind: progress.KindProgress, Event: ev})
}

// liveAdvanced has the known feeder report 10:05 and waits for its advance.
func (r *joinRace) liveAdvanced(t *testing.T, what string) {
	t.Helper()
	r.live("2026-09-28T10:05:00")
	eventually(t, what, func() bool { return slices.Contains(r.store.events(), "advance "+queryA) })
}

// started has the run of query q named name start (discovered).
func (r *joinRace) started(q, run, name string) {
	r.reg.Discovered(listener.Run{QueryID: q, RunID: run, Name: name, Kind: progress.KindStarted,
		Event: &progress.Event{Kind: progress.KindStarted, QueryID: q, RunID: run, Name: name, BatchID: -1,
			Timestamp: utc("2026-09-28T11:00:00Z")}})
}

// busyJoinTried waits until the start of query q's run has tried its join
// and waits for it (its table's first wait, with the try's error): the
// start's try runs on the registry's goroutines, which a loaded machine
// may not have run yet after any fixed sleep.
func (r *joinRace) busyJoinTried(t *testing.T, q string) {
	t.Helper()
	eventually(t, "the busy join tried, the run waiting", func() bool {
		w := r.reg.JoinWaits()
		return len(w) >= 1 && w[0].QueryID == q && w[0].LastError != ""
	})
}

// recoverNameless holds discovery as a restart's recovery does and
// recovers the known feeder's run and runB, listed without a name; it
// returns the hold's release (again at the end of the test).
func (r *joinRace) recoverNameless(t *testing.T) (release func()) {
	t.Helper()
	release = r.reg.HoldDiscovery()
	t.Cleanup(release)
	runs := []listener.Run{
		{QueryID: queryA, RunID: runA, Name: "live", Kind: progress.KindProgress},
		{QueryID: joinRaceQueryB, RunID: runB, Kind: progress.KindIdle}, // no name in the stream
	}
	if err := r.reg.Recover(context.Background(), nil, runs); err != nil {
		t.Fatal(err)
	}
	return release
}

// named has runB's name (backfill) come in a live progress.
func (r *joinRace) named() {
	r.reg.Discovered(listener.Run{QueryID: joinRaceQueryB, RunID: runB, Name: "backfill", Kind: progress.KindProgress,
		Event: &progress.Event{Kind: progress.KindProgress, QueryID: joinRaceQueryB, RunID: runB, Name: "backfill"}})
}

// The locked-table join race: a new query's run starts into a table
// another session holds locked, so its feeder join waits (joinLater);
// the table's known feeder is tracked and keeps reporting. Its advances
// must wait for the join: after the lock goes, its retries would race the
// join's, and the table would move on its word past data the new query
// was writing since its start. And a start of another query into the
// table while the join waits (the busy-join start order) waits behind it.
// The same for any join that did not succeed for a reason a retry may
// change: the database unavailable at the start, a try that timed out
// (before, only the lock held the table: the run was tracked without
// joining, and the known feeder moved the table past its data).
func TestAdvancesWaitForAFailedJoinOfTheirTable(t *testing.T) {
	for _, tc := range []struct {
		name string
		err  error
	}{
		{"busy", control.ErrBusy},
		{"unavailable", fmt.Errorf("join feeder: %w: dial tcp 127.0.0.1:5432: connect: connection refused", control.ErrUnavailable)},
		{"timed out", fmt.Errorf("join feeder: %w", context.DeadlineExceeded)},
	} {
		t.Run(tc.name, func(t *testing.T) { testAdvancesWaitForAFailedJoin(t, tc.err) })
	}
}

func testAdvancesWaitForAFailedJoin(t *testing.T, joinErr error) {
	const (
		queryB = joinRaceQueryB
		queryC = "0c0c0c0c-bc9c-4be8-97a9-b135d2943028"
	)
	r := startJoinRace(t, joinErr, func(c *finalizer.RegistryConfig) {
		c.Rules = append(c.Rules, finalizer.Rule{Table: "t", Query: "late", Spec: hourSpec(t)})
	})
	reg, store := r.reg, r.store
	r.liveAdvanced(t, "the known feeder advanced")
	r.started(queryB, runB, "backfill")
	eventually(t, "the new query's start waits for its join", func() bool {
		return slices.ContainsFunc(reg.Status(), func(s finalizer.TrackerStatus) bool { return s.RunID == runA }) &&
			!slices.Contains(store.events(), "join "+queryB)
	})
	r.busyJoinTried(t, queryB)
	r.started(queryC, runC, "late")
	n := len(store.events())
	r.live("2026-09-28T13:05:00")
	time.Sleep(300 * time.Millisecond) // the known feeder's tries and retries
	if got := store.events()[n:]; len(got) != 0 {
		t.Fatalf("while the new query's join waits for the lock: %v; want no advance of the table and no other start", got)
	}
	// Said where an operator looks (finalizer status): the table waits
	// for the new query's join, and why.
	if w := reg.JoinWaits(); len(w) < 1 || w[0].Table != "t" || w[0].QueryID != queryB || w[0].RunID != runB ||
		!strings.Contains(w[0].LastError, joinErr.Error()) {
		t.Fatalf("join waits %+v, want table t waiting for query %s's join, run %s, with its error", w, queryB, runB)
	}
	store.unlock()
	eventually(t, "the new query joined and the known feeder advanced", func() bool {
		ev := store.events()
		return slices.Contains(ev, "join "+queryB) && slices.Contains(ev[n:], "advance "+queryA) && slices.Contains(ev, "join "+queryC)
	})
	got := store.events()[n:]
	if got[0] != "join "+queryB || slices.Index(got, "join "+queryC) < 1 {
		t.Fatalf("after the lock: %v; want the waiting query's join first, then the later start's, and the table's advance after it", got)
	}
	eventually(t, "no join waits", func() bool { return len(reg.JoinWaits()) == 0 })
}

// A join the database refuses for what it is (control.Refused: here an
// invalid query id) is not tried again, and does not hold the table: no
// retry changes it. The run is tracked, and the table's other feeder
// moves it as before.
func TestARefusedJoinDoesNotHoldTheTable(t *testing.T) {
	const queryB = joinRaceQueryB
	r := startJoinRace(t, fmt.Errorf("join feeder: %w: a feeder must be a non-empty query id", control.ErrInvalidAdvance))
	reg, store := r.reg, r.store
	r.liveAdvanced(t, "the known feeder advanced")
	r.started(queryB, runB, "backfill")
	eventually(t, "the refused run tracked", func() bool {
		return slices.ContainsFunc(reg.Status(), func(s finalizer.TrackerStatus) bool { return s.RunID == runB })
	})
	if w := reg.JoinWaits(); len(w) != 0 {
		t.Fatalf("join waits %+v after a refused join, want none", w)
	}
	r.live("2026-09-28T13:05:00")
	eventually(t, "the known feeder moved the table", func() bool { return store.Verdict("t").Equal(utc("2026-09-28T13:00:00Z")) })
}

// A shutdown while a new query's join waits for the lock: the known
// feeder's advance held for the join was sent by its tracker's stop once
// the join gave up (the registry closing), and with the lock gone by then
// the table moved past data the new query wrote, which it never joined.
// The table stays pending through the shutdown; the held advance is left
// to the run's retained progress, which the next start's recovery applies
// after the new query joined.
func TestCloseSendsNoAdvanceHeldForAJoin(t *testing.T) {
	r := startJoinRace(t, nil)
	reg, store := r.reg, r.store
	r.liveAdvanced(t, "the known feeder advanced")
	r.started(joinRaceQueryB, runB, "backfill")
	r.busyJoinTried(t, joinRaceQueryB)
	r.live("2026-09-28T13:05:00")
	time.Sleep(50 * time.Millisecond) // the held advance tried
	n := len(store.events())
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := reg.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if got := store.events()[n:]; len(got) != 0 {
		t.Fatalf("at shutdown, the new query not joined: %v (verdict %v); want no advance of the table", got, store.Verdict("t"))
	}
}

// retiringLockedStore is a lockedJoinStore that logs retirements.
type retiringLockedStore struct{ *lockedJoinStore }

func (s retiringLockedStore) RetireFeeder(_ context.Context, _, query, _ string) ([]control.Feeder, control.Verdict, bool, error) {
	s.mu.Lock()
	s.log = append(s.log, "retire "+query)
	s.mu.Unlock()
	return nil, control.Verdict{}, true, nil
}

// A retirement on a clean termination moves the table to its other
// feeders' lowest watermark (control.Store.RetireFeeder): while a new
// query's join waits for the lock, it moved the table on their word as
// the held advances would have (548db1a held only the advances). It is
// refused while the join waits, and said so.
func TestRetireWaitsForABusyJoinOfTheTable(t *testing.T) {
	core, logs := observer.New(zapcore.WarnLevel)
	r := startJoinRace(t, nil, func(c *finalizer.RegistryConfig) {
		c.Store, c.Logger = retiringLockedStore{c.Store.(*lockedJoinStore)}, zap.New(core)
		c.Rules[0].Retire = finalizer.RetireOnCleanTermination
	})
	reg, store := r.reg, r.store
	r.liveAdvanced(t, "the known feeder advanced")
	r.started(joinRaceQueryB, runB, "backfill")
	r.busyJoinTried(t, joinRaceQueryB)
	n := len(store.events())
	reg.Discovered(listener.Run{QueryID: queryA, RunID: runA, Name: "live", Kind: progress.KindTerminated, Event: terminated(runA)})
	eventually(t, "the retirement refused", func() bool {
		return logs.FilterMessageSnippet("could not retire the query").Len() == 1 || len(store.events()) > n
	})
	if got := store.events()[n:]; len(got) != 0 {
		t.Fatalf("while the new query's join waits: %v; want no retirement", got)
	}
}

// A run a restart lists without a name is named by a live event while the
// recovery holds discovery: its query is joined to the table's feeders at
// once (joinEarly), its start waits for the release. When that early
// join failed (another session holding the table locked, the database
// unavailable), it was dropped with a DEBUG line, and the table's feeder
// the recovery started moved the table on its live events, past data the
// new query was writing, before the run's start joined it. The table now
// waits for the early join, tried again until it joins; the run's start,
// after the release, joins behind it.
func TestAFailedEarlyJoinHoldsTheTable(t *testing.T) {
	for _, tc := range []struct {
		name string
		err  error
	}{
		{"busy", control.ErrBusy},
		{"unavailable", fmt.Errorf("join feeder: %w: connection reset by peer", control.ErrUnavailable)},
	} {
		t.Run(tc.name, func(t *testing.T) { testAFailedEarlyJoinHoldsTheTable(t, tc.err) })
	}
}

func testAFailedEarlyJoinHoldsTheTable(t *testing.T, joinErr error) {
	const queryB = joinRaceQueryB
	core, logs := observer.New(zapcore.InfoLevel)
	m := finalizer.NewMetrics(nil, time.Now)
	r := startJoinRace(t, joinErr, func(c *finalizer.RegistryConfig) { c.Logger, c.Metrics = zap.New(core), m })
	reg, store := r.reg, r.store
	release := r.recoverNameless(t)
	r.liveAdvanced(t, "the recovered feeder advanced")
	// The nameless run's name, live, under the hold: its early join fails.
	r.named()
	eventually(t, "the table waits for the early join", func() bool {
		w := reg.JoinWaits()
		return len(w) == 1 && w[0].Table == "t" && w[0].QueryID == queryB && w[0].RunID == "" && w[0].LastError != ""
	})
	n := len(store.events())
	r.live("2026-09-28T13:05:00")
	time.Sleep(300 * time.Millisecond) // the recovered feeder's tries and retries
	if got := store.events()[n:]; len(got) != 0 {
		t.Fatalf("while the early join waits: %v (verdict %v); want no advance of the table", got, store.Verdict("t"))
	}
	if logs.FilterMessageSnippet("waits to join the table's feeders").FilterField(zap.String("table", "t")).Len() == 0 {
		t.Error("no WARN says that table t waits for a join")
	}
	if v := testutil.ToFloat64(m.JoinWaitingTables); v != 1 {
		t.Errorf("finalizer_join_waiting_tables = %v while t waits, want 1", v)
	}
	store.unlock()
	eventually(t, "the early join, then the held advance", func() bool {
		ev := store.events()[n:]
		return slices.Contains(ev, "join "+queryB) && slices.Contains(ev, "advance "+queryA)
	})
	if got := store.events()[n:]; got[0] != "join "+queryB {
		t.Fatalf("after the lock: %v; want the early join before the table's advance", got)
	}
	if logs.FilterMessageSnippet("joined the table's feeders after waiting").Len() == 0 {
		t.Error("no INFO says the query joined")
	}
	if v := testutil.ToFloat64(m.JoinWaitingTables); v != 0 {
		t.Errorf("finalizer_join_waiting_tables = %v once joined, want 0", v)
	}
	// The run's start, after the release, joins again and is tracked.
	release()
	eventually(t, "the named run tracked after the release", func() bool {
		return slices.ContainsFunc(reg.Status(), func(s finalizer.TrackerStatus) bool { return s.RunID == runB })
	})
}

// The same early join still failing at shutdown: the table stays pending
// through it, so the stopping recovered feeder's held advance is not sent
// (a lock that went meanwhile would let it move the table past the new
// query's data, never joined); its run's retained progress re-applies it
// after the next start's join.
func TestCloseSendsNoAdvanceHeldForAnEarlyJoin(t *testing.T) {
	const queryB = joinRaceQueryB
	r := startJoinRace(t, nil)
	reg, store := r.reg, r.store
	r.recoverNameless(t)
	r.liveAdvanced(t, "the recovered feeder advanced")
	r.named()
	eventually(t, "the table waits for the early join", func() bool { return len(reg.JoinWaits()) == 1 })
	n := len(store.events())
	r.live("2026-09-28T13:05:00")
	time.Sleep(50 * time.Millisecond) // the held advance tried
	store.unlock()                    // the lock goes as the service shuts down
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := reg.Close(ctx); err != nil {
		t.Fatal(err)
	}
	// The early join may be retried with success before the close:
	// then, and only then, the advance may follow it.
	got := store.events()[n:]
	if i := slices.Index(got, "advance "+queryA); i >= 0 && !slices.Contains(got[:i], "join "+queryB) {
		t.Fatalf("the new query not joined: %v (verdict %v); want no advance of the table before its join", got, store.Verdict("t"))
	}
}

// unavailableJoinStore is a fakeStore whose feeder joins fail with
// control.ErrUnavailable: the database is down for them.
type unavailableJoinStore struct{ *fakeStore }

func (unavailableJoinStore) JoinFeeder(context.Context, string, string, string) (control.Joined, error) {
	return control.Joined{}, fmt.Errorf("join feeder: %w: connection refused", control.ErrUnavailable)
}

// Runs that start while the database is down each wait for their join,
// their tables pending: a wait is an entry of its table's list, tried by
// the registry's one retrier, not a goroutine of its own (one each, as
// the busy join first had, cost 8 KiB of stack apiece: 0.8 GB at the
// 100,000 runs of a restart, during an outage).
func TestJoinWaitsHoldNoGoroutineEach(t *testing.T) {
	const n = 300
	reg := finalizer.NewRegistry(finalizer.RegistryConfig{Bus: newFakeBus(), Store: unavailableJoinStore{newFakeStore()}, Logger: zap.NewNop(),
		Tracker: finalizer.TrackerOptions{RetryDelay: time.Hour}, MaxBatch: -1, MaxTrackBatch: -1})
	defer func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := reg.Close(ctx); err != nil {
			t.Error(err)
		}
	}()
	before := runtime.NumGoroutine()
	for i := range n {
		if _, err := reg.Track(context.Background(), finalizer.Request{QueryID: fmt.Sprintf("q-%d", i), RunID: fmt.Sprintf("r-%d", i),
			Table: fmt.Sprintf("t%d", i), Spec: hourSpec(t)}); err != nil {
			t.Fatal(err)
		}
	}
	eventually(t, "every table waiting", func() bool { return len(reg.JoinWaits()) == n })
	if len(reg.Status()) != 0 {
		t.Fatalf("%d runs tracked without their join", len(reg.Status()))
	}
	if more := runtime.NumGoroutine() - before; more > n/10 {
		t.Fatalf("%d goroutines more for %d runs waiting to join, want no goroutine per run", more, n)
	}
}

// TestCloseLeavesAnAdvanceHeldForAJoin (found in review): at Close a
// tracker holding its advance for its table's join went through its
// usual retries (1-2 s) though the table stays pending through the
// shutdown and no retry could send it. It leaves it at once.
func TestCloseLeavesAnAdvanceHeldForAJoin(t *testing.T) {
	r := startJoinRace(t, nil, func(c *finalizer.RegistryConfig) { c.Tracker = finalizer.TrackerOptions{} })
	reg := r.reg
	r.recoverNameless(t)
	r.liveAdvanced(t, "the recovered feeder advanced")
	r.named()
	eventually(t, "the table waits for the early join", func() bool { return len(reg.JoinWaits()) == 1 })
	r.live("2026-09-28T13:05:00")
	time.Sleep(100 * time.Millisecond)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	began := time.Now()
	if err := reg.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(began); d > time.Second {
		t.Errorf("Close took %s with an advance held for a join, want it left at once", d)
	}
}
