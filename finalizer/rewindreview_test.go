package finalizer_test

import (
	"context"
	"testing"
	"time"

	"github.com/finalizer-dev/finalizer/listener"
	"github.com/finalizer-dev/finalizer/progress"
)

// TestAnIdleEventAfterARewindDoesNotApplyAFailedAdvanceFromBeforeIt
// (found in review): a progress taken before the rewind whose
// advance failed through its in-place retries (a lock held for seconds, the
// database down) waits for "the run's next event". The rewind holds it
// until the run is heard of live after the rewind; the run's next event is
// an idle event (no new data), which releases the hold, and the retry then
// applies the progress posted before the rewind: 14:00 -> 18:00 with no
// new data. Against the running service: the same with a FOR SHARE lock on
// the table's row, the rewind waiting for it, then one idle event.
func TestAnIdleEventAfterARewindDoesNotApplyAFailedAdvanceFromBeforeIt(t *testing.T) {
	r := failedAdvance(t)

	r.store.rewind("t_a", utc("2026-09-28T14:00:00Z"), r.clock.Now())
	r.reg.Rewound("t_a", utc("2026-09-28T14:00:00Z"), r.clock.Now())
	r.clock.Advance(10 * time.Second)
	time.Sleep(200 * time.Millisecond)
	if got := r.store.Verdict("t_a"); !got.Equal(utc("2026-09-28T14:00:00Z")) {
		t.Fatalf("before the idle event: verdict %s, want 2026-09-28T14:00:00Z", got)
	}
	r.bus.Publish(&progress.Event{Kind: progress.KindIdle, QueryID: queryA, RunID: runA, BatchID: -1, Timestamp: r.clock.Now()})
	eventually(t, "the idle event taken", func() bool {
		for _, s := range r.reg.Status() {
			if s.RunID == runA && s.Idle {
				return true
			}
		}
		return !r.store.Verdict("t_a").Equal(utc("2026-09-28T14:00:00Z"))
	})
	time.Sleep(200 * time.Millisecond) // a step under way
	if got := r.store.Verdict("t_a"); !got.Equal(utc("2026-09-28T14:00:00Z")) {
		t.Fatalf("an idle event after the rewind applied the failed advance of a progress posted before it: verdict %s, want 2026-09-28T14:00:00Z", got)
	}
}

// failedAdvance is trackFailing whose progress's advance failed through
// its in-place retries (3 tries), the failure left to the run's next
// event.
func failedAdvance(t *testing.T) *rig {
	t.Helper()
	r := trackFailing(t, 3) // the advance and its two in-place retries
	eventually(t, "the advance and its in-place retries failed", func() bool {
		r.store.mu.Lock()
		left := r.store.failures
		r.store.mu.Unlock()
		if left > 0 && r.clock.Waiting() > 0 {
			r.clock.Advance(time.Second)
		}
		return left == 0
	})
	eventually(t, "the failure left to the next event", func() bool {
		for _, s := range r.reg.Status() {
			if s.RunID == runA && s.Failures > 0 {
				return true
			}
		}
		return false
	})
	return r
}

// TestAReconnectsRetryDoesNotUndoARewindNotHeard (found in
// review): a tracker's advance of a progress failed through its in-place
// retries (the database down); the database comes back, an operator
// rewinds the table before the LISTEN connection is re-established (its
// announcement is not heard), and the reconnect's notification makes the
// service re-read the rewinds (RereadRewinds, on its own goroutine: here
// its first read fails, as a read still under way would not be done) and
// re-assert every tracker (Reassert). The re-assert wakes the tracker,
// whose pending retry applies the progress posted before the rewind:
// 14:00 -> 18:00 with no new data. Against the running service: pg_ctl
// stop, a progress, pg_ctl start, finalizer rewind at once: the table was
// at 13:00 for 5 s, then at 17:00 (the tracker's "advance succeeded
// again" right after "every tracker re-asserts its last verdict").
func TestAReconnectsRetryDoesNotUndoARewindNotHeard(t *testing.T) {
	r := failedAdvance(t)

	r.store.rewind("t_a", utc("2026-09-28T14:00:00Z"), r.clock.Now()) // not heard
	r.store.mu.Lock()
	r.store.rewindFailures = 1
	r.store.mu.Unlock()
	r.reg.RereadRewinds() // the reconnect's notification, as the service calls them
	r.reg.Reassert()
	time.Sleep(300 * time.Millisecond) // the tracker's step
	if got := r.store.Verdict("t_a"); !got.Equal(utc("2026-09-28T14:00:00Z")) {
		t.Fatalf("the reconnect applied a failed advance of a progress posted before a rewind not heard yet: verdict %s, want 2026-09-28T14:00:00Z", got)
	}
	// The re-read succeeds (its retry, a second later); the advance's
	// retry then finds the rewind and holds the progress taken before it.
	eventually(t, "the rewinds read again", func() bool {
		r.store.mu.Lock()
		defer r.store.mu.Unlock()
		return r.store.rewindReads >= 3
	})
	eventually(t, "the held retry judged again", func() bool {
		r.clock.Advance(time.Second)
		return r.logs.FilterMessageSnippet("posted before the table's last rewind").Len() >= 1
	})
	if got := r.store.Verdict("t_a"); !got.Equal(utc("2026-09-28T14:00:00Z")) {
		t.Fatalf("verdict %s after the re-read, want 2026-09-28T14:00:00Z", got)
	}
}

// TestARecoveryHoldsARetainedProgressFromBeforeTheRewind (found in
// review): a run that sent an idle event after its table's rewind (Spark
// sends them while a query runs with no new data) is not silent since the
// rewind by the stream's account, and a restart's recovery applied its
// last progress, retained in the stream and posted before the rewind:
// 13:00 -> 17:00 at every restart, while the live service had kept 13:00.
// A progress read from the stream's retained copy is judged by its own
// timestamp against the table's last rewind, whatever the run sent since;
// one heard live is not held to its driver's clock.
func TestARecoveryHoldsARetainedProgressFromBeforeTheRewind(t *testing.T) {
	r, rewoundAt := rewoundAnHourAgo(t, "t_a")
	r.bus.afterSubscribe = func(runID string, box *listener.Mailbox) {
		last := cdcProgress(runID, "2026-09-28T18:10:00")
		last.Name, last.Timestamp = "a", rewoundAt.Add(-3*time.Minute)
		box.OfferRetained(last) // the catch-up's read of the stream
	}
	if err := r.reg.Recover(context.Background(), nil, []listener.Run{
		// Its newest stored event, an idle event, came after the rewind.
		{QueryID: queryA, RunID: runA, Name: "a", Kind: progress.KindIdle, Stored: rewoundAt.Add(time.Minute)},
	}); err != nil {
		t.Fatal(err)
	}
	r.staysRewound(t, "t_a", "the retained progress taken", 1,
		"a restart applied a retained progress from before the rewind: verdict %s")
	// Heard live, a progress is not held to its driver's clock.
	skewed := cdcProgress(runA, "2026-09-28T16:10:00")
	skewed.Name, skewed.Timestamp = "a", rewoundAt.Add(-time.Minute)
	r.clock.Advance(time.Second)
	r.bus.Publish(skewed)
	eventually(t, "the live progress applied", func() bool { return r.store.Verdict("t_a").Equal(utc("2026-09-28T16:00:00Z")) })
}
