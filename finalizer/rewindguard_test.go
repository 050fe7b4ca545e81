package finalizer_test

import (
	"context"
	"strings"
	"testing"
	"time"
)

// newRigAt16 is a rig, recovered with no rows, whose run A tracks t_a
// and moved it to 16:00 with its progress of batch 6. Batch ids of their
// own (progressAt): cdcProgress's grow across the package's tests, and
// the mailbox drops a progress older than the last.
func newRigAt16(t *testing.T) *rig {
	t.Helper()
	r := newRig(t)
	if err := r.reg.Recover(context.Background(), nil, nil); err != nil {
		t.Fatal(err)
	}
	r.track(t, runA, "t_a")
	r.bus.Publish(progressAt(queryA, runA, 6, r.clock.Now(), "2026-09-28T16:10:00"))
	eventually(t, "t_a at 16:00", func() bool { return r.store.Verdict("t_a").Equal(utc("2026-09-28T16:00:00Z")) })
	return r
}

// nextMovesKnowing publishes run A's progress of batch, posted a second
// later, whose source is at hour:10, and checks that it moves t_a to
// hour:00 with an advance that knew the rewind at rewoundAt, and that the
// run is held no more.
func (r *rig) nextMovesKnowing(t *testing.T, batch int64, hour string, rewoundAt time.Time) {
	t.Helper()
	r.clock.Advance(time.Second)
	r.bus.Publish(progressAt(queryA, runA, batch, r.clock.Now(), "2026-09-28T"+hour+":10:00"))
	eventually(t, "t_a at "+hour+":00", func() bool { return r.store.Verdict("t_a").Equal(utc("2026-09-28T" + hour + ":00:00Z")) })
	last := r.store.Calls()[len(r.store.Calls())-1]
	if !last.Guard.Known().Equal(rewoundAt) {
		t.Errorf("the advance after the refusal knew the rewind at %s, want %s", last.Guard.Known(), rewoundAt)
	}
	for _, s := range r.reg.Status() {
		if s.RunID == runA && s.Held != "" {
			t.Errorf("still held after a progress moved the verdict: %q", s.Held)
		}
	}
}

// TestAnAdvanceRefusedByARewindIsDroppedAndTheNextMoves: a tracker's
// advance of a progress taken before a rewind it had not heard of (the
// statement was in flight when the rewind committed, or the notification
// is late) is refused by the store (control.ErrBeforeRewind, the guard
// in the statement, ADR 0019 addendum of 2026-12-06). The tracker drops
// it as before_rewind (its status says so), retries nothing, learns the
// rewind from the refused row (its next advances carry it as known), and
// its next progress moves the verdict from the rewound point: no
// permanent hold. A notification of that rewind heard afterwards changes
// nothing more.
func TestAnAdvanceRefusedByARewindIsDroppedAndTheNextMoves(t *testing.T) {
	r := newRigAt16(t)
	if calls := r.store.Calls(); !calls[0].Guard.Guarded() || !calls[0].Guard.Known().IsZero() {
		t.Fatalf("a tracker that knew of no rewind sent %+v: want a guard that knew none", calls[0].Guard)
	}

	// The operator's rewind commits; its notification is not heard yet.
	rewoundAt := r.clock.Now().Add(-time.Second)
	r.store.rewind("t_a", utc("2026-09-28T14:00:00Z"), rewoundAt)
	r.clock.Advance(time.Second)
	r.bus.Publish(progressAt(queryA, runA, 7, r.clock.Now().Add(-2*time.Second), "2026-09-28T18:10:00"))
	eventually(t, "the refused advance dropped", func() bool {
		return r.logs.FilterMessageSnippet("refused by the control table").Len() == 1
	})
	if got := r.store.Verdict("t_a"); !got.Equal(utc("2026-09-28T14:00:00Z")) {
		t.Fatalf("verdict %s after the rewind to 14:00", got)
	}
	calls := r.store.Calls()
	if n := len(calls); n != 2 {
		t.Fatalf("%d advances sent, want 2 (the refused one is not retried)", n)
	}
	for _, s := range r.reg.Status() {
		if s.RunID == runA && (!strings.HasPrefix(s.Held, "before_rewind:") || s.Failures != 0) {
			t.Errorf("status after the refusal: held %q, failures %d", s.Held, s.Failures)
		}
	}
	if !r.store.Calls()[1].Guard.Guarded() {
		t.Error("the refused advance carried no guard")
	}

	// The run's next progress, heard after the refusal, moves the
	// verdict from the rewound point, knowing the rewind.
	r.nextMovesKnowing(t, 8, "19", rewoundAt)

	// The notification, heard late, is the rewind learnt already.
	r.reg.Rewound("t_a", utc("2026-09-28T14:00:00Z"), rewoundAt)
	r.clock.Advance(time.Second)
	r.bus.Publish(progressAt(queryA, runA, 9, r.clock.Now(), "2026-09-28T20:10:00"))
	eventually(t, "t_a at 20:00", func() bool { return r.store.Verdict("t_a").Equal(utc("2026-09-28T20:00:00Z")) })
	if n := r.logs.FilterMessageSnippet("verdict rewound by an operator").Len(); n != 1 {
		t.Errorf("the rewind was applied %d times, want once (learnt from the refused row)", n)
	}
}

// TestARewindsNotificationIsTheKnownRewindOfTheNextAdvance: the rewound_at
// a rewind's notification carries is what the table's trackers' next
// advances know, so that they are not refused.
func TestARewindsNotificationIsTheKnownRewindOfTheNextAdvance(t *testing.T) {
	r := newRig(t)
	if err := r.reg.Recover(context.Background(), nil, nil); err != nil {
		t.Fatal(err)
	}
	r.track(t, runA, "t_a")
	r.publishApplied(t, runA, "t_a", "2026-09-28T16:10:00", r.clock.Now(), "2026-09-28T16:00:00Z")
	rewoundAt := r.clock.Now()
	r.store.rewind("t_a", utc("2026-09-28T14:00:00Z"), rewoundAt)
	r.reg.Rewound("t_a", utc("2026-09-28T14:00:00Z"), rewoundAt)
	r.clock.Advance(time.Second)
	r.publishApplied(t, runA, "t_a", "2026-09-28T17:10:00", r.clock.Now(), "2026-09-28T17:00:00Z")
	last := r.store.Calls()[len(r.store.Calls())-1]
	if !last.Guard.Known().Equal(rewoundAt) {
		t.Errorf("the advance after the notification knew the rewind at %s, want %s", last.Guard.Known(), rewoundAt)
	}
	if n := r.logs.FilterMessageSnippet("refused by the control table").Len(); n != 0 {
		t.Errorf("%d advances refused", n)
	}
}
