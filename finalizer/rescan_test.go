package finalizer_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/finalizer-dev/finalizer/finalizer"
	"github.com/finalizer-dev/finalizer/listener"
	"github.com/finalizer-dev/finalizer/progress"
)

// gatedNamer is a fakeBus that is also a Namer: every lookup of a run's
// name waits for the gate, so that the runs discovered meanwhile wait for
// a decision.
type gatedNamer struct {
	*fakeBus
	gate chan struct{}
}

func (b *gatedNamer) RunName(ctx context.Context, _, _ string) (string, error) {
	select {
	case <-b.gate:
		return "live", nil
	case <-ctx.Done():
		return "", ctx.Err()
	}
}

// gatedDiscovery returns a registry with one rule ("live" into t) whose
// lookups of a run's name wait until open is called (the runs discovered
// meanwhile wait for a decision). Its end closes the registry.
func gatedDiscovery(t *testing.T) (*finalizer.Registry, func()) {
	t.Helper()
	bus := &gatedNamer{fakeBus: newFakeBus(), gate: make(chan struct{})}
	reg := finalizer.NewRegistry(finalizer.RegistryConfig{Bus: bus, Store: newFakeStore(),
		Clock: newFakeClock(utc("2026-09-29T00:00:00Z")), Logger: zap.NewNop(),
		Rules: []finalizer.Rule{{Table: "t", Query: "live", Spec: hourSpec(t)}}})
	var openGate sync.Once
	open := func() { openGate.Do(func() { close(bus.gate) }) }
	t.Cleanup(func() {
		open()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := reg.Close(ctx); err != nil {
			t.Error(err)
		}
	})
	return reg, open
}

// More runs than may wait for a decision are discovered at once, each
// with a single event (an hourly trigger's run says nothing more for an
// hour): the ones dropped are found again by a rescan of what the stream
// retains once the queue is empty, not left to their next event. Before,
// they were tracked only when they spoke again (the bench's first
// verdicts at 100,000 runs waited for them until its deadline).
func TestDroppedDiscoveredRunsAreFoundByARescan(t *testing.T) {
	const runs, maxPending = 40, 3
	reg, open := gatedDiscovery(t)
	reg.SetDiscoveryLimits(maxPending, 10*time.Millisecond)

	// The stream: every run's one event (an idle event: no name).
	retained, rescans := rescanStream(reg, runs)
	for _, run := range retained {
		reg.Discovered(run)
	}
	if n := rescans.Load(); n != 0 {
		t.Fatalf("%d rescans while the first runs wait for a decision; want none until the queue is empty", n)
	}
	open()
	eventually(t, "every run tracked", func() bool { return reg.Tracked() == runs })
	// Tracked counts a tracker from its registration, Known from its
	// subscription: the last runs may still be subscribing.
	eventually(t, "every run known", func() bool {
		for _, run := range retained {
			if !reg.Known(run.RunID) {
				return false
			}
		}
		return true
	})
	if rescans.Load() == 0 {
		t.Fatal("no rescan")
	}
}

// Without a way to rescan (no JetStream), a dropped run waits for its next
// event, as before: nothing else asks for one.
func TestDroppedDiscoveredRunWithoutRescanWaitsForItsNextEvent(t *testing.T) {
	reg, open := gatedDiscovery(t)
	reg.SetDiscoveryLimits(1, 10*time.Millisecond)
	for i := range 3 {
		reg.Discovered(idleRun(i))
	}
	open()
	eventually(t, "the runs that waited tracked", func() bool { return reg.Tracked() >= 1 })
	time.Sleep(100 * time.Millisecond)
	dropped := 0
	for i := range 3 {
		if run := idleRun(i); !reg.Known(run.RunID) {
			dropped++
			reg.Discovered(run) // its next event
			eventually(t, "the run tracked on its next event", func() bool { return reg.Known(run.RunID) })
		}
	}
	if dropped == 0 {
		t.Fatal("no run dropped with one allowed to wait; the test does not test the cap")
	}
	eventually(t, "every run tracked on its next event", func() bool { return reg.Tracked() == 3 })
}

// idleRun is the i-th run of a query of its own, as discovery finds it
// from an idle event (no name).
func idleRun(i int) listener.Run {
	query := fmt.Sprintf("10000000-0000-4000-8000-%012d", i)
	id := fmt.Sprintf("00000000-0000-4000-8000-%012d", i)
	ev := idle(id)
	ev.QueryID = query
	return listener.Run{QueryID: query, RunID: id, Kind: progress.KindIdle, Event: ev}
}

// namedAs is a fakeBus that is also a Namer: every run is named name.
type namedAs struct {
	*fakeBus
	name string
}

func (b *namedAs) RunName(context.Context, string, string) (string, error) { return b.name, nil }

// A flood of run ids that no rule matches, more than the registry
// remembers as ignored plus those that may wait for a decision: each
// rescan takes runs that the registry ignores and then forgets (the
// memo evicts them), so the next rescan takes them again, for ever. The
// rescans (each a read of the whole stream) must back off regardless:
// before, every rescan that took a run was followed by the next at the
// minimum delay, so the stream was read every rescanEvery while the
// stream retained the flood.
func TestRescansBackOffUnderAFloodOfIgnoredRuns(t *testing.T) {
	const runs, maxPending, every = 60, 3, 5 * time.Millisecond
	bus := &namedAs{fakeBus: newFakeBus(), name: "hostile"}
	reg := finalizer.NewRegistry(finalizer.RegistryConfig{Bus: bus, Store: newFakeStore(),
		Clock: newFakeClock(utc("2026-09-29T00:00:00Z")), Logger: zap.NewNop(), Remember: 2,
		Rules: []finalizer.Rule{{Table: "t", Query: "live", Spec: hourSpec(t)}}})
	defer func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := reg.Close(ctx); err != nil {
			t.Error(err)
		}
	}()
	reg.SetDiscoveryLimits(maxPending, every)
	retained, rescans := rescanStream(reg, runs)
	for _, run := range retained {
		reg.Discovered(run)
	}
	const watch = 1500 * time.Millisecond
	time.Sleep(watch)
	// At the minimum delay: about watch/every = 300. Bounded: the quick
	// ones, then doubling from every (5, 10, ..., 640 ms: 8 more).
	if n := rescans.Load(); n > 16+12 {
		t.Fatalf("%d rescans in %s at a minimum delay of %s; want them to back off (at most %d)", n, watch, every, 16+12)
	} else {
		t.Logf("%d rescans in %s", n, watch)
	}
}

// rescanStream gives reg a rescan over a stream that retains n runs (each
// with one idle event, idleRun) and returns them and the count of
// rescans: each offers the runs reg does not know to it, off the caller's
// goroutine, as the listener does.
func rescanStream(reg *finalizer.Registry, n int) ([]listener.Run, *atomic.Int32) {
	retained := make([]listener.Run, n)
	for i := range retained {
		retained[i] = idleRun(i)
	}
	rescans := new(atomic.Int32)
	reg.SetRescan(func() {
		rescans.Add(1)
		go func() {
			for _, run := range retained {
				if !reg.Known(run.RunID) {
					reg.Discovered(run)
				}
			}
		}()
	})
	return retained, rescans
}
