package finalizer_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/finalizer-dev/finalizer/finalizer"
	"github.com/finalizer-dev/finalizer/listener"
	"github.com/finalizer-dev/finalizer/progress"
)

// TestARetainedProgressIsJudgedBySequenceNotTheStreamsClock (ADR 0019,
// addendum of 2026-12-06, "judged by sequence"): a retained progress was
// judged against a rewind heard live by its stored time against the
// stream's newest stored time when the rewind was heard, both the NATS
// server's clock. That clock can step back (an NTP step, a stream leader
// moving to a server whose clock is behind): the old run's last progress,
// stored at sequence 99 before the rewind by a server 40 s ahead, the
// clock then stepped back before sequence 100 was stored a second before
// the rewind (the stream's newest stored time when the rewind was heard),
// read as stored after the rewind; its driver, on the same bad time, had
// stamped it after the rewind too, and it undid the rewind (14:00 ->
// 18:00 with no new data). By sequence it is stored before the stream's
// last sequence once the rewind had committed (100), and held (t_a); the
// new run's progress at sequence 101, stored five seconds after the
// rewind, is applied (t_b).
func TestARetainedProgressIsJudgedBySequenceNotTheStreamsClock(t *testing.T) {
	rewoundAt := utc("2026-09-29T00:00:00Z") // the fake clock's now
	r, _ := heardLiveRig(t, rewoundAt, func(runID string, ev *progress.Event, box *listener.Mailbox) {
		switch runID {
		case runA:
			ev.Timestamp = rewoundAt.Add(30 * time.Second)
			box.OfferRetainedSeq(ev, rewoundAt.Add(40*time.Second), 99)
		case runB:
			ev.Timestamp = rewoundAt.Add(4 * time.Second)
			box.OfferRetainedSeq(ev, rewoundAt.Add(5*time.Second), 101)
		}
	}, "t_a", "t_b")
	r.movesTo18(t, "t_b", "t_b applied")
	r.staysRewound(t, "t_a", "the progress stored before the rewind held", 1,
		"a retained progress stored before the rewind (sequence 99, at or below the stream's last sequence 100 after it) was applied because the NATS server's clock had stepped back: verdict %s")
	for _, st := range r.reg.Status() {
		if st.Table == "t_a" && !strings.Contains(st.Held, "stored by the stream at sequence 99") {
			t.Errorf("t_a's hold %q does not name the progress's stream sequence", st.Held)
		}
	}
}

// TestARewindNotHeardIsJudgedByTheSequenceItRecorded (ADR 0019, addendum
// of 2026-12-06, "judged by sequence"): a rewind made while the service
// was down was judged with a minute's margin across the NATS and
// PostgreSQL servers' clocks, and the reprocessing run's only progress,
// stored seconds after the rewind, was held until its run's next one
// (for an AvailableNow run, for good). finalizer rewind now records the
// stream's last sequence after its commit; a restart's recovery reads it
// with the rewind, and a retained progress after it is applied at once
// (t_a, stored five seconds after the rewind, sequence 101), one at or
// below it held (t_b, sequence 100, its driver's clock ahead). A position
// recorded for a stream since created again (another creation time) is
// not used: the margin holds (t_c, sequence 101 stored five seconds
// after the rewind, held), late, never wrong. The stream's state is read
// once, for the tables with a position.
func TestARewindNotHeardIsJudgedByTheSequenceItRecorded(t *testing.T) {
	rewoundAt := utc("2026-09-28T23:59:00Z") // a minute before the fake clock's now
	r, mb := newMarkRig(t, 250)
	for _, table := range []string{"t_a", "t_b", "t_c"} {
		r.store.rewind(table, utc("2026-09-28T14:00:00Z"), rewoundAt)
	}
	r.store.recordPosition("t_a", 100, streamCreated)
	r.store.recordPosition("t_b", 100, streamCreated)
	r.store.recordPosition("t_c", 100, streamCreated.Add(-time.Hour)) // the stream before it was created again
	if err := r.reg.Recover(context.Background(), nil, nil); err != nil {
		t.Fatal(err)
	}
	r.bus.afterSubscribe = func(runID string, box *listener.Mailbox) {
		ev := cdcProgress(runID, "2026-09-28T18:10:00")
		switch runID {
		case runA, runC:
			ev.Timestamp = rewoundAt.Add(4 * time.Second)
			box.OfferRetainedSeq(ev, rewoundAt.Add(5*time.Second), 101)
		case runB:
			ev.Timestamp = rewoundAt.Add(8 * time.Minute)
			box.OfferRetainedSeq(ev, rewoundAt.Add(-2*time.Second), 100)
		}
	}
	r.track(t, runA, "t_a")
	r.track(t, runB, "t_b")
	r.track(t, runC, "t_c")
	r.movesTo18(t, "t_a", "t_a applied")
	r.staysRewound(t, "t_b", "the progress stored before the rewind held", 2,
		"a retained progress at the sequence recorded with the rewind was applied: verdict %s")
	r.staysRewound(t, "t_c", "the progress of a stream created again held by the margin", 2,
		"a position recorded for another incarnation of the stream was used: verdict %s")
	if n := r.logs.FilterMessageSnippet("of a stream of another creation time").Len(); n != 1 {
		t.Errorf("%d warnings of a position of another stream, want 1", n)
	}
	mb.mu.Lock()
	defer mb.mu.Unlock()
	if mb.asked != 1 {
		t.Errorf("the stream's state was read %d times, want once for the recorded positions", mb.asked)
	}
}

// TestARunSilentSinceARewindIsJudgedBySequence (ADR 0019, addendum of
// 2026-12-06, "judged by sequence"): whether a run stored anything since
// its table's rewind (a run silent since, or terminated, is held to the
// rewind: a progress of it posted before the rewind, heard live from a
// client's queue, is not applied) was judged by the time the stream
// stored its newest event against the rewind, across clocks. Now by that
// event's stream sequence against the rewind's mark when both are known:
// run a's newest event, stored before the rewind (sequence 90, the mark
// 100) though the NATS clock said 30 s after it, is silent, and its
// queued progress posted 20 s before the rewind is held (t_a; applied
// without the change: 18:00); run b's, stored after the rewind (sequence
// 120) though the clock said 30 s before it, spoke since, and its
// progress is applied whatever its driver's clock says (t_b; held without
// the change).
func TestARunSilentSinceARewindIsJudgedBySequence(t *testing.T) {
	mb := &markingBus{fakeBus: newFakeBus(), last: 250, created: streamCreated}
	r := newRigOver(t, mb, &batchFake{fakeStore: newFakeStore()}, rigOptions{rules: []finalizer.Rule{{Table: "t_{name}", Query: "*", Spec: hourSpec(t)}}})
	rewoundAt := r.clock.Now().Add(-time.Minute)
	for _, table := range []string{"t_a", "t_b"} {
		r.store.rewind(table, utc("2026-09-28T14:00:00Z"), rewoundAt)
		r.store.recordPosition(table, 100, streamCreated)
	}
	if err := r.reg.Recover(context.Background(), nil, []listener.Run{
		{QueryID: queryA, RunID: runA, Name: "a", Kind: progress.KindProgress, Stored: rewoundAt.Add(30 * time.Second), Seq: 90},
		{QueryID: queryA, RunID: runB, Name: "b", Kind: progress.KindProgress, Stored: rewoundAt.Add(-30 * time.Second), Seq: 120},
	}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "both runs tracked", func() bool { return len(r.reg.Status()) == 2 })
	for _, run := range []struct{ id, name string }{{runA, "a"}, {runB, "b"}} {
		ev := cdcProgress(run.id, "2026-09-28T18:10:00")
		ev.Name, ev.Timestamp = run.name, rewoundAt.Add(-20*time.Second)
		r.bus.Publish(ev)
	}
	r.movesTo18(t, "t_b", "t_b applied")
	r.staysRewound(t, "t_a", "run a's queued progress held", 1,
		"a progress posted before the rewind, of a run silent since it by sequence, was applied: verdict %s")
}
