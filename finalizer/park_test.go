package finalizer_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/finalizer-dev/finalizer/control"
	"github.com/finalizer-dev/finalizer/finalizer"
)

// rigDirect makes newRig give the registry its store as a plain Store, so
// that every advance is a call on the tracker's worker (no group commit).
var rigDirect bool

// The rig's tests hold with the store used directly as well as through
// the group commit (newRig's default), where a step's advance parks
// without holding its worker and the tracker resumes on the result.
func TestRigTestsWithoutGroupCommit(t *testing.T) {
	rigDirect = true
	defer func() { rigDirect = false }()
	for _, tc := range []struct {
		name string
		f    func(*testing.T)
	}{
		{"WorkerAdvancesOncePerPeriodAndIgnoresOtherRuns", TestWorkerAdvancesOncePerPeriodAndIgnoresOtherRuns},
		{"SamePeriodWritesNothing", TestSamePeriodWritesNothing},
		{"ProgressJustBeforeStopIsApplied", TestProgressJustBeforeStopIsApplied},
		{"FailedAdvanceRetriedAfterOneAndTwoSeconds", TestFailedAdvanceRetriedAfterOneAndTwoSeconds},
		{"IdleEventRetriesFailedAdvance", TestIdleEventRetriesFailedAdvance},
		{"StatusShowsIdleRun", TestStatusShowsIdleRun},
		{"TerminationAppliesPendingAndReportsLastError", TestTerminationAppliesPendingAndReportsLastError},
		{"FailureStreakLoggingAndRecovery", TestFailureStreakLoggingAndRecovery},
		{"RunTerminatedBeforeTracking", TestRunTerminatedBeforeTracking},
		{"ProgressWithoutTimeWritesNothing", TestProgressWithoutTimeWritesNothing},
		{"OlderProgressNeverMovesBack", TestOlderProgressNeverMovesBack},
		{"ReassertRestoresALostVerdict", TestReassertRestoresALostVerdict},
		{"RegistryReassertsEveryTracker", TestRegistryReassertsEveryTracker},
		{"TerminationCatchesUpTheProgressMissedLive", TestTerminationCatchesUpTheProgressMissedLive},
		{"NewRunSupersedesOldRun", TestNewRunSupersedesOldRun},
		{"HandOverBeatsALiveTermination", TestHandOverBeatsALiveTermination},
		{"RecoverRetainedRuns", TestRecoverRetainedRuns},
	} {
		t.Run(tc.name, tc.f)
	}
}

// gatedBatch is a fakeStore that applies batches; while gate is open
// (not nil and not closed) every batch waits for it, or for its context.
type gatedBatch struct {
	*fakeStore
	mu      sync.Mutex
	gate    chan struct{}
	sizes   []int
	entered chan struct{} // one per batch that reached the store, when there is room
}

func newGatedBatch() *gatedBatch {
	return &gatedBatch{fakeStore: newFakeStore(), gate: make(chan struct{}), entered: make(chan struct{}, 1000)}
}

func (s *gatedBatch) AdvanceBatch(ctx context.Context, as []control.Advance) ([]control.AdvanceResult, error) {
	select {
	case s.entered <- struct{}{}:
	default:
	}
	if err := passGate(ctx, &s.mu, &s.gate); err != nil {
		return nil, err
	}
	s.mu.Lock()
	s.sizes = append(s.sizes, len(as))
	s.mu.Unlock()
	res := make([]control.AdvanceResult, len(as))
	for i, a := range as {
		res[i].Verdict, res[i].Moved, res[i].Err = s.fakeStore.Advance(ctx, a)
	}
	return res, nil
}

func (s *gatedBatch) open() {
	s.mu.Lock()
	defer s.mu.Unlock()
	close(s.gate)
	s.gate = nil
}

func (s *gatedBatch) batchSizes() []int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]int(nil), s.sizes...)
}

func burstRunID(i int) string { return fmt.Sprintf("e225d92f-2545-48f8-87a2-%012d", i) }

// A burst of crossings larger than the worker pool is gathered whole
// while a statement is in flight: a step whose advance waits for its
// group commit does not hold its worker (ADR 0008, addendum). With the
// advance's wait on the worker, two workers took two progresses and
// stopped until the statement returned, and the groups held two
// advances.
func TestBurstDoesNotHoldWorkers(t *testing.T) {
	store := newGatedBatch()
	bus := newFakeBus()
	clock := newFakeClock(utc("2026-09-29T00:00:00Z"))
	reg := finalizer.NewRegistry(finalizer.RegistryConfig{Bus: bus, Store: store, Clock: clock,
		Workers: 2, MaxBatch: 25, Committers: 1})
	defer func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := reg.Close(ctx); err != nil {
			t.Error(err)
		}
	}()
	const runs = 100
	for i := range runs {
		if _, err := reg.Track(context.Background(), finalizer.Request{QueryID: queryA, RunID: burstRunID(i),
			Table: fmt.Sprintf("t%03d", i), Spec: hourSpec(t)}); err != nil {
			t.Fatal(err)
		}
	}
	clock.Advance(time.Second) // a step that takes mail stamps LastEvent with the new time
	for i := range runs {
		bus.Publish(cdcProgress(burstRunID(i), "2026-09-28T14:05:00"))
	}
	<-store.entered // the first group is in flight and held
	eventually(t, "every run's progress taken while the first group is held, on 2 workers", func() bool {
		for _, s := range reg.Status() {
			if !s.LastEvent.Equal(clock.Now()) {
				return false
			}
		}
		return true
	})
	store.open()
	eventually(t, "every verdict", func() bool {
		for i := range runs {
			if !store.Verdict(fmt.Sprintf("t%03d", i)).Equal(utc("2026-09-28T14:00:00Z")) {
				return false
			}
		}
		return true
	})
	sizes, sum := store.batchSizes(), 0
	for _, n := range sizes {
		sum += n
		if n > 25 {
			t.Errorf("a group of %d advances, above MaxBatch 25", n)
		}
	}
	// The first group went alone (or nearly); the other advances waited
	// together and went in full groups.
	if sum != runs || len(sizes) > 6 {
		t.Errorf("group sizes %v: %d advances in %d groups, want %d in at most 6", sizes, sum, len(sizes), runs)
	}
}

// Stop while a step's advance is parked (or, on a quiet committer, while
// the step sends it itself: ADR 0008, addendum "the first advancer
// leads"): the advance lands, then the progress that came meanwhile, and
// the tracker exits (Stop applies what is pending). A Stop whose wake-up
// was taken by the step that resumed the parked advance was lost, and
// Close waited for its deadline.
func TestStopWhileParkedAppliesWhatCameMeanwhile(t *testing.T) {
	for _, lead := range []bool{false, true} {
		t.Run(fmt.Sprintf("lead=%v", lead), func(t *testing.T) {
			store, bus, reg := parkOne(t, lead)
			bus.Publish(cdcProgress(runA, "2026-09-28T15:05:00"))
			closed := make(chan error, 1)
			go func() {
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				defer cancel()
				closed <- reg.Close(ctx)
			}()
			time.Sleep(20 * time.Millisecond) // Stop while parked
			store.open()
			if err := <-closed; err != nil {
				t.Fatal(err)
			}
			if got := untils(callsOf(store, "t")); len(got) != 2 || !got[0].Equal(utc("2026-09-28T14:00:00Z")) || !got[1].Equal(utc("2026-09-28T15:00:00Z")) {
				t.Fatalf("advances %v, want 14:00 then 15:00", got)
			}
		})
	}
}

// A shutdown whose deadline passes while a parked advance's statement
// hangs (or a leading step's: shutdown while leading): the statement is
// cancelled, the tracker takes the error and exits, and Close returns
// (goleak checks that nothing is left).
func TestShutdownCancelsAParkedAdvance(t *testing.T) {
	for _, lead := range []bool{false, true} {
		t.Run(fmt.Sprintf("lead=%v", lead), func(t *testing.T) {
			store, _, reg := parkOne(t, lead)
			ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
			defer cancel()
			if err := reg.Close(ctx); !errors.Is(err, context.DeadlineExceeded) {
				t.Fatalf("close: %v, want the deadline", err)
			}
			if n := len(store.Calls()); n != 0 {
				t.Fatalf("%d advances applied after their statement was cancelled", n)
			}
		})
	}
}

// callsOf returns the advances store applied to table.
func callsOf(store *gatedBatch, table string) []control.Advance {
	var out []control.Advance
	for _, c := range store.Calls() {
		if c.Table == table {
			out = append(out, c)
		}
	}
	return out
}

// parkOne tracks runA into table t on a registry over a gated store and
// publishes a crossing progress. With lead, the committer is quiet and
// the step sends that advance itself (ADR 0008, addendum "the first
// advancer leads"); it returns once the statement has reached the store
// and waits at the gate. Without, the registry's one committer slot is
// first taken by another table's advance (a leader held at the gate), so
// that runA's step parks its advance in the queue; it returns once runA's
// step has taken its progress.
func parkOne(t *testing.T, lead bool) (*gatedBatch, *fakeBus, *finalizer.Registry) {
	t.Helper()
	store := newGatedBatch()
	bus := newFakeBus()
	clock := newFakeClock(utc("2026-09-29T00:00:00Z"))
	reg := finalizer.NewRegistry(finalizer.RegistryConfig{Bus: bus, Store: store, Clock: clock, Committers: 1})
	if !lead {
		if _, err := reg.Track(context.Background(), finalizer.Request{QueryID: queryA, RunID: runB, Table: "other", Spec: hourSpec(t)}); err != nil {
			t.Fatal(err)
		}
		bus.Publish(cdcProgress(runB, "2026-09-28T14:05:00"))
		<-store.entered
	}
	if _, err := reg.Track(context.Background(), finalizer.Request{QueryID: queryA, RunID: runA, Table: "t", Spec: hourSpec(t)}); err != nil {
		t.Fatal(err)
	}
	clock.Advance(time.Second) // a step that takes mail stamps LastEvent with the new time
	bus.Publish(cdcProgress(runA, "2026-09-28T14:05:00"))
	if lead {
		<-store.entered
		return store, bus, reg
	}
	eventually(t, "runA's progress taken", func() bool {
		for _, s := range reg.Status() {
			if s.RunID == runA && !s.LastEvent.Equal(clock.Now()) {
				return false
			}
		}
		return true
	})
	return store, bus, reg
}

// slowBatch is a fakeStore whose every group takes per.
type slowBatch struct {
	*fakeStore
	per time.Duration
}

func (s *slowBatch) AdvanceBatch(ctx context.Context, as []control.Advance) ([]control.AdvanceResult, error) {
	select {
	case <-time.After(s.per):
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	res := make([]control.AdvanceResult, len(as))
	for i, a := range as {
		res[i].Verdict, res[i].Moved, res[i].Err = s.fakeStore.Advance(ctx, a)
	}
	return res, nil
}

// An advance that waits for its group longer than the advance timeout,
// behind other groups whose statements each stay well within it, has not
// failed: the timeout bounds a statement, not the queue. With a deadline
// on the wait, 20,669 of the 100,000 first verdicts of the bench at
// 100,000 runs failed in the queue without a statement, and their retries
// joined the back of it again.
func TestWaitForAGroupIsNotAFailure(t *testing.T) {
	const runs = 12
	store := &slowBatch{fakeStore: newFakeStore(), per: 30 * time.Millisecond}
	bus := newFakeBus()
	m := finalizer.NewMetrics(nil, time.Now)
	reg := finalizer.NewRegistry(finalizer.RegistryConfig{Bus: bus, Store: store, Metrics: m,
		Clock: newFakeClock(utc("2026-09-29T00:00:00Z")), MaxBatch: 1, Committers: 1,
		Tracker: finalizer.TrackerOptions{AdvanceTimeout: 100 * time.Millisecond}})
	defer func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := reg.Close(ctx); err != nil {
			t.Error(err)
		}
	}()
	for i := range runs {
		if _, err := reg.Track(context.Background(), finalizer.Request{QueryID: queryA, RunID: burstRunID(i),
			Table: fmt.Sprintf("t%03d", i), Spec: hourSpec(t)}); err != nil {
			t.Fatal(err)
		}
	}
	for i := range runs { // 12 groups of one, 30 ms each: the last waits 360 ms
		bus.Publish(cdcProgress(burstRunID(i), "2026-09-28T14:05:00"))
	}
	eventually(t, "every verdict", func() bool {
		for i := range runs {
			if !store.Verdict(fmt.Sprintf("t%03d", i)).Equal(utc("2026-09-28T14:00:00Z")) {
				return false
			}
		}
		return true
	})
	if n := testutil.ToFloat64(m.Retries); n != 0 {
		t.Fatalf("%v advances retried; want none (no statement failed)", n)
	}
	if n := len(store.Calls()); n != runs {
		t.Fatalf("%d advances applied, want %d (one each)", n, runs)
	}
}
