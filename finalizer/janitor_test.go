package finalizer_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/finalizer-dev/finalizer/finalizer"
	"github.com/finalizer-dev/finalizer/listener"
	"github.com/finalizer-dev/finalizer/progress"
)

// hookCore calls on for every log entry, synchronously, on the logging
// goroutine: a test runs its step at an exact point of the code it logs.
type hookCore struct {
	on func(zapcore.Entry, []zapcore.Field)
}

func (h hookCore) Enabled(zapcore.Level) bool        { return true }
func (h hookCore) With([]zapcore.Field) zapcore.Core { return h }
func (h hookCore) Sync() error                       { return nil }
func (h hookCore) Check(e zapcore.Entry, ce *zapcore.CheckedEntry) *zapcore.CheckedEntry {
	return ce.AddCore(e, h)
}
func (h hookCore) Write(e zapcore.Entry, f []zapcore.Field) error {
	h.on(e, f)
	return nil
}

func field(fs []zapcore.Field, key string) string {
	for _, f := range fs {
		if f.Key == key {
			return f.String
		}
	}
	return ""
}

// Issue 18, bug 5: the janitor stops the tracker it saw expired, never one
// that replaced it in between. Two trackers expire; while the janitor
// stops the first (table a), the second's run terminates and is tracked
// anew (a retried `finalizer track`). The fresh tracker must keep working.
func TestJanitorStopsOnlyTheTrackerItSaw(t *testing.T) {
	clock := newFakeClock(utc("2026-09-28T15:00:00Z"))
	store, bus := newFakeStore(), newFakeBus()
	var reg *finalizer.Registry
	replaced := make(chan struct{})
	hook := func(e zapcore.Entry, fs []zapcore.Field) {
		if !strings.Contains(e.Message, "silent for too long") || field(fs, "run_id") != runA {
			return
		}
		defer close(replaced)
		bus.Publish(terminated(runB))
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if _, err := reg.Join(ctx, runB); err != nil {
			t.Errorf("join the old tracker of run B: %v", err)
		}
		if ok, err := reg.Track(ctx, finalizer.Request{QueryID: queryA, RunID: runB, Table: "b", Spec: hourSpec(t)}); err != nil || !ok {
			t.Errorf("track run B anew: %v %v", ok, err)
		}
	}
	reg = finalizer.NewRegistry(finalizer.RegistryConfig{Bus: bus, Store: store, Clock: clock,
		StaleAfter: time.Minute, ExpireAfter: time.Hour, Logger: zap.New(hookCore{on: hook})})
	defer reg.Close(context.Background())
	for _, x := range []struct{ run, table string }{{runA, "a"}, {runB, "b"}} {
		if _, err := reg.Track(context.Background(), finalizer.Request{QueryID: queryA, RunID: x.run, Table: x.table, Spec: hourSpec(t)}); err != nil {
			t.Fatal(err)
		}
	}
	eventually(t, "janitor armed", func() bool { return clock.Waiting() == 1 })
	clock.Advance(2 * time.Hour)
	<-replaced
	eventually(t, "janitor re-armed", func() bool { return clock.Waiting() == 1 })
	bus.Publish(cdcProgress(runB, "2026-09-28T14:05:00"))
	eventually(t, "the fresh tracker of run B writes", func() bool { return store.Verdict("b").Equal(utc("2026-09-28T14:00:00Z")) })
}

// An expired run is stopped, not forgotten: a run silent past ExpireAfter
// (a batch that ran longer, a partition between the driver and NATS) that
// speaks again is tracked again, into the same tables, declarative and
// explicit alike. Before, the expiry was remembered as the run's end and
// every later event of the live run was dropped unparsed until a restart:
// a silent "not yet", with no tracker left to be shown stale.
func TestExpiredRunThatSpeaksAgainIsTrackedAgain(t *testing.T) {
	clock := newFakeClock(utc("2026-09-28T15:00:00Z"))
	store, bus := newFakeStore(), newFakeBus()
	tracks := &fakeTracks{}
	reg := finalizer.NewRegistry(finalizer.RegistryConfig{Bus: bus, Store: store, Clock: clock, Tracks: tracks,
		Rules:      []finalizer.Rule{{Table: "rule", Query: "orders", Spec: hourSpec(t)}},
		StaleAfter: time.Minute, ExpireAfter: time.Hour, Logger: zap.NewNop()})
	defer reg.Close(context.Background())
	trackBothAndExpire(t, reg, clock, store, finalizer.Request{QueryID: queryA, RunID: runA, Table: "explicit", Spec: hourSpec(t), Explicit: true})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if res, err := reg.Join(ctx, runA); err != nil || res.Done || !strings.Contains(res.Stopped, "expired") {
		t.Fatalf("join = %+v, %v; want expired", res, err)
	}
	if reg.Known(runA) {
		t.Fatal("an expired run is known: its next event would be dropped unparsed")
	}
	// The run speaks again, with an idle event (no name) and a progress.
	reg.Discovered(listener.Run{QueryID: queryA, RunID: runA, Kind: progress.KindIdle, Event: idle(runA)})
	eventually(t, "tracked again into both tables", func() bool { return len(reg.Status()) == 2 })
	q := cdcProgress(runA, "2026-09-28T14:05:00")
	q.Name = "orders"
	bus.Publish(q)
	for _, table := range []string{"rule", "explicit"} {
		eventually(t, "the progress after the expiry applied to "+table, func() bool { return store.Verdict(table).Equal(utc("2026-09-28T14:00:00Z")) })
	}
	tracks.mu.Lock()
	saved := len(tracks.saved)
	tracks.mu.Unlock()
	if saved < 2 {
		t.Fatalf("the explicit track was saved %d times; want it saved again (live again after a restart)", saved)
	}
}

// A `finalizer track` of one table of an expired run does not forget the
// run's other expired tables: the run's next event tracks it again into
// them too.
func TestRetrackOfOneExpiredTableKeepsTheOthers(t *testing.T) {
	clock := newFakeClock(utc("2026-09-28T15:00:00Z"))
	store, bus := newFakeStore(), newFakeBus()
	reg := finalizer.NewRegistry(finalizer.RegistryConfig{Bus: bus, Store: store, Clock: clock,
		Rules:      []finalizer.Rule{{Table: "rule", Query: "orders", Spec: hourSpec(t)}},
		StaleAfter: time.Minute, ExpireAfter: time.Hour, Logger: zap.NewNop()})
	defer reg.Close(context.Background())
	explicit := finalizer.Request{QueryID: queryA, RunID: runA, Table: "explicit", Spec: hourSpec(t), Explicit: true}
	trackBothAndExpire(t, reg, clock, store, explicit)
	if _, err := reg.Track(context.Background(), explicit); err != nil {
		t.Fatal(err)
	}
	if reg.Known(runA) {
		t.Fatal("run known after one of its tables was tracked again: its other expired table is lost")
	}
	q := cdcProgress(runA, "2026-09-28T14:05:00")
	q.Name = "orders"
	bus.Publish(q)
	reg.Discovered(listener.Run{QueryID: queryA, RunID: runA, Name: "orders", Kind: progress.KindProgress, Event: q})
	for _, table := range []string{"rule", "explicit"} {
		eventually(t, "the progress after the expiry applied to "+table, func() bool { return store.Verdict(table).Equal(utc("2026-09-28T14:00:00Z")) })
	}
}

// trackBothAndExpire has runA discovered by reg's rule "rule" (a progress
// of 13:05) and tracked by explicit, waits until both trackers run and the
// rule's table has its first verdict, then moves the clock until both
// have expired. The explicit tracker may take the discovered progress (or
// none) after the clock moved, and then counts its silence from then: the
// clock moves on until both have expired.
func trackBothAndExpire(t *testing.T, reg *finalizer.Registry, clock *fakeClock, store *fakeStore, explicit finalizer.Request) {
	t.Helper()
	p := cdcProgress(runA, "2026-09-28T13:05:00")
	p.Name = "orders"
	reg.Discovered(listener.Run{QueryID: queryA, RunID: runA, Name: "orders", Kind: progress.KindProgress, Event: p})
	if _, err := reg.Track(context.Background(), explicit); err != nil {
		t.Fatal(err)
	}
	eventually(t, "both tracked", func() bool { return len(reg.Status()) == 2 })
	eventually(t, "the first progress applied", func() bool { return store.Verdict("rule").Equal(utc("2026-09-28T13:00:00Z")) })
	eventually(t, "janitor armed", func() bool { return clock.Waiting() == 1 })
	eventually(t, "both expired", func() bool {
		if len(reg.Status()) == 0 && !reg.Known(runA) {
			return true
		}
		clock.Advance(2 * time.Hour)
		return false
	})
}

// A rescan of the stream (after a NATS reconnect, or for runs discovery
// dropped) offers an expired run again with the events it retains, which
// are the ones its trackers had seen before the silence: that does not
// track it again (ADR 0017: its next event does). A rescan that finds a
// newer event (stored after the middle of the silence), or the run's
// termination, does.
func TestRescanTracksAnExpiredRunAgainOnlyForNews(t *testing.T) {
	for _, news := range []string{"stored later", "terminated"} {
		t.Run(news, func(t *testing.T) {
			clock := newFakeClock(utc("2026-09-28T15:00:00Z"))
			store, bus := newFakeStore(), newFakeBus()
			reg := finalizer.NewRegistry(finalizer.RegistryConfig{Bus: bus, Store: store, Clock: clock,
				Rules:      []finalizer.Rule{{Table: "rule", Query: "orders", Spec: hourSpec(t)}},
				StaleAfter: time.Minute, ExpireAfter: time.Hour, Logger: zap.NewNop()})
			defer reg.Close(context.Background())
			trackBothAndExpire(t, reg, clock, store, finalizer.Request{QueryID: queryA, RunID: runA, Table: "explicit", Spec: hourSpec(t), Explicit: true})
			// What the stream retains of it, as a rescan reads it: stored
			// before its silence, or with no storage time.
			for _, stored := range []time.Time{{}, utc("2026-09-28T15:00:00Z")} {
				reg.Discovered(listener.Run{QueryID: queryA, RunID: runA, Name: "orders", Kind: progress.KindProgress, Stored: stored})
			}
			time.Sleep(200 * time.Millisecond)
			if n := len(reg.Status()); n != 0 {
				t.Fatalf("%d trackers after a rescan re-read the expired run's old events; want it left expired", n)
			}
			if reg.Known(runA) {
				t.Fatal("the expired run is known after a rescan: its next event would be dropped")
			}
			run := listener.Run{QueryID: queryA, RunID: runA, Name: "orders", Kind: progress.KindProgress, Stored: clock.Now()}
			if news == "terminated" {
				run = listener.Run{QueryID: queryA, RunID: runA, Kind: progress.KindTerminated, Terminated: true, Stored: utc("2026-09-28T15:00:00Z")}
			}
			reg.Discovered(run)
			eventually(t, "tracked again by the rescan's news", func() bool { return len(reg.Status()) == 2 })
		})
	}
}
