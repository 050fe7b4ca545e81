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
type movingStore struct{}

func (movingStore) Advance(_ context.Context, a control.Advance) (control.Verdict, bool, error) {
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
	spec, err := progress.ParseSpec(progress.SpecOptions{})
	if err != nil {
		b.Fatal(err)
	}
	for _, c := range []struct {
		name string
		step time.Duration // commit time between events
	}{{"same_period", time.Millisecond}, {"crossing", time.Hour}} {
		b.Run(c.name, func(b *testing.B) {
			box := listener.NewMailbox()
			tr := newTracker(TrackerConfig{QueryID: "q", RunID: "r", Table: "bronze.orders", Spec: spec, Box: box, Store: movingStore{}})
			// Every commit time in the past, so that no step is held as
			// ahead of the clock.
			start := time.Now().UTC().Add(-time.Duration(b.N+2) * c.step).Truncate(time.Hour)
			evs := make([]*progress.Event, b.N+1)
			for i := range evs {
				ts := start.Add(time.Duration(i) * c.step).Format("2006-01-02T15:04:05.000Z")
				evs[i] = &progress.Event{Kind: progress.KindProgress, QueryID: "q", RunID: "r",
					Timestamp: start.Add(time.Duration(i) * time.Second), BatchID: int64(i),
					Sources: []progress.Source{{Description: "cdc", EndOffset: []byte(`{"lsn":"0x00000027000001a80003","commit_ts":"` + ts + `"}`)}}}
			}
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
