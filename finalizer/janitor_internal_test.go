package finalizer

import (
	"context"
	"os"
	"runtime"
	"strconv"
	"sync/atomic"
	"testing"
	"time"
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

// The sweep yields its P every sweepChunk trackers: at 100,000 runs it
// is 20-40 ms of CPU, which in one stretch kept the trackers' steps woken
// on its P waiting behind it (BENCHMARKS.md, "The latency tail (eighth
// pass)").
func TestSweepYieldsEveryChunk(t *testing.T) {
	const n = 9000
	r, _ := trackRuns(t, n, false)
	defer func() { _ = r.Close(context.Background()) }()
	yields := 0
	r.sweepYielding(func() { yields++ })
	// The n runs and trackRuns' first: a yield every entriesChunk entries
	// copied, then every sweepChunk trackers read.
	if want := (n+1)/entriesChunk + (n+1)/sweepChunk; yields != want {
		t.Errorf("a sweep of %d trackers yielded %d times: want %d, one every %d entries copied and every %d trackers read", n+1, yields, want, entriesChunk, sweepChunk)
	}
}

// BenchmarkSweep measures one sweep of the janitor over 100,000 tracked
// runs (FINALIZER_SWEEP_RUNS overrides), none stale or expired, and the
// longest stretch it ran without yielding its P (max-stretch-ms: the
// whole sweep before it yielded, "The latency tail (eighth pass)").
func BenchmarkSweep(b *testing.B) {
	n := 100_000
	if v, err := strconv.Atoi(os.Getenv("FINALIZER_SWEEP_RUNS")); err == nil && v > 0 {
		n = v
	}
	r, _ := trackRuns(b, n, false)
	defer func() { _ = r.Close(context.Background()) }()
	var longest time.Duration
	var last time.Time
	yield := func() {
		now := time.Now()
		longest = max(longest, now.Sub(last))
		last = now
		runtime.Gosched()
	}
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		last = time.Now()
		r.sweepYielding(yield)
		longest = max(longest, time.Since(last))
	}
	b.ReportMetric(float64(longest.Microseconds())/1000, "max-stretch-ms")
}

// BenchmarkSweepWake measures what a sweep of 100,000 trackers
// (FINALIZER_SWEEP_RUNS overrides) costs a goroutine that becomes
// runnable on its processor: with one P, a goroutine sleeping 200 µs at a
// time while the sweep runs, its worst lateness (max-wake-ms). A sweep
// that does not yield keeps it waiting until the runtime preempts the
// sweep (10 ms), as it kept the trackers' steps woken on its P in the
// latency phase (BENCHMARKS.md, "The latency tail (eighth pass)").
func BenchmarkSweepWake(b *testing.B) {
	n := 100_000
	if v, err := strconv.Atoi(os.Getenv("FINALIZER_SWEEP_RUNS")); err == nil && v > 0 {
		n = v
	}
	r, _ := trackRuns(b, n, false)
	defer func() { _ = r.Close(context.Background()) }()
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	const nap = 200 * time.Microsecond
	var worst time.Duration
	b.ResetTimer()
	for b.Loop() {
		var done atomic.Bool
		go func() {
			r.sweep()
			done.Store(true)
		}()
		runtime.Gosched() // let the sweep start
		for !done.Load() {
			t := time.Now()
			time.Sleep(nap)
			worst = max(worst, time.Since(t)-nap)
		}
	}
	b.ReportMetric(float64(worst.Microseconds())/1000, "max-wake-ms")
}
