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

// forgetfulRegistry is a registry on bus that remembers two finished runs,
// tracking the runs of query "live" into table t, closed at the test's end.
func forgetfulRegistry(t *testing.T, bus finalizer.Bus) (*finalizer.Registry, *fakeClock) {
	t.Helper()
	clock := newFakeClock(utc("2026-09-29T00:00:00Z"))
	reg := finalizer.NewRegistry(finalizer.RegistryConfig{Bus: bus, Store: newFakeStore(),
		Clock: clock, Logger: zap.NewNop(), Remember: 2,
		Rules: []finalizer.Rule{{Table: "t", Query: "live", Spec: hourSpec(t)}}})
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = reg.Close(ctx)
	})
	return reg, clock
}

// A run that terminated long ago and that the registry no longer
// remembers as finished (beyond Remember) was tracked once more by a
// rescan while the stream retained its termination, and ended at once,
// having applied nothing. A rescan's terminated run whose termination the
// stream stored well before a forgotten run finished is left alone; one
// stored since (a run that ended during an outage) is still tracked, and
// so is any run's live event.
func TestRescanLeavesARunForgottenLongAgo(t *testing.T) {
	reg, clock := forgetfulRegistry(t, newFakeBus())
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

// failingBus is a fakeBus whose Subscribe fails for the runs in fail.
type failingBus struct {
	*fakeBus
	fail   map[string]bool
	failed int // Subscribes failed
}

func (b *failingBus) Subscribe(queryID, runID string, box *listener.Mailbox) (finalizer.RunSubscription, error) {
	b.mu.Lock()
	fail := b.fail[runID]
	if fail {
		b.failed++
	}
	b.mu.Unlock()
	if fail {
		return nil, errors.New("subscribe: the server does not answer")
	}
	return b.fakeBus.Subscribe(queryID, runID, box)
}

// A run whose start failed (it was never tracked) and whose termination
// the stream stored before a run the registry later forgot had finished
// was taken by a rescan for one tracked to its end long ago and left
// alone: its last progress never applied, the table it feeds held where
// it stood. A run discovery dropped is never taken for a finished one.
func TestRescanTracksARunWhoseStartFailedLongAgo(t *testing.T) {
	bus := &failingBus{fakeBus: newFakeBus(), fail: map[string]bool{}}
	reg, clock := forgetfulRegistry(t, bus)
	run := func(i int) string { return fmt.Sprintf("dddddddd-0000-4000-8000-%012d", i) }
	dropped := run(7)
	bus.mu.Lock()
	bus.fail[dropped] = true
	bus.mu.Unlock()
	stored := clock.Now()
	ev := cdcProgress(dropped, "2026-09-28T10:05:00")
	ev.Name = "live"
	reg.Discovered(listener.Run{QueryID: queryA, RunID: dropped, Name: "live", Kind: progress.KindProgress, Event: ev})
	eventually(t, "the start tried", func() bool {
		bus.mu.Lock()
		defer bus.mu.Unlock()
		return bus.failed == 1 && reg.Tracked() == 0
	})
	bus.mu.Lock()
	bus.fail = map[string]bool{}
	bus.mu.Unlock()
	clock.Advance(time.Hour)
	for i := range 3 { // the first is forgotten for room
		ev := cdcProgress(run(i), "2026-09-28T10:05:00")
		ev.Name = "live"
		reg.Discovered(listener.Run{QueryID: queryA, RunID: run(i), Name: "live", Kind: progress.KindProgress, Event: ev})
		eventually(t, "tracked", func() bool { return reg.Tracked() == 1 })
		reg.Discovered(listener.Run{QueryID: queryA, RunID: run(i), Kind: progress.KindTerminated, Terminated: true, Event: terminated(run(i))})
		eventually(t, "finished", func() bool { return reg.Tracked() == 0 })
		clock.Advance(time.Hour)
	}
	// The rescan: the dropped run's termination, stored back then.
	reg.Discovered(listener.Run{QueryID: queryA, RunID: dropped, Name: "live", Kind: progress.KindTerminated, Terminated: true, Stored: stored})
	// Tracked: its catch-up reads the run's last progress and its
	// termination from the stream.
	eventually(t, "the run whose start failed tracked by the rescan", func() bool { return reg.Tracked() == 1 })
}
