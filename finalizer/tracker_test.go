package finalizer_test

import (
	"cmp"
	"context"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.uber.org/goleak"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/finalizer-dev/finalizer/finalizer"
	"github.com/finalizer-dev/finalizer/listener"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

type rig struct {
	clock *fakeClock
	store *fakeStore
	bus   *fakeBus
	reg   *finalizer.Registry
	logs  *observer.ObservedLogs
	m     *finalizer.Metrics
}

func newRig(t *testing.T, rules ...finalizer.Rule) *rig {
	t.Helper()
	fs := newFakeStore()
	// The store goes through the group commit, as the service's does (a
	// step's advance parks without holding its worker, ADR 0008
	// addendum); TestRigTestsWithoutGroupCommit runs the rig's tests with
	// the store used directly.
	var store rigStore = &batchFake{fakeStore: fs}
	if rigDirect {
		store = fs
	}
	return newRigOver(t, newFakeBus(), store, rigOptions{rules: rules})
}

// rigOptions are what a rig's registry has beyond its bus and store.
type rigOptions struct {
	// now is when the fake clock starts (RFC 3339); "" is
	// 2026-09-29T00:00:00Z.
	now   string
	rules []finalizer.Rule
}

// rigBus is the bus of a rig's registry: a fakeBus, or a test's bus that
// embeds one to script what the fake does not (markingBus,
// scriptedMarker).
type rigBus interface {
	finalizer.Bus
	busFake() *fakeBus
}

// rigStore is the store of a rig's registry: a fakeStore, the group
// commit's batchFake over one, or a test's store that embeds one
// (retiredJoinStore).
type rigStore interface {
	finalizer.Store
	storeFake() *fakeStore
}

func (b *fakeBus) busFake() *fakeBus       { return b }
func (s *fakeStore) storeFake() *fakeStore { return s }

// newRigOver starts a Registry over bus and store, with a fake clock, a
// logger observed at debug level and metrics, and closes it when the
// test ends (within 5 s; a failed close fails the test). The rig's bus
// and store are the fakes under them.
func newRigOver(t *testing.T, bus rigBus, store rigStore, o rigOptions) *rig {
	t.Helper()
	core, logs := observer.New(zapcore.DebugLevel)
	r := &rig{clock: newFakeClock(utc(cmp.Or(o.now, "2026-09-29T00:00:00Z"))), store: store.storeFake(), bus: bus.busFake(), logs: logs}
	r.m = finalizer.NewMetrics(nil, r.clock.Now)
	r.reg = finalizer.NewRegistry(finalizer.RegistryConfig{
		Bus: bus, Store: store, Rules: o.rules, Clock: r.clock, Logger: zap.New(core), Metrics: r.m,
	})
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := r.reg.Close(ctx); err != nil {
			t.Errorf("close: %v", err)
		}
	})
	return r
}

func (r *rig) track(t *testing.T, runID, table string) {
	t.Helper()
	ok, err := r.reg.Track(context.Background(), finalizer.Request{QueryID: queryA, RunID: runID, Table: table, Spec: hourSpec(t)})
	if err != nil || !ok {
		t.Fatalf("track: %v %v", ok, err)
	}
}

func (r *rig) join(t *testing.T, runID string) finalizer.JoinResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	res, err := r.reg.Join(ctx, runID)
	if err != nil {
		t.Fatalf("join: %v", err)
	}
	return res
}

// Reference test 4: 13:10, 13:40 (same hour: no write), another run's
// progress and termination (ignored), 14:05 and this run's termination.
func TestWorkerAdvancesOncePerPeriodAndIgnoresOtherRuns(t *testing.T) {
	r := newRig(t)
	r.track(t, runA, "bronze.orders")

	r.bus.Publish(cdcProgress(runA, "2026-09-28T13:10:00"))
	eventually(t, "first write", func() bool { return len(r.store.Calls()) == 1 })
	r.bus.Publish(cdcProgress(runA, "2026-09-28T13:40:00"))
	r.bus.Publish(cdcProgress(runB, "2026-09-28T18:00:00"))
	r.bus.Publish(terminated(runB))
	r.bus.Publish(cdcProgress(runA, "2026-09-28T14:05:00"))
	r.bus.Publish(terminated(runA))

	if res := r.join(t, runA); !res.Done || res.LastError != "" {
		t.Fatalf("join = %+v, want done without error", res)
	}
	got := untils(r.store.Calls())
	want := []time.Time{utc("2026-09-28T13:00:00Z"), utc("2026-09-28T14:00:00Z")}
	if len(got) != len(want) || !got[0].Equal(want[0]) || !got[1].Equal(want[1]) {
		t.Fatalf("advances = %v, want exactly %v", got, want)
	}
	if n := r.bus.Unsubscribes(runA); n != 1 {
		t.Fatalf("run A unsubscribed %d times, want 1", n)
	}
	if v := r.store.Verdict("bronze.orders"); !v.Equal(want[1]) {
		t.Fatalf("verdict = %v, want %v", v, want[1])
	}
}

// The second progress of the same period writes nothing even when the
// first one was the very first (which always writes).
func TestSamePeriodWritesNothing(t *testing.T) {
	r := newRig(t)
	r.track(t, runA, "t")
	for _, ts := range []string{"2026-09-28T13:01:00", "2026-09-28T13:20:00", "2026-09-28T13:59:59.999"} {
		r.bus.Publish(cdcProgress(runA, ts))
	}
	r.bus.Publish(terminated(runA))
	r.join(t, runA)
	if calls := r.store.Calls(); len(calls) != 1 {
		t.Fatalf("%d writes, want 1", len(calls))
	}
}

// Reference test 5: a progress offered just before stop is still applied.
func TestProgressJustBeforeStopIsApplied(t *testing.T) {
	r := newRig(t)
	r.track(t, runA, "t")
	r.bus.Publish(cdcProgress(runA, "2026-09-28T14:37:12.345"))
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := r.reg.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if v := r.store.Verdict("t"); !v.Equal(utc("2026-09-28T14:00:00Z")) {
		t.Fatalf("verdict = %v, want 14:00", v)
	}
}

// A failed advance is retried 1 s and 2 s later, then left for the next
// event.
func TestFailedAdvanceRetriedAfterOneAndTwoSeconds(t *testing.T) {
	r := newRig(t)
	r.store.setFailing(2, nil)
	r.track(t, runA, "t")
	r.bus.Publish(cdcProgress(runA, "2026-09-28T14:05:00"))

	eventually(t, "first attempt", func() bool { return len(r.store.Calls()) == 1 })
	eventually(t, "retry timer", func() bool { return r.clock.Waiting() == 2 }) // janitor + retry
	r.clock.Advance(999 * time.Millisecond)
	if n := len(r.store.Calls()); n != 1 {
		t.Fatalf("retried before 1 s: %d calls", n)
	}
	r.clock.Advance(time.Millisecond)
	eventually(t, "second attempt", func() bool { return len(r.store.Calls()) == 2 })
	eventually(t, "second retry timer", func() bool { return r.clock.Waiting() == 2 })
	r.clock.Advance(1999 * time.Millisecond)
	if n := len(r.store.Calls()); n != 2 {
		t.Fatalf("retried before 2 s: %d calls", n)
	}
	r.clock.Advance(time.Millisecond)
	eventually(t, "verdict", func() bool { return r.store.Verdict("t").Equal(utc("2026-09-28T14:00:00Z")) })
	starts := r.clock.Starts()
	if len(starts) != 2 || starts[0] != time.Second || starts[1] != 2*time.Second {
		t.Fatalf("retry delays = %v, want [1s 2s]", starts)
	}
}

// After the in-place retries fail, the run's idle event retries the
// advance (queries that stop together have no next progress).
func TestIdleEventRetriesFailedAdvance(t *testing.T) {
	r := newRig(t)
	r.store.setFailing(3, nil)
	r.track(t, runA, "t")
	r.bus.Publish(cdcProgress(runA, "2026-09-28T14:05:00"))
	for i := 1; i <= 2; i++ {
		eventually(t, "attempt", func() bool { return len(r.store.Calls()) == i })
		eventually(t, "retry timer", func() bool { return r.clock.Waiting() == 2 })
		r.clock.Advance(time.Duration(i) * time.Second)
	}
	eventually(t, "failure recorded", func() bool { return r.reg.Status()[0].Failures == 1 })
	if v := r.store.Verdict("t"); !v.IsZero() {
		t.Fatalf("verdict moved while failing: %v", v)
	}
	r.bus.Publish(idle(runA))
	eventually(t, "verdict after idle", func() bool { return r.store.Verdict("t").Equal(utc("2026-09-28T14:00:00Z")) })
	eventually(t, "error cleared", func() bool { return r.reg.Status()[0].LastError == "" })
}

// A run whose newest event says it has no new data is shown idle until its
// next new progress.
func TestStatusShowsIdleRun(t *testing.T) {
	r := newRig(t)
	r.track(t, runA, "t")
	r.bus.Publish(cdcProgress(runA, "2026-09-28T14:05:00"))
	eventually(t, "first write", func() bool { return len(r.store.Calls()) == 1 })
	if st := r.reg.Status()[0]; st.Idle {
		t.Fatalf("idle after a new progress: %+v", st)
	}
	r.bus.Publish(idle(runA))
	eventually(t, "idle shown", func() bool { return r.reg.Status()[0].Idle })
	r.bus.Publish(cdcProgress(runA, "2026-09-28T15:05:00"))
	eventually(t, "running again", func() bool { return !r.reg.Status()[0].Idle })
}

// An advance that fails after the run terminated is still retried in
// place before the worker stops; then join reports the run as not done,
// with why and the last error.
func TestTerminationAppliesPendingAndReportsLastError(t *testing.T) {
	r := newRig(t)
	r.store.setFailing(100, nil)
	r.track(t, runA, "t")
	r.bus.Publish(cdcProgress(runA, "2026-09-28T14:05:00"))
	r.bus.Publish(terminated(runA))
	for i := 1; i <= 2; i++ {
		eventually(t, "retry timer", func() bool { return r.clock.Waiting() == 2 })
		r.clock.Advance(time.Duration(i) * time.Second)
	}
	res := r.join(t, runA)
	if res.Done || res.Stopped == "" || res.LastError == "" {
		t.Fatalf("join = %+v, want not done, stopped, with the last error: the last progress was not applied", res)
	}
	if n := len(r.store.Calls()); n != 3 {
		t.Fatalf("%d attempts, want 3 (1 + 2 retries)", n)
	}
}

// Reference test 6: a failing tracker keeps its error, logs one error per
// streak and rate-limited warnings after it, and a success clears it.
func TestFailureStreakLoggingAndRecovery(t *testing.T) {
	r := newRig(t)
	r.store.setFailing(1_000_000, nil)
	r.reg.Close(context.Background()) // use a tracker without retries, directly
	box := newBox()
	// The first progress waits in the mailbox for the tracker's first
	// step: offered after the start, it could meet that step (which takes
	// nothing) and wake a second one, which retries the failed advance
	// still pending, as any wake does: two failures for one progress.
	box.Offer(cdcProgress(runA, "2026-09-28T13:05:00"))
	tr := finalizer.StartTracker(context.Background(), finalizer.TrackerConfig{
		QueryID: queryA, RunID: runA, Table: "t", Spec: hourSpec(t), Box: box, Store: r.store,
		Clock: r.clock, Logger: zap.New(observerCore(r)), Retries: -1,
	})
	defer func() { tr.Stop(); <-tr.Done() }()
	eventually(t, "failure counted", func() bool { f, _ := tr.Failures(); return f == 1 })

	step := func(ts string, advance time.Duration, want int) {
		t.Helper()
		r.clock.Advance(advance)
		box.Offer(cdcProgress(runA, ts))
		eventually(t, "failure counted", func() bool { f, _ := tr.Failures(); return f == want })
	}
	step("2026-09-28T14:05:00", time.Minute, 2)
	step("2026-09-28T15:05:00", time.Minute, 3)
	step("2026-09-28T16:05:00", 10*time.Minute, 4) // 12 min after the first: one warning

	errs := r.logs.FilterMessage("advance failed; the run's next event retries it").Len()
	warns := r.logs.FilterMessage("advance still failing").All()
	if errs != 1 {
		t.Fatalf("%d error lines, want 1 per streak", errs)
	}
	if len(warns) != 1 || warns[0].ContextMap()["failures_in_a_row"] != int64(4) {
		t.Fatalf("warnings = %v, want one with failures_in_a_row=4", warns)
	}
	if _, err := tr.Failures(); err == nil {
		t.Fatal("last error not kept")
	}

	r.store.setFailing(0, nil)
	box.Offer(cdcProgress(runA, "2026-09-28T17:05:00"))
	eventually(t, "success clears the error", func() bool { f, err := tr.Failures(); return err == nil && f == 0 })
	if v := r.store.Verdict("t"); !v.Equal(utc("2026-09-28T17:00:00Z")) {
		t.Fatalf("verdict = %v", v)
	}
}

// A run already terminated when tracked (its termination is already in the
// mailbox with its last progress): apply the last progress once and stop.
func TestRunTerminatedBeforeTracking(t *testing.T) {
	r := newRig(t)
	box := newBox()
	box.Offer(cdcProgress(runA, "2026-09-28T12:30:00"))
	box.Offer(terminated(runA))
	tr := finalizer.StartTracker(context.Background(), finalizer.TrackerConfig{
		QueryID: queryA, RunID: runA, Table: "t", Spec: hourSpec(t), Box: box, Store: r.store, Clock: r.clock,
	})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if !tr.Join(ctx) {
		t.Fatal("tracker did not finish")
	}
	if calls := r.store.Calls(); len(calls) != 1 || !calls[0].FinalizedUntil.Equal(utc("2026-09-28T12:00:00Z")) {
		t.Fatalf("advances = %v, want one at 12:00", untils(calls))
	}
}

// A progress whose time is beyond the service's clock plus the skew
// allowance is capped: it cannot finalize periods that have not happened.
// A progress without a usable time gives no candidate and no write.
func TestProgressWithoutTimeWritesNothing(t *testing.T) {
	r := newRig(t)
	r.track(t, runA, "t")
	ev := cdcProgress(runA, "")
	r.bus.Publish(ev)
	r.bus.Publish(terminated(runA))
	r.join(t, runA)
	if n := len(r.store.Calls()); n != 0 {
		t.Fatalf("%d writes, want 0", n)
	}
}

// Older progress (a replay, or a JetStream message after a newer live one)
// never moves the verdict back.
func TestOlderProgressNeverMovesBack(t *testing.T) {
	r := newRig(t)
	r.track(t, runA, "t")
	r.bus.Publish(cdcProgress(runA, "2026-09-28T14:05:00"))
	eventually(t, "write", func() bool { return len(r.store.Calls()) == 1 })
	r.bus.Publish(cdcProgress(runA, "2026-09-28T11:05:00"))
	r.bus.Publish(terminated(runA))
	r.join(t, runA)
	if v := r.store.Verdict("t"); !v.Equal(utc("2026-09-28T14:00:00Z")) {
		t.Fatalf("verdict = %v, want 14:00", v)
	}
}

func newBox() *listener.Mailbox { return listener.NewMailbox() }

func observerCore(r *rig) zapcore.Core {
	core, logs := observer.New(zapcore.DebugLevel)
	r.logs = logs
	return core
}

// A failover to a standby that asynchronous replication left behind loses
// the last verdict a tracker wrote; Reassert writes it again at once, with
// the provenance of the progress that justified it, and never moves a
// verdict back: a verdict another writer moved further is left alone. A
// failed re-assert is tried again at the next wake, even when that wake's
// progress is in the same period (which alone would write nothing).
func TestReassertRestoresALostVerdict(t *testing.T) {
	r := newRig(t)
	r.reg.Close(context.Background()) // use a tracker directly
	box := newBox()
	m := finalizer.NewMetrics(nil, r.clock.Now)
	tr := finalizer.StartTracker(context.Background(), finalizer.TrackerConfig{
		QueryID: queryA, RunID: runA, Table: "t", Spec: hourSpec(t), Box: box, Store: r.store,
		Clock: r.clock, Logger: zap.New(observerCore(r)), Retries: -1, Metrics: m,
	})
	defer func() { tr.Stop(); <-tr.Done() }()

	box.Offer(cdcProgress(runA, "2026-09-28T14:05:00"))
	eventually(t, "first write", func() bool { return r.store.Verdict("t").Equal(utc("2026-09-28T14:00:00Z")) })

	// The failover: the promoted standby has the row one period behind.
	r.store.mu.Lock()
	v := r.store.rows["t"]
	v.FinalizedUntil, v.BatchID = utc("2026-09-28T13:00:00Z"), 0
	r.store.rows["t"] = v
	r.store.mu.Unlock()

	// The first re-assert fails (the new primary is not answering yet); a
	// same-period progress wakes the tracker, which tries it again.
	r.store.setFailing(1, nil)
	tr.Reassert()
	eventually(t, "failed re-assert", func() bool { return testutil.ToFloat64(m.Reasserts.WithLabelValues("failed")) == 1 })
	box.Offer(cdcProgress(runA, "2026-09-28T14:30:00"))
	// The fake store holds the restored row before the tracker counts and
	// logs it: wait for the warning, which comes after the counter, so that
	// the checks below read what the re-assert did (CI read restored = 0
	// once, between the store's write and the counter).
	eventually(t, "restored", func() bool {
		return r.store.Verdict("t").Equal(utc("2026-09-28T14:00:00Z")) && r.logs.FilterMessageSnippet("verdict restored").Len() > 0
	})
	last := r.store.Calls()[len(r.store.Calls())-1]
	if last.EndTime.IsZero() || last.RunID != runA || !last.EndTime.Equal(utc("2026-09-28T14:05:00Z")) {
		t.Fatalf("re-assert wrote %+v, want the provenance of the 14:05 progress", last)
	}
	if got := testutil.ToFloat64(m.Reasserts.WithLabelValues("restored")); got != 1 {
		t.Fatalf("restored = %v, want 1", got)
	}
	if r.logs.FilterMessageSnippet("verdict restored").Len() != 1 {
		t.Fatalf("no warning about the restored verdict: %v", r.logs.All())
	}

	// Another writer is further: the re-assert changes nothing.
	r.store.mu.Lock()
	v = r.store.rows["t"]
	v.FinalizedUntil = utc("2026-09-28T16:00:00Z")
	r.store.rows["t"] = v
	r.store.mu.Unlock()
	tr.Reassert()
	eventually(t, "unchanged", func() bool { return testutil.ToFloat64(m.Reasserts.WithLabelValues("unchanged")) == 1 })
	if got := r.store.Verdict("t"); !got.Equal(utc("2026-09-28T16:00:00Z")) {
		t.Fatalf("verdict = %v after a re-assert, want it left at 16:00", got)
	}

	// A tracker that wrote nothing has nothing to re-assert.
	other := finalizer.StartTracker(context.Background(), finalizer.TrackerConfig{
		QueryID: queryA, RunID: runB, Table: "u", Spec: hourSpec(t), Box: newBox(), Store: r.store,
		Clock: r.clock, Retries: -1,
	})
	other.Reassert()
	other.Stop()
	<-other.Done()
	for _, c := range r.store.Calls() {
		if c.Table == "u" {
			t.Fatalf("a tracker that wrote nothing re-asserted %+v", c)
		}
	}
}

// Registry.Reassert asks every live tracker: the one whose write was lost
// writes it again, the others find theirs there.
func TestRegistryReassertsEveryTracker(t *testing.T) {
	r := newRig(t)
	r.track(t, runA, "ra")
	r.track(t, runB, "rb")
	r.bus.Publish(cdcProgress(runA, "2026-09-28T14:05:00"))
	r.bus.Publish(cdcProgress(runB, "2026-09-28T15:05:00"))
	eventually(t, "both written", func() bool {
		return r.store.Verdict("ra").Equal(utc("2026-09-28T14:00:00Z")) && r.store.Verdict("rb").Equal(utc("2026-09-28T15:00:00Z"))
	})
	r.store.mu.Lock()
	delete(r.store.rows, "ra") // lost in a failover
	r.store.mu.Unlock()
	before := len(r.store.Calls())
	if n := r.reg.Reassert(); n != 2 {
		t.Fatalf("Reassert asked %d trackers, want 2", n)
	}
	eventually(t, "ra restored", func() bool { return r.store.Verdict("ra").Equal(utc("2026-09-28T14:00:00Z")) })
	eventually(t, "both re-asserted", func() bool { return len(r.store.Calls()) == before+2 })
	if got := r.store.Verdict("rb"); !got.Equal(utc("2026-09-28T15:00:00Z")) {
		t.Fatalf("rb = %v", got)
	}
}

// Issue 18, bug 4b: on termination the tracker catches up from JetStream
// once more before it exits. The run's newest progress reached the stream
// but not the live subscription (a reconnect): only the catch-up offers it,
// after the termination, and it is still applied.
func TestTerminationCatchesUpTheProgressMissedLive(t *testing.T) {
	r := newRig(t)
	box := newBox()
	box.Offer(cdcProgress(runA, "2026-09-28T12:30:00"))
	missed := cdcProgress(runA, "2026-09-28T14:05:00") // in the stream only
	catchUps := 0
	tr := finalizer.StartTracker(context.Background(), finalizer.TrackerConfig{
		QueryID: queryA, RunID: runA, Table: "t", Spec: hourSpec(t), Box: box, Store: r.store, Clock: r.clock,
		CatchUp: func(context.Context) error {
			catchUps++
			box.Offer(missed)
			return nil
		},
	})
	eventually(t, "the live progress applied", func() bool { return len(r.store.Calls()) == 1 })
	box.Offer(terminated(runA))
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if !tr.Join(ctx) {
		t.Fatal("tracker did not finish")
	}
	if catchUps != 1 {
		t.Fatalf("%d catch-ups at the termination, want 1", catchUps)
	}
	if v := r.store.Verdict("t"); !v.Equal(utc("2026-09-28T14:00:00Z")) {
		t.Fatalf("verdict = %v, want 14:00 (the progress only the final catch-up saw); advances %v", v, untils(r.store.Calls()))
	}
	if _, err := tr.Failures(); err != nil {
		t.Fatalf("last error %v, want none", err)
	}
}

// A run whose events a restart read from the stream (not heard live) is
// shown as not heard since its tracker started, at the tracker's start;
// a live event shows it heard at its arrival. Before, a restart stamped
// every recovered run as heard of at the take of its retained events
// (LAST EVENT on the status page and in `status`).
func TestRetainedEventsAreNotHeard(t *testing.T) {
	r := newRig(t)
	start := r.clock.Now()
	r.track(t, runA, "bronze.orders")
	r.clock.Advance(10 * time.Minute)
	box := func() *listener.Mailbox {
		r.bus.mu.Lock()
		defer r.bus.mu.Unlock()
		return r.bus.boxes[runA][0]
	}()
	box.OfferRetained(cdcProgress(runA, "2026-09-28T13:10:00"))
	eventually(t, "the retained progress applied", func() bool { return len(r.store.Calls()) == 1 })
	st := r.reg.Status()[0]
	if !st.NotHeard || !st.LastEvent.Equal(start) {
		t.Fatalf("after a retained event: not heard %v, last event %v; want not heard, at the tracker's start %v", st.NotHeard, st.LastEvent, start)
	}
	r.bus.Publish(cdcProgress(runA, "2026-09-28T14:10:00"))
	eventually(t, "the live progress applied", func() bool { return len(r.store.Calls()) == 2 })
	if st := r.reg.Status()[0]; st.NotHeard || !st.LastEvent.Equal(r.clock.Now()) {
		t.Fatalf("after a live event: not heard %v, last event %v; want heard at %v", st.NotHeard, st.LastEvent, r.clock.Now())
	}
}
