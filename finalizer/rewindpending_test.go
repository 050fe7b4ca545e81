package finalizer_test

import (
	"context"
	"testing"
	"time"

	"github.com/finalizer-dev/finalizer/finalizer"
	"github.com/finalizer-dev/finalizer/listener"
	"github.com/finalizer-dev/finalizer/progress"
)

// TestAProgressHeldPendingAcrossARewindIsJudgedByWhenItWasHeard (ADR
// 0019, addendum of 2026-12-06): discovery held a run waiting for its
// decision (here under a restart's hold) while its progress was heard
// live, then its table was rewound, then the run was started: the
// progress was handed to the tracker as if heard then, after the rewind,
// and judged by its driver's clock only, which, ten minutes ahead, put it
// after the rewind (14:00 -> 18:00 with no new data). It is judged by
// when it was heard (the mailbox's Mail.ProgressHeard): before the
// service heard the rewind, held.
func TestAProgressHeldPendingAcrossARewindIsJudgedByWhenItWasHeard(t *testing.T) {
	r := newRig(t, finalizer.Rule{Table: "t_{name}", Query: "*", Spec: hourSpec(t)})
	if err := r.reg.Recover(context.Background(), nil, nil); err != nil {
		t.Fatal(err)
	}
	release := r.reg.HoldDiscovery()
	ev := cdcProgress(runA, "2026-09-28T18:10:00")
	ev.Name, ev.Timestamp = "a", r.clock.Now().Add(10*time.Minute) // the driver's clock ten minutes ahead
	r.reg.Discovered(listener.Run{QueryID: queryA, RunID: runA, Name: "a", Kind: progress.KindProgress, Event: ev})
	r.clock.Advance(time.Second)
	r.store.rewind("t_a", utc("2026-09-28T14:00:00Z"), r.clock.Now())
	r.reg.Rewound("t_a", utc("2026-09-28T14:00:00Z"), r.clock.Now())
	r.clock.Advance(time.Second)
	release()
	r.staysRewound(t, "t_a", "the progress heard before the rewind held", 1,
		"a progress heard before the rewind, its run pending across it, moved the verdict to %s")
}
