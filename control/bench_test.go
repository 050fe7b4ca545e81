package control

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/finalizer-dev/finalizer/internal/cputime"
)

// BenchmarkAdvance measures one Advance round trip: "moving" moves the
// verdict every time (an UPDATE and a NOTIFY), "noop" offers the standing
// period again (the statement finds nothing to do).
func BenchmarkAdvance(b *testing.B) {
	s, _ := newStore(b, Options{})
	ctx := context.Background()
	b.Run("moving", func(b *testing.B) {
		base := at(0, 0)
		for i := 0; b.Loop(); i++ {
			_, moved, err := s.Advance(ctx, Advance{Table: "moving", FinalizedUntil: base.Add(time.Duration(i+1) * time.Minute), BatchID: int64(i)})
			if err != nil {
				b.Fatal(err)
			}
			if !moved {
				b.Fatal("did not move")
			}
		}
	})
	b.Run("noop", func(b *testing.B) {
		if _, _, err := s.Advance(ctx, Advance{Table: "noop", FinalizedUntil: at(14, 0)}); err != nil {
			b.Fatal(err)
		}
		for b.Loop() {
			_, moved, err := s.Advance(ctx, Advance{Table: "noop", FinalizedUntil: at(14, 0)})
			if err != nil {
				b.Fatal(err)
			}
			if moved {
				b.Fatal("moved")
			}
		}
	})
}

// BenchmarkAdvanceP50: one Advance moving one table (a single feeder),
// reporting p50 as well as the mean.
func BenchmarkAdvanceP50(b *testing.B) {
	s, _ := newStore(b, Options{})
	ctx := context.Background()
	base := at(0, 0)
	if _, _, err := s.Advance(ctx, Advance{Table: "moving", QueryID: "q", FinalizedUntil: base}); err != nil {
		b.Fatal(err)
	}
	var ds []time.Duration
	for i := 0; b.Loop(); i++ {
		t0 := time.Now()
		_, moved, err := s.Advance(ctx, Advance{Table: "moving", QueryID: "q", FinalizedUntil: base.Add(time.Duration(i+1) * time.Minute), BatchID: int64(i)})
		ds = append(ds, time.Since(t0))
		if err != nil || !moved {
			b.Fatal(err, moved)
		}
	}
	slices.Sort(ds)
	b.ReportMetric(float64(ds[len(ds)/2].Microseconds()), "p50-us")
}

// BenchmarkGroupCommit: one AdvanceBatch moving 1000 single-feeder
// tables (the sole statement), with a burst's provenance (ids, an end
// offset, a source), reporting min and median, and the CPU of this
// process per row (go-cpu-us/row: the group commit's own work, without
// PostgreSQL's; it includes building the advances, about 2 us).
func BenchmarkGroupCommit(b *testing.B) {
	s, _ := newStore(b, Options{})
	ctx := context.Background()
	base := at(0, 0)
	mk := func(i int) []Advance {
		as := make([]Advance, 1000)
		for t := range as {
			until := base.Add(time.Duration(i) * time.Minute)
			as[t] = Advance{Table: fmt.Sprintf("g.t%04d", t), QueryID: fmt.Sprintf("3f1c2a6e-0000-4000-8000-%012d", t),
				RunID: fmt.Sprintf("9a8b7c6d-0000-4000-8000-%012d", t), FinalizedUntil: until, EndTime: until.Add(3 * time.Second), BatchID: int64(i),
				EndOffset: []byte(`{"lsn":"0x00000027000000020007","commit_ts":"2026-12-01T00:01:02.123456"}`),
				Sources:   []string{fmt.Sprintf("SqlServerCdc[dbo.orders_%d]", t)},
				Guard:     KnownRewind(time.Time{})} // guarded, as a tracker's advance is (ADR 0019, 2026-12-06)
		}
		return as
	}
	if _, err := s.AdvanceBatch(ctx, mk(0)); err != nil {
		b.Fatal(err)
	}
	var ds []time.Duration
	cpu0 := cputime.Process()
	for i := 1; b.Loop(); i++ {
		as := mk(i)
		t0 := time.Now()
		res, err := s.AdvanceBatch(ctx, as)
		ds = append(ds, time.Since(t0))
		if err != nil || !res[0].Moved {
			b.Fatal(err)
		}
	}
	cpu := (cputime.Process() - cpu0).Nanoseconds()
	b.ReportMetric(float64(cpu)/1e3/float64(len(ds))/1000, "go-cpu-us/row")
	slices.Sort(ds)
	b.ReportMetric(float64(ds[0].Microseconds())/1000, "min-ms")
	b.ReportMetric(float64(ds[len(ds)/2].Microseconds())/1000, "median-ms")
}
