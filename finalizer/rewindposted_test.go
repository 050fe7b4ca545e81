package finalizer_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/finalizer-dev/finalizer/listener"
	"github.com/finalizer-dev/finalizer/progress"
)

// TestABatchStartedBeforeARewindAndPostedAfterItIsApplied (ADR 0019,
// addendum of 2026-12-06): Spark's timestamp is the trigger's start
// (ProgressReporter's finishTrigger: formatTimestamp(
// currentTriggerStartTimestamp)); the progress is posted when the trigger
// ends, durationMs.triggerExecution later. A retained progress of a batch
// that started before the rewind and committed, and posted, after it was
// held by its timestamp, and a terminated run's never moved the table. It
// is judged by timestamp + triggerExecution now: posted after the rewind,
// stored after it (t_a), applied; a batch that also ended before the
// rewind (t_b) is still held.
func TestABatchStartedBeforeARewindAndPostedAfterItIsApplied(t *testing.T) {
	rewoundAt := utc("2026-09-29T00:00:00Z") // the fake clock's now
	exec := map[string]int32{
		runA: 90_000, // started 30 s before the rewind, posted a minute after it
		runB: 20_000, // started 30 s before the rewind, posted 10 s before it
	}
	r, _ := heardLiveRig(t, rewoundAt, func(runID string, ev *progress.Event, box *listener.Mailbox) {
		ev.Timestamp, ev.TriggerExecutionMs = rewoundAt.Add(-30*time.Second), exec[runID]
		// Stored after the stream's state at the rewind: a client's queue
		// across an outage stores late, so the posted time decides.
		box.OfferRetainedSeq(ev, rewoundAt.Add(2*time.Minute), 101)
	}, "t_a", "t_b")
	r.movesTo18(t, "t_a", "t_a applied")
	r.staysRewound(t, "t_b", "the batch posted before the rewind held", 1,
		"a progress posted (timestamp + triggerExecution) before the rewind was applied: verdict %s")
}

// TestARunEndedHeldBeforeItsRewindStaysInStatus: a terminated run whose
// last progress was held before its table's rewind was reaped with its
// tracker, and then nothing in `finalizer status` or /v1/tables (both
// read Registry.Status) said why the table stayed at the rewind. The run
// stays listed, done, held: its last progress not applied; join's note
// gives the hold's reason. A run of the table that writes since hides it.
func TestARunEndedHeldBeforeItsRewindStaysInStatus(t *testing.T) {
	r, at := rewoundRig(t)
	r.stoppedRunPostsBefore(t, at)
	r.bus.Publish(terminated(runStopped))
	res := r.join(t, runStopped)
	if !res.Done || !strings.HasPrefix(res.Note, "its last progress was posted before the rewind of table t_c and not applied: ") ||
		!strings.Contains(res.Note, "its driver's clock says it was posted at 2026-09-28T22:59:00Z, before the rewind") {
		t.Fatalf("join = %+v, want done with the hold's reason", res)
	}
	held := func() (string, bool) {
		for _, st := range r.reg.Status() {
			if st.Table == "t_c" && st.RunID == runStopped {
				return st.Held, st.Done
			}
		}
		return "", false
	}
	h, done := held()
	if !done || !strings.HasPrefix(h, "before_rewind: the run ended and its last progress was not applied") {
		t.Fatalf("after the run ended, status shows t_c's run as %q (done %v): nothing says why the table stays at the rewind", h, done)
	}
	// Another run of the table writes: the table moves, the hold is
	// not listed any more.
	r.track(t, runB, "t_c")
	r.publishApplied(t, runB, "t_c", "2026-09-28T15:10:00", r.clock.Now(), "2026-09-28T15:00:00Z")
	eventually(t, "the hold no longer listed", func() bool { _, done := held(); return !done })
}

// TestAProgressIsNeverPostedAfterItWasStored (ADR 0019, addendum of
// 2026-12-06, review F2): an old run's last progress, its timestamp 20 s
// before the rewind and its triggerExecution 2,000,000,000 ms (24 days),
// queued by its client and stored two minutes after the rewind, moved
// the table from the rewind's 14:00 to 18:00: its posted time, timestamp
// + triggerExecution, is not believed past when the stream stored it
// (plus progress.PostedSkew), and the timestamp alone holds it (t_a).
// Without a stored time the timestamp alone is judged too (t_c). An
// honest batch started before the rewind and posted a minute after it,
// stored a second later, is applied (t_b).
func TestAProgressIsNeverPostedAfterItWasStored(t *testing.T) {
	rewoundAt := utc("2026-09-29T00:00:00Z") // the fake clock's now
	r, _ := heardLiveRig(t, rewoundAt, func(runID string, ev *progress.Event, box *listener.Mailbox) {
		switch runID {
		case runA:
			ev.Timestamp, ev.TriggerExecutionMs = rewoundAt.Add(-20*time.Second), 2_000_000_000
			box.OfferRetainedSeq(ev, rewoundAt.Add(2*time.Minute), 102)
		case runB:
			ev.Timestamp, ev.TriggerExecutionMs = rewoundAt.Add(-30*time.Second), 90_000
			box.OfferRetainedSeq(ev, rewoundAt.Add(61*time.Second), 101)
		case runC:
			ev.Timestamp, ev.TriggerExecutionMs = rewoundAt.Add(-20*time.Second), 2_000_000_000
			box.OfferRetained(ev)
		}
	}, "t_a", "t_b", "t_c")
	r.movesTo18(t, "t_b", "t_b applied")
	r.staysRewound(t, "t_a", "the hostile duration held", 2,
		"a progress whose timestamp + triggerExecution is weeks after it was stored was applied: verdict %s")
	if got := r.store.Verdict("t_c"); !got.Equal(utc("2026-09-28T14:00:00Z")) {
		t.Fatalf("a progress with no stored time was judged by its duration: verdict %s", got)
	}
}

// TestARunEndedHeldStaysListedAfterARecovery (ADR 0019, addendum of
// 2026-12-06, review F1): with the service down during a rewind, a new
// run's only progress, stored 2 s after the rewind (within the margin),
// is held for good, and after the restart's recovery the run was absent
// from status: the recovery ends the trackers of the table's runs in any
// order, and an older run of the query ending later, with its own old
// progress held or with none left in the stream, replaced or dropped the
// new run's kept hold. The run that started last stays listed, held.
func TestARunEndedHeldStaysListedAfterARecovery(t *testing.T) {
	r, rewoundAt := rewoundAnHourAgo(t, "t_c")
	fresh := cdcProgress(runStopped, "2026-09-28T15:10:00")
	fresh.Name, fresh.Timestamp = "c", rewoundAt.Add(time.Second)
	old := cdcProgress(runA, "2026-09-28T18:10:00")
	old.Name, old.Timestamp = "c", rewoundAt.Add(-time.Hour)
	r.bus.afterSubscribe = func(runID string, box *listener.Mailbox) {
		switch runID {
		case runStopped:
			box.OfferRetainedAt(fresh, rewoundAt.Add(2*time.Second))
			box.OfferRetained(terminated(runStopped))
		case runA:
			box.OfferRetainedAt(old, rewoundAt.Add(-time.Hour))
		}
	}
	if err := r.reg.Recover(context.Background(), nil, []listener.Run{
		{QueryID: queryA, RunID: runA, Name: "c", Kind: progress.KindProgress, Stored: rewoundAt.Add(-time.Hour)},
		{QueryID: queryA, RunID: runB, Name: "c", Kind: progress.KindProgress, Stored: rewoundAt.Add(-time.Hour)},
		{QueryID: queryA, RunID: runStopped, Name: "c", Kind: progress.KindTerminated, Terminated: true, Stored: rewoundAt.Add(3 * time.Second)},
	}); err != nil {
		t.Fatal(err)
	}
	listed := func() string {
		for _, st := range r.reg.Status() {
			if st.Table == "t_c" && st.Done {
				return st.RunID
			}
		}
		return ""
	}
	eventually(t, "the new run ended held", func() bool { return listed() == runStopped })
	// The older runs end after it: one with its old progress held, one
	// with no progress left in the stream.
	r.bus.Publish(terminated(runA))
	r.bus.Publish(terminated(runB))
	eventually(t, "the older runs ended", func() bool { return r.reg.Tracked() == 0 })
	if got := listed(); got != runStopped {
		t.Fatalf("after the older runs ended, status lists %q as t_c's held run, want the new run %s", got, runStopped)
	}
	if v := r.store.Verdict("t_c"); !v.Equal(utc("2026-09-28T14:00:00Z")) {
		t.Fatalf("verdict %s, want the rewind's 14:00", v)
	}
}
