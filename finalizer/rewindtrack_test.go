package finalizer_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/finalizer-dev/finalizer/finalizer"
	"github.com/finalizer-dev/finalizer/listener"
	"github.com/finalizer-dev/finalizer/progress"
)

// rewoundRig is a rig whose tables t_a, t_b and t_c an operator rewound to
// 14:00 an hour ago, and whose registry knows it from a restart's recovery
// with nothing to recover; it returns when the rewind was.
func rewoundRig(t *testing.T) (*rig, time.Time) {
	t.Helper()
	r := newRig(t)
	at := r.clock.Now().Add(-time.Hour)
	for _, table := range []string{"t_a", "t_b", "t_c"} {
		r.store.rewind(table, utc("2026-09-28T14:00:00Z"), at)
	}
	if err := r.reg.Recover(context.Background(), nil, nil); err != nil {
		t.Fatal(err)
	}
	return r, at
}

// staysRewound waits until the n-th progress posted before a rewind was
// refused (before_rewind, logged) or table's verdict left 14:00, what the
// rewind set, and fails t with failf (its %s: the verdict) if it left.
func (r *rig) staysRewound(t *testing.T, table, what string, n int, failf string) {
	t.Helper()
	rewound := utc("2026-09-28T14:00:00Z")
	eventually(t, what, func() bool {
		return r.logs.FilterMessageSnippet("posted before the table's last rewind").Len() == n ||
			!r.store.Verdict(table).Equal(rewound)
	})
	if got := r.store.Verdict(table); !got.Equal(rewound) {
		t.Fatalf(failf, got)
	}
}

// movesTo18 waits until table's verdict is 18:00: what (a progress at
// 18:10) applied.
func (r *rig) movesTo18(t *testing.T, table, what string) {
	t.Helper()
	eventually(t, what, func() bool { return r.store.Verdict(table).Equal(utc("2026-09-28T18:00:00Z")) })
}

// trackFailing is a rig tracking runA into t_a, with no rewind yet, whose
// store fails the next failures advances, and runA's progress to 18:10,
// posted two minutes ago, published.
func trackFailing(t *testing.T, failures int) *rig {
	t.Helper()
	r := newRig(t)
	if err := r.reg.Recover(context.Background(), nil, nil); err != nil {
		t.Fatal(err)
	}
	r.track(t, runA, "t_a")
	r.store.setFailing(failures, nil)
	last := cdcProgress(runA, "2026-09-28T18:10:00")
	last.Timestamp = r.clock.Now().Add(-2 * time.Minute)
	r.bus.Publish(last)
	return r
}

// publishAt publishes run's progress to commitTS, posted at posted, and
// waits until its tracker refused it (before_rewind, the n-th) or the
// verdict of table moved.
func (r *rig) publishAt(t *testing.T, runID, table, commitTS string, posted time.Time, n int) {
	t.Helper()
	ev := cdcProgress(runID, commitTS)
	ev.Timestamp = posted
	before := r.store.Verdict(table)
	r.bus.Publish(ev)
	eventually(t, "the progress taken", func() bool {
		return r.logs.FilterMessageSnippet("posted before the table's last rewind").Len() == n ||
			!r.store.Verdict(table).Equal(before)
	})
}

// stoppedRunPostsBefore retains runStopped as terminated a minute after
// the rewind at at, tracks it into t_c, and has it post its last
// progress (to 18:10) a minute before the rewind, waiting until that is
// taken.
func (r *rig) stoppedRunPostsBefore(t *testing.T, at time.Time) {
	t.Helper()
	r.bus.retain(listener.Run{QueryID: queryA, RunID: runStopped, Kind: progress.KindTerminated, Terminated: true, Stored: at.Add(time.Minute)})
	r.track(t, runStopped, "t_c")
	r.publishAt(t, runStopped, "t_c", "2026-09-28T18:10:00", at.Add(-time.Minute), 1)
}

// publishApplied publishes run's progress to commitTS, posted at posted,
// and waits until table's verdict is want.
func (r *rig) publishApplied(t *testing.T, runID, table, commitTS string, posted time.Time, want string) {
	t.Helper()
	ev := cdcProgress(runID, commitTS)
	ev.Timestamp = posted
	r.bus.Publish(ev)
	eventually(t, table+" at "+want, func() bool { return r.store.Verdict(table).Equal(utc(want)) })
}

// TestATrackAfterARewindAppliesNoProgressFromBeforeIt: a tracker started
// live after its table's rewind (an explicit track of an old run, no
// restart) applied the run's last retained progress, posted before the
// rewind, and undid it (found in review of f325569, whose rule held only
// the trackers a restart's recovery started). Every start into a rewound
// table judges its run by the same rule: terminated, or nothing stored
// since the rewind, it applies no progress posted before the rewind; a
// run that spoke since is not held to its driver's clock.
func TestATrackAfterARewindAppliesNoProgressFromBeforeIt(t *testing.T) {
	r, at := rewoundRig(t)
	r.stoppedRunPostsBefore(t, at)
	r.bus.retain(listener.Run{QueryID: queryA, RunID: runA, Kind: progress.KindProgress, Stored: at.Add(-2 * time.Minute)})
	r.bus.retain(listener.Run{QueryID: queryA, RunID: runB, Kind: progress.KindProgress, Stored: at.Add(time.Minute)})

	if got := r.store.Verdict("t_c"); !got.Equal(utc("2026-09-28T14:00:00Z")) {
		t.Fatalf("the last progress of a run stopped, tracked after the rewind, moved the verdict to %s", got)
	}

	r.track(t, runA, "t_a")
	r.publishAt(t, runA, "t_a", "2026-09-28T18:10:00", at.Add(-3*time.Minute), 2)
	if got := r.store.Verdict("t_a"); !got.Equal(utc("2026-09-28T14:00:00Z")) {
		t.Fatalf("a silent run's progress from before the rewind moved the verdict to %s", got)
	}
	r.publishApplied(t, runA, "t_a", "2026-09-28T15:10:00", at.Add(time.Minute), "2026-09-28T15:00:00Z")

	r.track(t, runB, "t_b")
	// It spoke since the rewind: not held to its driver's clock.
	r.publishApplied(t, runB, "t_b", "2026-09-28T16:10:00", at.Add(-time.Minute), "2026-09-28T16:00:00Z")
}

// TestRewindsReadAgainWhenNoTableIsNamed: a rewind the service did not
// hear (the LISTEN connection was down; the notification after says only
// that some verdict may have changed) was not known to the registry, and a
// tracker started after it applied a progress from before it. RereadRewinds
// (the service calls it on every notification without a table) reads the
// rewinds again, so the start judges its run by the latest one.
func TestRewindsReadAgainWhenNoTableIsNamed(t *testing.T) {
	r := newRig(t)
	if err := r.reg.Recover(context.Background(), nil, nil); err != nil {
		t.Fatal(err)
	}
	at := r.clock.Now().Add(-time.Hour)
	r.store.rewind("t_c", utc("2026-09-28T14:00:00Z"), at) // not heard
	r.reg.RereadRewinds()
	eventually(t, "the rewinds read again", func() bool {
		r.store.mu.Lock()
		defer r.store.mu.Unlock()
		return r.store.rewindReads == 2
	})
	r.stoppedRunPostsBefore(t, at)
	if got := r.store.Verdict("t_c"); !got.Equal(utc("2026-09-28T14:00:00Z")) {
		t.Fatalf("a progress from before a rewind not heard moved the verdict to %s", got)
	}
}

// TestAQuietSignalFromBeforeARewindIsNotUsed: a run with a quiet rule
// (ADR 0014), silent since its table's rewind, tracked after it (or by a
// restart's recovery): its retained idle event, or its last progress that
// said its source was caught up, both sent before the rewind, made a quiet
// move that undid the rewind (beforeRewind held the progress, not the
// quiet signal): 14:00 -> 22:00 with no new data. Neither is used; a quiet
// signal sent after the rewind is.
func TestAQuietSignalFromBeforeARewindIsNotUsed(t *testing.T) {
	for _, signal := range []string{"idle_event", "caught_up"} {
		t.Run(signal, func(t *testing.T) {
			r, at := rewoundRig(t)
			r.bus.retain(listener.Run{QueryID: queryA, RunID: runA, Kind: progress.KindIdle, Stored: at.Add(-2 * time.Minute)})
			spec, err := progress.ParseSpec(quietSpec("5m"))
			if err != nil {
				t.Fatal(err)
			}
			if ok, err := r.reg.Track(context.Background(), finalizer.Request{QueryID: queryA, RunID: runA, Table: "t_a", Spec: spec}); err != nil || !ok {
				t.Fatalf("track: %v %v", ok, err)
			}
			sent := at.Add(-10 * time.Minute)
			var old *progress.Event
			if signal == "idle_event" {
				old = idle(runA)
			} else {
				old = caughtUp("2026-09-28T13:40:00", "2026-09-28T13:41:00Z")
			}
			old.Timestamp = sent
			r.bus.Publish(old)
			eventually(t, "the old quiet signal taken", func() bool {
				return r.logs.FilterMessageSnippet("quiet signal sent before the table's last rewind").Len() == 1 ||
					!r.store.Verdict("t_a").Equal(utc("2026-09-28T14:00:00Z"))
			})
			if got := r.store.Verdict("t_a"); !got.Equal(utc("2026-09-28T14:00:00Z")) {
				t.Fatalf("a quiet signal sent before the rewind moved the verdict to %s", got)
			}
			// The operator sees why the table does not move, as for a
			// progress: the run's status and finalizer_held_runs.
			eventually(t, "the run shown held", func() bool {
				st := r.reg.Status()
				return len(st) == 1 && strings.HasPrefix(st[0].Held, "before_rewind: ")
			})
			if v := testutil.ToFloat64(r.m.HeldRuns.WithLabelValues("before_rewind")); v != 1 {
				t.Errorf("finalizer_held_runs{guard=before_rewind} = %v, want 1", v)
			}
			newer := idle(runA)
			newer.Timestamp = at.Add(30 * time.Minute)
			r.bus.Publish(newer)
			eventually(t, "a quiet signal sent after the rewind used", func() bool {
				return r.store.Verdict("t_a").Equal(at.Add(25 * time.Minute).Truncate(time.Hour))
			})
			if signal == "caught_up" {
				return // the progress itself is held until a progress from after the rewind
			}
			eventually(t, "the hold cleared", func() bool { st := r.reg.Status(); return len(st) == 1 && st[0].Held == "" })
			if v := testutil.ToFloat64(r.m.HeldRuns.WithLabelValues("before_rewind")); v != 0 {
				t.Errorf("finalizer_held_runs{guard=before_rewind} = %v once a signal from after the rewind moved the verdict, want 0", v)
			}
		})
	}
}

// TestARewindHeardWhileATrackerStartsHoldsItsRun: a rewind heard after a
// tracker's start judged its run (no rewind of its table then) and before
// the tracker began: the run's last progress, read again from the stream
// by the subscription's catch-up and posted before the rewind, was applied
// and undid it (14:00 -> 18:00). The start was judged against rewinds
// that no longer held; the tracker holds the run to the later rewind until
// it is heard of live after it.
func TestARewindHeardWhileATrackerStartsHoldsItsRun(t *testing.T) {
	r := newRig(t)
	if err := r.reg.Recover(context.Background(), nil, nil); err != nil {
		t.Fatal(err)
	}
	posted := r.clock.Now().Add(-time.Minute)
	r.bus.afterSubscribe = func(runID string, box *listener.Mailbox) {
		// The operator's rewind commits and is heard while the tracker
		// subscribes; the catch-up then offers the run's last progress.
		r.store.rewind("t_c", utc("2026-09-28T14:00:00Z"), r.clock.Now())
		r.reg.Rewound("t_c", utc("2026-09-28T14:00:00Z"), r.clock.Now())
		last := cdcProgress(runID, "2026-09-28T18:10:00")
		last.Timestamp = posted
		box.OfferRetained(last)
	}
	r.track(t, runStopped, "t_c")
	r.staysRewound(t, "t_c", "the retained progress taken", 1,
		"a progress from before a rewind heard while its tracker started moved the verdict to %s")
	// The operator sees why the table does not move.
	st := r.reg.Status()
	if len(st) != 1 || !strings.HasPrefix(st[0].Held, "before_rewind: ") {
		t.Fatalf("status %+v, want the run held before_rewind", st)
	}
	// Heard live after the rewind, the run posts as usual, whatever its
	// driver's clock says.
	r.clock.Advance(time.Second)
	r.publishApplied(t, runStopped, "t_c", "2026-09-28T15:10:00", posted, "2026-09-28T15:00:00Z")
	eventually(t, "the hold cleared", func() bool { st := r.reg.Status(); return len(st) == 1 && st[0].Held == "" })
}

// TestARewindHoldsARunningTrackersPendingProgress: a tracker running when
// its table is rewound, with a progress of its run taken before the rewind
// and not yet applied (its advance failed and waits for its retry, or sat
// in the run's slot): the retry applied it after the rewind and undid it
// (14:00 -> 18:00). The run was not heard of since the rewind, so nothing
// says it still posts: the progress is held, and the run's next progress,
// heard live after the rewind, is applied as usual.
func TestARewindHoldsARunningTrackersPendingProgress(t *testing.T) {
	r := trackFailing(t, 1)
	eventually(t, "the advance failed, its retry armed", func() bool {
		r.store.mu.Lock()
		defer r.store.mu.Unlock()
		return len(r.store.calls) >= 1 && r.store.failures == 0 && r.clock.Waiting() > 0
	})

	r.store.rewind("t_a", utc("2026-09-28T14:00:00Z"), r.clock.Now())
	r.reg.Rewound("t_a", utc("2026-09-28T14:00:00Z"), r.clock.Now())
	r.clock.Advance(time.Second) // the retry
	r.staysRewound(t, "t_a", "the retry taken", 1,
		"a progress taken before the rewind, retried after it, moved the verdict to %s")
	r.clock.Advance(time.Second)
	r.publishApplied(t, runA, "t_a", "2026-09-28T16:10:00", r.clock.Now(), "2026-09-28T16:00:00Z")
}

// TestJoinSaysALastProgressFromBeforeARewindWasNotApplied: a run whose
// last progress was posted before its table's rewind, and so not applied,
// terminated: join answered a bare done, which the README defines as "its
// last progress was applied". It is done with that progress (applying it
// would undo the rewind), and the result says so; a run whose last
// progress was applied has no such note.
func TestJoinSaysALastProgressFromBeforeARewindWasNotApplied(t *testing.T) {
	r, at := rewoundRig(t)
	r.stoppedRunPostsBefore(t, at)
	r.bus.Publish(terminated(runStopped))
	res := r.join(t, runStopped)
	if !res.Done || res.Stopped != "" {
		t.Fatalf("join = %+v, want done", res)
	}
	if want := "its last progress was posted before the rewind of table t_c and not applied: "; !strings.HasPrefix(res.Note, want) {
		t.Errorf("join's note = %q, want it to begin %q", res.Note, want)
	}
	if got := r.store.Verdict("t_c"); !got.Equal(utc("2026-09-28T14:00:00Z")) {
		t.Fatalf("the progress from before the rewind moved the verdict to %s", got)
	}

	r.track(t, runB, "t_b")
	r.publishApplied(t, runB, "t_b", "2026-09-28T15:10:00", r.clock.Now(), "2026-09-28T15:00:00Z")
	r.bus.Publish(terminated(runB))
	if res := r.join(t, runB); !res.Done || res.Note != "" {
		t.Errorf("a run whose last progress was applied: join = %+v", res)
	}
}

// TestAnAdvanceHeldForAReReadGoesOnWhenTheReadEnds: a tracker's advance
// held while the tables' rewinds are read again (the control database's
// LISTEN connection was re-established: a rewind may have been missed)
// waited for the retry's delay, 1 s then 2 s, though the read takes one
// statement; and it counted as a retry. The CI's bench saw 48 of 50 runs
// of a restart's recovery retried, and their verdicts a second late,
// when the LISTEN connection came up after the recovery's trackers had
// started. The advance goes on as soon as the read ends (the fake clock,
// which the retry's delay runs on, never moves here), and nothing counts
// as retried.
func TestAnAdvanceHeldForAReReadGoesOnWhenTheReadEnds(t *testing.T) {
	r := newRigAt16(t)
	gate := r.gatedReread()
	r.bus.Publish(progressAt(queryA, runA, 7, r.clock.Now(), "2026-09-28T17:10:00"))
	eventually(t, "the advance held for the read", func() bool {
		return r.logs.FilterMessageSnippet("advance held until the tables' rewinds are read again").Len() >= 1
	})
	if got := r.store.Verdict("t_a"); !got.Equal(utc("2026-09-28T16:00:00Z")) {
		t.Fatalf("verdict %s while the rewinds are read again, want it held at 16:00", got)
	}
	close(gate)
	eventually(t, "t_a at 17:00 once the read ended", func() bool { return r.store.Verdict("t_a").Equal(utc("2026-09-28T17:00:00Z")) })
	if n := testutil.ToFloat64(r.m.Retries); n != 0 {
		t.Errorf("%v retries counted; a hold for the read is not one", n)
	}
}

// gatedReread asks the registry to re-read the rewinds (RereadRewinds)
// with every read of them held behind the returned gate: a send lets one
// read complete, closing it lets every read through.
func (r *rig) gatedReread() chan struct{} {
	gate := make(chan struct{})
	r.store.mu.Lock()
	r.store.rewindGate = gate
	r.store.mu.Unlock()
	r.reg.RereadRewinds()
	return gate
}

// heldForReRead tracks n runs into tables of their own, has a re-read of
// the rewinds under way (its reads wait behind the returned gate) and a
// progress of each run held for it.
func heldForReRead(t *testing.T, n int) (*rig, chan struct{}, func() int) {
	t.Helper()
	r := newRig(t)
	if err := r.reg.Recover(context.Background(), nil, nil); err != nil {
		t.Fatal(err)
	}
	runs := make([]string, n)
	for i := range runs {
		runs[i] = fmt.Sprintf("11111111-2222-4333-8444-%012d", i+1)
		r.track(t, runs[i], fmt.Sprintf("t_%03d", i))
	}
	gate := r.gatedReread()
	for _, run := range runs {
		ev := cdcProgress(run, "2026-09-28T15:10:00")
		ev.Timestamp = r.clock.Now()
		r.bus.Publish(ev)
	}
	held := func() int {
		return r.logs.FilterMessageSnippet("advance held until the tables' rewinds are read again").Len()
	}
	eventually(t, "every advance held for the read", func() bool { return held() >= n })
	return r, gate, held
}

// TestHeldTrackersWaitForTheLastReRead (found in review): a read that
// completed while another re-read was asked meanwhile woke every tracker
// held for it, each of which found a re-read pending and held again:
// every held tracker stepped once per read, under a stream of
// announcements that name no table. They step once no re-read is
// pending.
func TestHeldTrackersWaitForTheLastReRead(t *testing.T) {
	const n, reads = 200, 20
	r, gate, held := heldForReRead(t, n)
	for range reads {
		r.reg.RereadRewinds() // asked while the read is under way
		gate <- struct{}{}    // that read completes; the new ask is pending
		time.Sleep(20 * time.Millisecond)
	}
	if got := held() - n; got > n {
		t.Errorf("%d steps of held trackers while a re-read stayed pending, want at most %d", got, n)
	}
	close(gate)
	eventually(t, "every table at 15:00", func() bool {
		for i := range n {
			if !r.store.Verdict(fmt.Sprintf("t_%03d", i)).Equal(utc("2026-09-28T15:00:00Z")) {
				return false
			}
		}
		return true
	})
}

// TestCloseEndsTheHoldsForAReRead (found in review): Close ended the
// re-read loop, which woke the held trackers before Close had stopped
// them; each held again, on its timer alone, and its Stop waited for it
// (2 s; for ever on the fake clock). A stop ends a hold at once.
func TestCloseEndsTheHoldsForAReRead(t *testing.T) {
	r, _, _ := heldForReRead(t, 300)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	if err := r.reg.Close(ctx); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if n := testutil.ToFloat64(r.m.FailedAdvances); n != 0 {
		t.Errorf("%v advances counted failed; one held at a stop is left to the next start, not failed", n)
	}
}
