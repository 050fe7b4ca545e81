package finalizer

import (
	"context"
	"testing"
	"time"

	"github.com/finalizer-dev/finalizer/control"
	"github.com/finalizer-dev/finalizer/listener"
	"github.com/finalizer-dev/finalizer/progress"
)

// movingStore moves every advance at once, in memory: the tracker's own
// work per step, without a database.
type movingStore struct{ writes int }

func (s *movingStore) Advance(_ context.Context, a control.Advance) (control.Verdict, bool, error) {
	s.writes++
	return control.Verdict{Table: a.Table, FinalizedUntil: a.FinalizedUntil, EndTime: a.EndTime, QueryID: a.QueryID,
		RunID: a.RunID, BatchID: a.BatchID}, true, nil
}

// BenchmarkTrackerStep measures one step of a tracker on the hot path
// (issue 12): a parsed progress offered to its mailbox, taken and applied.
// same_period is what five events in six are at the bench's rhythm (the
// candidate is in the period already written: nothing to write);
// crossing writes an advance each step, through a store that moves it in
// memory (the service's goes through the group commit instead). allocs/op
// is what each step adds to the collector's pace.
func BenchmarkTrackerStep(b *testing.B) {
	for _, c := range []struct {
		name string
		step time.Duration // commit time between events
	}{{"same_period", time.Millisecond}, {"crossing", time.Hour}} {
		b.Run(c.name, func(b *testing.B) {
			tr, box, evs := stepRig(b, b.N+1, c.step)
			ctx := context.Background()
			box.Offer(evs[0])
			tr.step(ctx)
			b.ReportAllocs()
			b.ResetTimer()
			for i := 1; i <= b.N; i++ {
				box.Offer(evs[i])
				if tr.step(ctx) {
					b.Fatal("the tracker finished")
				}
			}
			b.StopTimer()
			if tr.pending != nil {
				b.Fatal("a progress was not applied")
			}
		})
	}
}

// stepRig returns a tracker of the default spec (offset:/commit_ts, hour),
// its mailbox and n progress events of consecutive batches whose commit
// times are step apart, all in the past.
func stepRig(tb testing.TB, n int, step time.Duration) (*Tracker, *listener.Mailbox, []*progress.Event) {
	tb.Helper()
	spec, err := progress.ParseSpec(progress.SpecOptions{})
	if err != nil {
		tb.Fatal(err)
	}
	box := listener.NewMailbox()
	tr := newTracker(TrackerConfig{QueryID: "q", RunID: "r", Table: "bronze.orders", Spec: spec, Box: box, Store: &movingStore{}})
	// Every commit time in the past, so that no step is held as ahead of
	// the clock.
	start := time.Now().UTC().Add(-time.Duration(n+2) * step).Truncate(time.Hour)
	evs := make([]*progress.Event, n)
	for i := range evs {
		ts := start.Add(time.Duration(i) * step).Format("2006-01-02T15:04:05.000Z")
		evs[i] = &progress.Event{Kind: progress.KindProgress, QueryID: "q", RunID: "r",
			Timestamp: start.Add(time.Duration(i) * time.Second), BatchID: int64(i),
			Sources: []progress.Source{{Description: "cdc", EndOffset: []byte(`{"lsn":"0x00000027000001a80003","commit_ts":"` + ts + `"}`)}}}
	}
	return tr, box, evs
}

// TestStepInThePeriodAllocatesNothing keeps the step of five events in
// six at the bench's rhythm (a progress whose candidate is in the period
// already written) free of allocation: each would add to the collector's
// pace at every event of every run (issue 12). It allocated 16 bytes (the
// offset pointer's tokens) before.
func TestStepInThePeriodAllocatesNothing(t *testing.T) {
	tr, box, evs := stepRig(t, 200, time.Millisecond)
	ctx := context.Background()
	box.Offer(evs[0])
	tr.step(ctx)
	i := 0
	n := testing.AllocsPerRun(100, func() {
		i++
		box.Offer(evs[i])
		tr.step(ctx)
	})
	if n != 0 {
		t.Errorf("a step in the period already written allocates %.1f times; want none", n)
	}
	if tr.pending != nil {
		t.Error("a progress was not applied")
	}
	if got := tr.cfg.Store.(*movingStore).writes; got != 1 {
		t.Errorf("%d advances written, want 1 (the first progress's period)", got)
	}
}
