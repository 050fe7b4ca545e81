package finalizer_test

import (
	"context"
	"testing"
	"time"

	"github.com/finalizer-dev/finalizer/finalizer"
	"github.com/finalizer-dev/finalizer/listener"
	"github.com/finalizer-dev/finalizer/progress"
)

// TestRecoveryAppliesNoProgressFromBeforeARewind: an operator rewound a
// table after its run's last progress (the run terminated, or its driver
// died); a restart's recovery applied that progress again, kept in the
// stream, and the verdict went back where the rewind took it from, with
// no new data (found in review: rewound 18:00 -> 14:00, restarted, 18:00
// again). A run the stream shows silent since its table's rewind applies
// no progress posted before it, and does apply one posted after; a run
// that spoke since the rewind is not held to its driver's clock.
func TestRecoveryAppliesNoProgressFromBeforeARewind(t *testing.T) {
	r, rewoundAt := rewoundAnHourAgo(t, "t_a", "t_b", "t_c")
	if err := r.reg.Recover(context.Background(), nil, []listener.Run{
		{QueryID: queryA, RunID: runA, Name: "a", Kind: progress.KindProgress, Stored: rewoundAt.Add(-2 * time.Minute)},
		{QueryID: queryA, RunID: runB, Name: "b", Kind: progress.KindProgress, Stored: rewoundAt.Add(time.Minute)},
		// Stopped after the rewind: its termination is newer, its last
		// progress is not.
		{QueryID: queryA, RunID: runStopped, Name: "c", Kind: progress.KindTerminated, Terminated: true, Stored: rewoundAt.Add(time.Minute)},
	}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "tracked", func() bool { return r.reg.Tracked() == 3 })
	stoppedRunStaysRewound(t, r, rewoundAt)
	old := cdcProgress(runA, "2026-09-28T18:10:00")
	old.Name, old.Timestamp = "a", rewoundAt.Add(-3*time.Minute)
	r.bus.Publish(old)
	r.staysRewound(t, "t_a", "the old progress taken", 2, "a progress posted before the rewind moved the verdict to %s")
	newer := cdcProgress(runA, "2026-09-28T15:10:00")
	newer.Name, newer.Timestamp = "a", rewoundAt.Add(time.Minute)
	r.bus.Publish(newer)
	eventually(t, "a progress posted after the rewind applied", func() bool {
		return r.store.Verdict("t_a").Equal(utc("2026-09-28T15:00:00Z"))
	})

	// Run b spoke since the rewind: its driver's clock is not trusted to
	// hold it (a progress that reached the stream after the rewind is new
	// data, whatever its timestamp says).
	skewed := cdcProgress(runB, "2026-09-28T16:10:00")
	skewed.Name, skewed.Timestamp = "b", rewoundAt.Add(-time.Minute)
	r.bus.Publish(skewed)
	eventually(t, "the live run's progress applied", func() bool {
		return r.store.Verdict("t_b").Equal(utc("2026-09-28T16:00:00Z"))
	})
}

const runStopped = "0d0d0d0d-2222-4333-8444-555555555555"

// TestRecoveryWaitsForTheRewinds: a restart's recovery whose read of the
// tables' rewinds failed went on without them, and a terminated run's
// last progress, posted before its table's rewind, could be applied again
// (found in review). The read is retried until it succeeds; the
// recovery's trackers start only after it, and the rewind holds.
func TestRecoveryWaitsForTheRewinds(t *testing.T) {
	r, rewoundAt := rewoundAnHourAgo(t, "t_c")
	r.store.mu.Lock()
	r.store.rewindFailures = 1
	r.store.mu.Unlock()
	if err := r.reg.Recover(context.Background(), nil, []listener.Run{
		{QueryID: queryA, RunID: runStopped, Name: "c", Kind: progress.KindTerminated, Terminated: true, Stored: rewoundAt.Add(time.Minute)},
	}); err != nil {
		t.Fatal(err)
	}
	if n := r.logs.FilterMessageSnippet("could not read the tables' rewinds").Len(); n != 1 {
		t.Fatalf("%d warnings of the failed read, want 1", n)
	}
	eventually(t, "tracked", func() bool { return r.reg.Tracked() == 1 })
	stoppedRunStaysRewound(t, r, rewoundAt)
}

// TestRecoveryEndsWhileTheRewindsCannotBeRead: a recovery waiting for the
// rewinds returns when its context ends, and starts nothing.
func TestRecoveryEndsWhileTheRewindsCannotBeRead(t *testing.T) {
	r := newRig(t, finalizer.Rule{Table: "t_{name}", Query: "*", Spec: hourSpec(t)})
	r.store.mu.Lock()
	r.store.rewindFailures = 1 << 30
	r.store.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	err := r.reg.Recover(ctx, nil, []listener.Run{{QueryID: queryA, RunID: runA, Name: "a", Kind: progress.KindProgress, Stored: r.clock.Now()}})
	if err == nil {
		t.Fatal("Recover returned nil while the rewinds could not be read")
	}
	if n := r.reg.Tracked(); n != 0 {
		t.Fatalf("%d runs tracked before the rewinds were read", n)
	}
}

// TestCloseEndsAReReadThatCannotRead: a re-read of the rewinds retried
// while the database does not answer ends at Close, which does not wait
// for its deadline.
func TestCloseEndsAReReadThatCannotRead(t *testing.T) {
	r := newRig(t)
	r.store.mu.Lock()
	r.store.rewindFailures = 1 << 30
	r.store.mu.Unlock()
	r.reg.RereadRewinds()
	eventually(t, "the re-read tried", func() bool {
		r.store.mu.Lock()
		defer r.store.mu.Unlock()
		return r.store.rewindReads >= 1
	})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := r.reg.Close(ctx); err != nil {
		t.Fatalf("Close: %v (the re-read kept it waiting)", err)
	}
}

// stoppedRunStaysRewound publishes the last progress of runStopped (table
// t_c, rewound to 14:00 at rewoundAt), posted a minute before the rewind
// and delivered again as a recovery's catch-up would, and fails t if it
// moved the verdict.
func stoppedRunStaysRewound(t *testing.T, r *rig, rewoundAt time.Time) {
	t.Helper()
	last := cdcProgress(runStopped, "2026-09-28T18:10:00")
	last.Name, last.Timestamp = "c", rewoundAt.Add(-time.Minute)
	r.bus.Publish(last)
	r.staysRewound(t, "t_c", "the stopped run's last progress taken", 1,
		"the last progress of a run stopped after the rewind moved the verdict to %s")
}

// TestSilentRunsArePruned: the runs a recovery notes silent since their
// table's rewind (every run it lists, tracked or not) and those judged at
// a start were kept for the process's life. The janitor's sweep drops
// those the registry no longer tracks or holds for a decision; a tracked
// run keeps its note, and is still held to the rewind.
func TestSilentRunsArePruned(t *testing.T) {
	r := newRig(t, finalizer.Rule{Table: "t_{name}", Query: "a", Spec: hourSpec(t)})
	rewoundAt := r.clock.Now().Add(-time.Hour)
	r.store.rewind("t_a", utc("2026-09-28T14:00:00Z"), rewoundAt)
	if err := r.reg.Recover(context.Background(), nil, []listener.Run{
		{QueryID: queryA, RunID: runA, Name: "a", Kind: progress.KindProgress, Stored: rewoundAt.Add(-2 * time.Minute)},
		// No rule matches these two: never tracked.
		{QueryID: queryA, RunID: runB, Name: "b", Kind: progress.KindTerminated, Terminated: true, Stored: rewoundAt.Add(time.Minute)},
		{QueryID: queryA, RunID: runStopped, Name: "c", Kind: progress.KindIdle, Stored: rewoundAt.Add(-time.Minute)},
	}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "tracked", func() bool { return r.reg.Tracked() == 1 })
	if n := r.reg.SilentRuns(); n != 3 {
		t.Fatalf("%d runs noted silent after the recovery, want 3", n)
	}
	r.reg.Sweep()
	if n := r.reg.SilentRuns(); n != 1 {
		t.Fatalf("%d runs noted silent after a sweep, want 1 (the tracked one)", n)
	}
	old := cdcProgress(runA, "2026-09-28T18:10:00")
	old.Name, old.Timestamp = "a", rewoundAt.Add(-3*time.Minute)
	r.bus.Publish(old)
	r.staysRewound(t, "t_a", "the old progress taken", 1, "a progress posted before the rewind moved the verdict to %s after the prune")
	r.bus.Publish(terminated(runA))
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := r.reg.Join(ctx, runA); err != nil {
		t.Fatal(err)
	}
	r.reg.Sweep()
	if n := r.reg.SilentRuns(); n != 0 {
		t.Fatalf("%d runs noted silent once none is tracked, want 0", n)
	}
}

// rewoundAnHourAgo is a rig whose rule tracks every query into t_{name},
// with tables rewound to 14:00 an hour ago in the store (not heard: a
// recovery reads them), and when.
func rewoundAnHourAgo(t *testing.T, tables ...string) (*rig, time.Time) {
	t.Helper()
	r := newRig(t, finalizer.Rule{Table: "t_{name}", Query: "*", Spec: hourSpec(t)})
	rewoundAt := r.clock.Now().Add(-time.Hour)
	for _, table := range tables {
		r.store.rewind(table, utc("2026-09-28T14:00:00Z"), rewoundAt)
	}
	return r, rewoundAt
}
