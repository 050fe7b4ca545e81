package bench

import (
	"math"
	"runtime/metrics"
	"testing"
)

// The scheduling latency quantile is taken from the difference of two
// histogram readings, as the upper bound of its bucket.
func TestSchedQuantile(t *testing.T) {
	buckets := []float64{0, 0.001, 0.01, 0.1, math.Inf(1)}
	at := func(counts ...uint64) runtimeReading {
		return runtimeReading{sched: &metrics.Float64Histogram{Counts: counts, Buckets: buckets}}
	}
	a := at(100, 50, 0, 0)
	b := at(100+98, 50+1, 0+1, 0) // 100 waits in the phase: 98 under 1 ms, 1 under 10 ms, 1 under 100 ms
	for _, c := range []struct{ q, want float64 }{{0.5, 0.001}, {0.98, 0.001}, {0.99, 0.01}, {0.999, 0.1}, {1, 0.1}} {
		if got := schedQuantile(a, b, c.q); got != c.want {
			t.Errorf("q %v: %v, want %v", c.q, got, c.want)
		}
	}
	if got := schedQuantile(a, a, 0.99); got != 0 {
		t.Errorf("no waits: %v, want 0", got)
	}
	r := newRuntimeStats()
	if x, y := r.read(), r.read(); y.cycles < x.cycles || x.sched == nil {
		t.Errorf("readings: %+v then %+v", x, y)
	}
}
