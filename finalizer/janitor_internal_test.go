package finalizer

import (
	"context"
	"os"
	"strconv"
	"testing"
)

// The janitor's sweep reads each tracker's activity, not its status: with
// no run expired it allocates the list of entries and nothing per tracker
// (a status per tracker, its spec formatted, and a sort of them all cost
// 0.4 s of CPU every 30 s at 100,000 runs: BENCHMARKS.md "The latency
// tail (seventh pass)").
func TestSweepAllocatesNothingPerTracker(t *testing.T) {
	const n = 2000
	r, _ := trackRuns(t, n, false)
	defer func() { _ = r.Close(context.Background()) }()
	allocs := testing.AllocsPerRun(5, r.sweep)
	if allocs > 8 {
		t.Errorf("a sweep of %d trackers, none expired, made %.0f allocations: want a handful, none per tracker", n, allocs)
	}
}

// BenchmarkSweep measures one sweep of the janitor over 100,000 tracked
// runs (FINALIZER_SWEEP_RUNS overrides), none stale or expired.
func BenchmarkSweep(b *testing.B) {
	n := 100_000
	if v, err := strconv.Atoi(os.Getenv("FINALIZER_SWEEP_RUNS")); err == nil && v > 0 {
		n = v
	}
	r, _ := trackRuns(b, n, false)
	defer func() { _ = r.Close(context.Background()) }()
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		r.sweep()
	}
}
