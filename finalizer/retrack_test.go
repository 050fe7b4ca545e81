package finalizer_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/finalizer-dev/finalizer/finalizer"
	"github.com/finalizer-dev/finalizer/progress"
)

// A run tracked, terminated and tracked again into the same table, over
// and over, while a second run of the same query supersedes it on another
// table and events keep arriving on other goroutines: each tracking is a
// new registry entry (its tracker, mailbox and subscription embedded, its
// runs and queries lists of one backed by the entry itself), and none of
// an earlier entry's state may leak into a later one (issue 12, fifth
// pass). Every round's verdict is the round's own, the run ends done each
// time, and nothing is left tracked. Run with -race.
func TestRunTrackedAgainAfterItsEnd(t *testing.T) {
	r := newRig(t)
	ctx := context.Background()
	base := time.Date(2026, 9, 28, 0, 0, 0, 0, time.UTC)
	// cdcProgress numbers its events from a counter of its own: built
	// here, not on the noise's goroutine.
	var noise [3]*progress.Event
	for i := range noise {
		noise[i] = cdcProgress(runB, base.Add(time.Duration(i)*time.Minute).Format("2006-01-02T15:04:05"))
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	// Noise: idle events and repeats for both runs while they come and
	// go (an idle event of a run between its trackers is dropped).
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			r.bus.Publish(&progress.Event{Kind: progress.KindIdle, QueryID: queryA, RunID: runA, BatchID: -1, Timestamp: base})
			r.bus.Publish(noise[i%3])
			time.Sleep(50 * time.Microsecond)
		}
	}()
	for round := range 20 { // periods before the rig's clock (2026-09-29T00:00)
		for _, run := range []string{runA, runB} {
			table := "t.a"
			if run == runB {
				table = fmt.Sprintf("t.b%d", round%2) // runB moves between two tables
			}
			ok, err := r.reg.Track(ctx, finalizer.Request{QueryID: queryA, RunID: run, Table: table, Spec: hourSpec(t)})
			if err != nil || !ok {
				t.Fatalf("round %d: track %s: %v %v", round, run, ok, err)
			}
		}
		at := base.Add(time.Duration(round+1) * time.Hour).Add(5 * time.Minute)
		r.bus.Publish(cdcProgress(runA, at.Format("2006-01-02T15:04:05")))
		r.bus.Publish(terminated(runA))
		if res := r.join(t, runA); !res.Done {
			t.Fatalf("round %d: run A %+v, want done", round, res)
		}
		want := at.Truncate(time.Hour)
		if v := r.store.Verdict("t.a"); !v.Equal(want) {
			t.Fatalf("round %d: t.a at %v, want %v", round, v, want)
		}
		r.bus.Publish(terminated(runB))
		if res := r.join(t, runB); res.LastError != "" {
			t.Fatalf("round %d: run B %+v", round, res)
		}
	}
	// A new run of the query into t.a supersedes the old one there: the
	// query's list of one becomes two, then one again (a copy each time).
	for round, pair := range [][2]string{{runA, runB}, {runB, runA}} {
		old, next := pair[0], pair[1]
		for _, run := range pair {
			if ok, err := r.reg.Track(ctx, finalizer.Request{QueryID: queryA, RunID: run, Table: "t.a", Spec: hourSpec(t)}); err != nil || !ok {
				t.Fatalf("supersede %d: track %s: %v %v", round, run, ok, err)
			}
		}
		// The run that started later supersedes the other (noteStart).
		started := func(run string, at time.Time) *progress.Event {
			return &progress.Event{Kind: progress.KindStarted, QueryID: queryA, RunID: run, BatchID: -1, Timestamp: at}
		}
		now := time.Now().UTC()
		r.bus.Publish(started(old, now.Add(-time.Minute)))
		r.bus.Publish(started(next, now))
		if res := r.join(t, old); res.Done || res.Stopped == "" {
			t.Fatalf("supersede %d: the old run %+v, want stopped", round, res)
		}
		at := base.Add(time.Duration(21+round) * time.Hour).Add(5 * time.Minute)
		r.bus.Publish(cdcProgress(next, at.Format("2006-01-02T15:04:05")))
		r.bus.Publish(terminated(next))
		if res := r.join(t, next); !res.Done {
			t.Fatalf("supersede %d: the new run %+v, want done", round, res)
		}
		if v, want := r.store.Verdict("t.a"), at.Truncate(time.Hour); !v.Equal(want) {
			t.Fatalf("supersede %d: t.a at %v, want %v", round, v, want)
		}
	}
	close(stop)
	wg.Wait()
	eventually(t, "nothing tracked", func() bool { return r.reg.Tracked() == 0 })
	for _, st := range r.reg.Status() {
		if !st.Done {
			t.Errorf("left running: %+v", st)
		}
	}
}
