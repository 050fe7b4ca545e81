package finalizer_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/finalizer-dev/finalizer/finalizer"
	"github.com/finalizer-dev/finalizer/listener"
	"github.com/finalizer-dev/finalizer/progress"
)

// A run that terminated long ago and that the registry no longer
// remembers as finished (beyond Remember) was tracked once more by a
// rescan while the stream retained its termination, and ended at once,
// having applied nothing. A rescan's terminated run whose termination the
// stream stored well before a forgotten run finished is left alone; one
// stored since (a run that ended during an outage) is still tracked, and
// so is any run's live event.
func TestRescanLeavesARunForgottenLongAgo(t *testing.T) {
	clock := newFakeClock(utc("2026-09-29T00:00:00Z"))
	reg := finalizer.NewRegistry(finalizer.RegistryConfig{Bus: newFakeBus(), Store: newFakeStore(),
		Clock: clock, Logger: zap.NewNop(), Remember: 2,
		Rules: []finalizer.Rule{{Table: "t", Query: "live", Spec: hourSpec(t)}}})
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = reg.Close(ctx)
	})
	run := func(i int) string { return fmt.Sprintf("cccccccc-0000-4000-8000-%012d", i) }
	old := clock.Now()
	for i := range 3 { // the first is forgotten for room
		ev := cdcProgress(run(i), "2026-09-28T10:05:00")
		ev.Name = "live"
		reg.Discovered(listener.Run{QueryID: queryA, RunID: run(i), Name: "live", Kind: progress.KindProgress, Event: ev})
		eventually(t, "tracked", func() bool { return reg.Tracked() == 1 })
		end := terminated(run(i))
		reg.Discovered(listener.Run{QueryID: queryA, RunID: run(i), Kind: progress.KindTerminated, Terminated: true, Event: end})
		eventually(t, "finished", func() bool { return reg.Tracked() == 0 })
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		if res, err := reg.Join(ctx, run(i)); err != nil || !res.Done {
			cancel()
			t.Fatalf("run %d: %+v, %v", i, res, err)
		}
		cancel()
		clock.Advance(time.Hour)
	}
	rescanned := func(i int, stored time.Time) {
		reg.Discovered(listener.Run{QueryID: queryA, RunID: run(i), Name: "live", Kind: progress.KindTerminated, Terminated: true, Stored: stored})
	}
	rescanned(0, old.Add(-time.Hour)) // its termination, from before it was forgotten
	time.Sleep(200 * time.Millisecond)
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	if _, err := reg.Join(ctx, run(0)); !errors.Is(err, finalizer.ErrUnknownRun) || reg.Tracked() != 0 {
		t.Fatalf("a run forgotten long ago was tracked again by a rescan (join: %v, tracked %d)", err, reg.Tracked())
	}
	rescanned(9, clock.Now()) // ended during an outage: tracked
	eventually(t, "the run that ended since tracked", func() bool { return reg.Tracked() == 1 })
	ev := cdcProgress(run(0), "2026-09-28T12:05:00") // the forgotten run speaks: tracked
	ev.Name = "live"
	reg.Discovered(listener.Run{QueryID: queryA, RunID: run(0), Name: "live", Kind: progress.KindProgress, Event: ev})
	eventually(t, "the forgotten run's live event tracks it", func() bool { return reg.Tracked() == 2 })
}
