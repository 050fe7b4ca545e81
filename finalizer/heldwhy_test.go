package finalizer_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/finalizer-dev/finalizer/listener"
	"github.com/finalizer-dev/finalizer/progress"
)

// heldOf is the hold reason of table's run in r's status ("" when none).
func heldOf(r *rig, table string) string {
	for _, st := range r.reg.Status() {
		if st.Table == table {
			return st.Held
		}
	}
	return ""
}

// holdSays is the hold reason of table's run in r's status, with an
// error for each of want it does not say.
func holdSays(t *testing.T, r *rig, table string, want ...string) string {
	t.Helper()
	held := heldOf(r, table)
	for _, w := range want {
		if !strings.Contains(held, w) {
			t.Errorf("the hold %q does not say %q", held, w)
		}
	}
	return held
}

// TestAProgressHeldByALateMarkSaysSo (ADR 0019, addendum of 2026-12-06,
// "a hold says why", review F1): NATS was down when the service heard the
// rewind; its read of the stream's state failed, and answered 9 s later,
// after the new run's progress had been stored (sequence 10, the stream's
// last then). Holding it is right (the stream cannot tell whether a
// sequence at or below a late mark was stored before or after the
// rewind's commit), but the hold said "the stream's last sequence once
// the rewind had committed was 10": false, that was read 9 s after. It
// now says that the mark was read late, how late and why, that the
// stream cannot tell, and what the operator can do for a run that ended.
func TestAProgressHeldByALateMarkSaysSo(t *testing.T) {
	r, sm := newScriptedRig(t)
	rewoundAt := r.clock.Now()
	r.store.rewind("t_a", utc("2026-09-28T14:00:00Z"), rewoundAt)
	r.reg.Rewound("t_a", utc("2026-09-28T14:00:00Z"), rewoundAt)
	started := len(r.clock.Starts())
	sm.call(t) <- answer{err: errors.New("nats: no servers available for connection")}
	eventually(t, "the read's retry timer armed", func() bool { return len(r.clock.Starts()) > started })
	r.clock.Advance(9 * time.Second) // fires the backoff's timer: NATS is back
	sm.call(t) <- answer{last: 10}
	eventually(t, "the late mark kept", func() bool {
		_, _, last, _, read := r.reg.StreamMarkOf("t_a")
		return read && last == 10
	})
	if n := r.logs.FilterMessageSnippet("could be read only late").Len(); n != 1 {
		t.Errorf("%d warnings of a late read of the stream's state, want 1", n)
	}
	r.retainLast(rewoundAt.Add(8*time.Second), rewoundAt.Add(8*time.Second), 10)
	r.track(t, runA, "t_a")
	r.staysRewound(t, "t_a", "the progress at the late mark held", 1,
		"a progress at or below a late mark was applied: verdict %s")
	held := holdSays(t, r, "t_a",
		"stored by the stream at sequence 10",
		"at or before sequence 10, the stream's last when this service could read it, 9s after it heard the table's rewind",
		"could not be read at first (NATS unreachable or not answering: 1 failed reads)",
		"the stream cannot tell whether it stored this progress before or after the rewind",
		"its next progress posted after the rewind moves the verdict",
		"if the run has ended, start its query again",
	)
	if strings.Contains(held, "once the rewind had committed") {
		t.Errorf("the hold %q says the late mark was the stream's state once the rewind had committed", held)
	}
	// What the hold says works for a run that ended: its query started
	// again, the new run's progress heard live and posted after the
	// rewind moves the verdict.
	r.bus.afterSubscribe = nil
	r.track(t, runB, "t_a")
	ev := cdcProgress(runB, "2026-09-28T18:10:00")
	ev.Timestamp = r.clock.Now()
	r.bus.Publish(ev)
	r.movesTo18(t, "t_a", "the new run's live progress applied")
}

// TestAPromptMarkSaysWhoReadIt: a mark read at once when the rewind was
// heard says so; one recorded by finalizer rewind says that.
func TestAPromptMarkSaysWhoReadIt(t *testing.T) {
	rewoundAt := utc("2026-09-29T00:00:00Z")
	r, _ := heardLiveRig(t, rewoundAt, func(runID string, ev *progress.Event, box *listener.Mailbox) {
		ev.Timestamp = rewoundAt.Add(30 * time.Second)
		box.OfferRetainedSeq(ev, rewoundAt.Add(-time.Second), 99)
	}, "t_a")
	r.staysRewound(t, "t_a", "the progress before the mark held", 1, "applied: verdict %s")
	if held := heldOf(r, "t_a"); !strings.Contains(held, "sequence 100, the stream's last once the rewind had committed, read when this service heard it") ||
		strings.Contains(held, "cannot tell") {
		t.Errorf("the hold %q does not say the prompt mark was read when the rewind was heard", held)
	}
}

// TestAProgressStoredAfterTheRewindHeldByItsDriversClockSaysSo (ADR
// 0019, addendum of 2026-12-06, "a hold says why", review F2): the
// service stopped, finalizer rewind recorded sequence 18; 2 s later the
// new query posted a progress whose driver's clock is 30 s behind. It is
// held by its posted time (an earlier run's progress queued by a client
// and stored late looks the same), but the hold said only "posted ...
// before its table was rewound": nothing of the stream having stored it
// after the rewind. It now names both sequences and the driver's clock,
// and says to check it.
func TestAProgressStoredAfterTheRewindHeldByItsDriversClockSaysSo(t *testing.T) {
	r, _ := newMarkRig(t, 250)
	rewoundAt := r.clock.Now().Add(-time.Minute)
	r.store.rewind("t_a", utc("2026-09-28T14:00:00Z"), rewoundAt)
	r.store.recordPosition("t_a", 18, streamCreated)
	if err := r.reg.Recover(context.Background(), nil, nil); err != nil {
		t.Fatal(err)
	}
	r.retainLast(rewoundAt.Add(2*time.Second-30*time.Second), rewoundAt.Add(2*time.Second), 19)
	r.track(t, runA, "t_a")
	r.staysRewound(t, "t_a", "the progress posted before the rewind by its driver's clock held", 1,
		"a progress posted before the rewind by its driver's clock was applied: verdict %s")
	holdSays(t, r, "t_a",
		"the stream stored the run's progress after its table's rewind (at sequence 19, after sequence 18, the stream's last when finalizer rewind recorded it",
		"but its driver's clock says it was posted at",
		"its driver's clock is behind: check the driver's clock (NTP)",
		"its next progress posted after the rewind by that clock moves the verdict",
	)
}

// TestAPositionOfAnotherStreamWarnsOncePerRewind (review nit 1): a
// position recorded from another stream (created again since, or
// another server's: finalizer rewind with a wrong --nats-url) warned
// "of another stream (created again since)" at every read of the
// rewinds (the start's, and the re-read after the control database's
// LISTEN connection came up): twice at a start. Once per table and
// rewind now, naming both causes.
func TestAPositionOfAnotherStreamWarnsOncePerRewind(t *testing.T) {
	r, mb := newMarkRig(t, 250)
	r.store.rewind("t_a", utc("2026-09-28T14:00:00Z"), r.clock.Now().Add(-time.Minute))
	r.store.recordPosition("t_a", 100, streamCreated.Add(-time.Hour))
	if err := r.reg.Recover(context.Background(), nil, nil); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 2; i++ {
		r.reg.RereadRewinds()
		eventually(t, "the rewinds read again", func() bool {
			mb.mu.Lock()
			defer mb.mu.Unlock()
			return mb.asked == i+2
		})
	}
	warned := r.logs.FilterMessageSnippet("of a stream of another creation time (created again since, or another server's").Len()
	if warned != 1 {
		t.Errorf("%d warnings of a position of another stream over three reads of the rewinds, want 1", warned)
	}
}
