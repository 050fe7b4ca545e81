package finalizer_test

import (
	"context"
	"testing"
	"time"

	"github.com/finalizer-dev/finalizer/finalizer"
	"github.com/finalizer-dev/finalizer/listener"
	"github.com/finalizer-dev/finalizer/progress"
	"go.uber.org/zap"
)

// idleRig is one tracker on a pool of its own, whose steps it counts.
type idleRig struct {
	*rig
	box *listener.Mailbox
	tr  *finalizer.Tracker
}

func newIdleRig(t *testing.T, spec progress.Spec, retries int) *idleRig {
	t.Helper()
	r := newRig(t)
	_ = r.reg.Close(context.Background()) // use a tracker directly
	box := newBox()
	tr := finalizer.StartTracker(context.Background(), finalizer.TrackerConfig{
		QueryID: queryA, RunID: runA, Table: "t", Spec: spec, Box: box, Store: r.store,
		Clock: r.clock, Logger: zap.New(observerCore(r)), Retries: retries,
	})
	t.Cleanup(func() { tr.Stop(); <-tr.Done() })
	return &idleRig{rig: r, box: box, tr: tr}
}

// settle waits until the tracker has no step queued or running.
func (g *idleRig) settle(t *testing.T) {
	t.Helper()
	eventually(t, "settled", g.tr.Settled)
}

func (g *idleRig) idleAt(at time.Time) *progress.Event {
	return &progress.Event{Kind: progress.KindIdle, QueryID: queryA, RunID: runA, BatchID: -1, Timestamp: at}
}

// An idle event, or a progress not newer than the one taken, that changes
// nothing for its tracker (nothing pending, no retry armed, no quiet rule)
// wakes no pool worker (ADR 0022, addendum 6): the status still shows when
// the run was last heard of and that it is idle. Before, each woke a worker
// for a step that did nothing: 1 step per idle event.
func TestIdleEventThatChangesNothingWakesNoWorker(t *testing.T) {
	g := newIdleRig(t, hourSpec(t), -1)
	first := cdcProgress(runA, "2026-09-28T14:05:00")
	g.box.Offer(first)
	eventually(t, "first write", func() bool { return g.store.Verdict("t").Equal(utc("2026-09-28T14:00:00Z")) })
	g.settle(t)
	if st := g.tr.Status(); st.Idle {
		t.Fatalf("idle after a new progress: %+v", st)
	}
	steps := g.tr.Steps()
	for i := range 100 {
		g.clock.Advance(10 * time.Second)
		g.box.Offer(g.idleAt(g.clock.Now()))
		st := g.tr.Status()
		if !st.Idle || !st.LastEvent.Equal(g.clock.Now()) {
			t.Fatalf("after idle event %d: idle %v, last event %v; want idle, %v", i, st.Idle, st.LastEvent, g.clock.Now())
		}
	}
	// A repeat of the progress taken (not newer) is the same.
	g.clock.Advance(10 * time.Second)
	g.box.Offer(first)
	if st := g.tr.Status(); !st.Idle || !st.LastEvent.Equal(g.clock.Now()) {
		t.Fatalf("after a repeated progress: %+v", st)
	}
	if n := g.tr.Steps() - steps; n != 0 {
		t.Fatalf("101 events that change nothing submitted %d steps, want 0", n)
	}
	// A new progress still wakes the tracker, and the run is no longer idle.
	g.box.Offer(cdcProgress(runA, "2026-09-28T15:05:00"))
	eventually(t, "15:00", func() bool { return g.store.Verdict("t").Equal(utc("2026-09-28T15:00:00Z")) })
	eventually(t, "running again", func() bool { return !g.tr.Status().Idle })
	if g.tr.Steps() == steps {
		t.Fatal("a new progress woke no worker")
	}
	// The termination always wakes it, after idle events stamped alone.
	g.settle(t)
	g.box.Offer(g.idleAt(g.clock.Now()))
	g.box.Offer(terminated(runA))
	select {
	case <-g.tr.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("the termination after an idle event did not end the tracker")
	}
	if st := g.tr.Status(); !st.Terminated || !st.Done {
		t.Fatalf("after the termination: %+v", st)
	}
}

// An idle event is still a chance to retry a failed advance: with the
// advance pending (its retries used up) every idle event wakes a worker,
// and the first one that finds the store answering writes the verdict.
func TestIdleEventWakesTheWorkerWhenAnAdvanceIsPending(t *testing.T) {
	g := newIdleRig(t, hourSpec(t), -1)
	g.store.setFailing(2, nil)
	g.box.Offer(cdcProgress(runA, "2026-09-28T14:05:00"))
	eventually(t, "failure recorded", func() bool { return g.tr.Status().Failures == 1 })
	g.settle(t)
	steps := g.tr.Steps()
	g.box.Offer(g.idleAt(g.clock.Now()))
	eventually(t, "second failure", func() bool { return g.tr.Status().Failures == 2 })
	g.settle(t)
	if g.tr.Steps() == steps {
		t.Fatal("an idle event with a failed advance pending woke no worker")
	}
	if v := g.store.Verdict("t"); !v.IsZero() {
		t.Fatalf("verdict moved while failing: %v", v)
	}
	g.box.Offer(g.idleAt(g.clock.Now()))
	eventually(t, "verdict after idle", func() bool { return g.store.Verdict("t").Equal(utc("2026-09-28T14:00:00Z")) })
	// Now nothing is pending: the next idle event is stamped alone.
	g.settle(t)
	steps = g.tr.Steps()
	g.box.Offer(g.idleAt(g.clock.Now()))
	if n := g.tr.Steps() - steps; n != 0 || !g.tr.Status().Idle {
		t.Fatalf("after the retry succeeded, an idle event submitted %d steps (want 0), idle %v", n, g.tr.Status().Idle)
	}
}

// A failed re-assert is tried again at the next wake: an idle event wakes
// the tracker while one is wanted.
func TestIdleEventRetriesAFailedReassert(t *testing.T) {
	g := newIdleRig(t, hourSpec(t), -1)
	g.box.Offer(cdcProgress(runA, "2026-09-28T14:05:00"))
	eventually(t, "first write", func() bool { return g.store.Verdict("t").Equal(utc("2026-09-28T14:00:00Z")) })
	g.settle(t)
	g.store.setFailing(1, nil)
	calls := len(g.store.Calls())
	g.tr.Reassert()
	eventually(t, "failed re-assert", func() bool { return len(g.store.Calls()) == calls+1 })
	g.settle(t)
	steps := g.tr.Steps()
	g.box.Offer(g.idleAt(g.clock.Now()))
	eventually(t, "re-assert tried again", func() bool { return len(g.store.Calls()) == calls+2 })
	if g.tr.Steps() == steps {
		t.Fatal("an idle event with a re-assert wanted woke no worker")
	}
}

// A run with a quiet rule reads every idle event's time (ADR 0014): each
// one wakes the tracker, and moves the verdict when it says the source is
// quiet.
func TestIdleEventWakesATrackerWithAQuietRule(t *testing.T) {
	spec, err := progress.ParseSpec(quietSpec("5m"))
	if err != nil {
		t.Fatal(err)
	}
	g := newIdleRig(t, spec, -1)
	g.clock.Advance(utc(quietClock).Sub(g.clock.Now()))
	g.box.Offer(dataProgress("2026-09-28T13:40:00", "2026-09-28T13:41:00Z"))
	eventually(t, "13:00", func() bool { return g.store.Verdict("t").Equal(utc("2026-09-28T13:00:00Z")) })
	g.settle(t)
	steps := g.tr.Steps()
	g.box.Offer(idleAt("2026-09-28T15:30:00.000Z"))
	eventually(t, "15:00", func() bool { return g.store.Verdict("t").Equal(utc("2026-09-28T15:00:00Z")) })
	if g.tr.Steps() == steps {
		t.Fatal("an idle event of a run with a quiet rule woke no worker")
	}
	g.settle(t)
	steps = g.tr.Steps()
	g.box.Offer(idleAt("2026-09-28T15:31:00.000Z"))
	eventually(t, "a step for the next idle event", func() bool { return g.tr.Steps() > steps })
}
