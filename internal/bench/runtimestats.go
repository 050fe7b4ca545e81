package bench

import (
	"math"
	"runtime/metrics"
)

// runtimeStats are the Go runtime's figures that bear on a phase's
// latency, read at its start and at its end (runtime/metrics): the
// collections, the CPU their marking took, how long goroutines waited,
// runnable, for a processor, and the bytes allocated (what paces the
// collections).
type runtimeStats struct {
	samples []metrics.Sample
}

func newRuntimeStats() *runtimeStats {
	return &runtimeStats{samples: []metrics.Sample{
		{Name: "/gc/cycles/total:gc-cycles"},
		{Name: "/cpu/classes/gc/mark/assist:cpu-seconds"},
		{Name: "/cpu/classes/gc/mark/dedicated:cpu-seconds"},
		{Name: "/cpu/classes/gc/mark/idle:cpu-seconds"},
		{Name: "/sched/latencies:seconds"},
		{Name: "/gc/heap/allocs:bytes"},
		{Name: "/gc/heap/allocs:objects"},
	}}
}

// runtimeReading is one reading of runtimeStats.
type runtimeReading struct {
	cycles  uint64
	markS   float64 // CPU seconds of marking: assists, background and idle workers
	sched   *metrics.Float64Histogram
	allocs  uint64 // bytes allocated on the heap since the process began
	objects uint64 // heap objects allocated since the process began
}

func (s *runtimeStats) read() runtimeReading {
	metrics.Read(s.samples)
	var r runtimeReading
	if v := s.samples[0].Value; v.Kind() == metrics.KindUint64 {
		r.cycles = v.Uint64()
	}
	for _, x := range s.samples[1:4] {
		if x.Value.Kind() == metrics.KindFloat64 {
			r.markS += x.Value.Float64()
		}
	}
	if v := s.samples[4].Value; v.Kind() == metrics.KindFloat64Histogram {
		h := v.Float64Histogram()
		r.sched = &metrics.Float64Histogram{Counts: append([]uint64(nil), h.Counts...), Buckets: h.Buckets}
	}
	if v := s.samples[5].Value; v.Kind() == metrics.KindUint64 {
		r.allocs = v.Uint64()
	}
	if v := s.samples[6].Value; v.Kind() == metrics.KindUint64 {
		r.objects = v.Uint64()
	}
	return r
}

// schedQuantile returns the q quantile, in seconds, of the scheduling
// latencies between two readings (the upper bound of its bucket), or 0.
func schedQuantile(a, b runtimeReading, q float64) float64 {
	if a.sched == nil || b.sched == nil || len(a.sched.Counts) != len(b.sched.Counts) {
		return 0
	}
	var total uint64
	diff := make([]uint64, len(b.sched.Counts))
	for i := range diff {
		diff[i] = b.sched.Counts[i] - a.sched.Counts[i]
		total += diff[i]
	}
	if total == 0 {
		return 0
	}
	want := uint64(math.Ceil(q * float64(total)))
	var seen uint64
	for i, c := range diff {
		if seen += c; seen >= want {
			if up := b.sched.Buckets[i+1]; !math.IsInf(up, 1) {
				return up
			}
			return b.sched.Buckets[i]
		}
	}
	return 0
}
