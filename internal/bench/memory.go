package bench

import (
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"runtime/pprof"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// memSample is the process's memory at one moment, after a full GC that
// returned what it could to the operating system.
type memSample struct {
	rss, heap, stack uint64
	goroutines       int
}

func sampleMemory() memSample {
	runtime.GC()
	debug.FreeOSMemory()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return memSample{rss: residentBytes(), heap: ms.HeapInuse, stack: ms.StackInuse, goroutines: runtime.NumGoroutine()}
}

// liveHeap returns the heap in use after a full GC.
func liveHeap() uint64 {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc
}

// residentBytes returns the process's resident set size, 0 when unknown.
func residentBytes() uint64 {
	b, err := os.ReadFile("/proc/self/statm")
	if err != nil {
		return 0
	}
	f := strings.Fields(string(b))
	if len(f) < 2 {
		return 0
	}
	pages, err := strconv.ParseUint(f[1], 10, 64)
	if err != nil {
		return 0
	}
	return pages * uint64(os.Getpagesize())
}

// loadAverage returns the 1-minute load average, 0 when unknown.
func loadAverage() float64 {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return 0
	}
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return 0
	}
	v, _ := strconv.ParseFloat(f[0], 64)
	return v
}

// metricValue returns the sum of the samples of the counter or gauge name
// in g, 0 when there is none.
func metricValue(g prometheus.Gatherer, name string) float64 {
	mfs, err := g.Gather()
	if err != nil {
		return 0
	}
	sum := 0.0
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			sum += m.GetCounter().GetValue() + m.GetGauge().GetValue()
		}
	}
	return sum
}

// peakHeap, when dir is set, writes a heap profile to dir/name each time a
// collection finds more live heap than any before it, until the returned
// stop is called (safe to call twice): the profile of the highest live heap of the window (a
// heap profile shows what the last collection found live). The resident
// set without a forced GC follows the highest heap of the window, not the
// heap at its end: what the runs' first progresses hold while in flight
// shows there and not in heap.pprof.
func peakHeap(dir, name string) (stop func() (peak uint64)) {
	if dir == "" {
		return func() uint64 { return 0 }
	}
	s := []metrics.Sample{{Name: "/gc/heap/live:bytes"}, {Name: "/gc/cycles/total:gc-cycles"}}
	quit, done := make(chan struct{}), make(chan struct{})
	var peak uint64
	go func() {
		defer close(done)
		t := time.NewTicker(20 * time.Millisecond)
		defer t.Stop()
		var cycles uint64
		for {
			select {
			case <-quit:
				return
			case <-t.C:
			}
			metrics.Read(s)
			live, c := s[0].Value.Uint64(), s[1].Value.Uint64()
			if c == cycles || live <= peak {
				continue
			}
			cycles, peak = c, live
			if f, err := os.Create(filepath.Join(dir, name)); err == nil {
				_ = pprof.WriteHeapProfile(f)
				_ = f.Close()
			}
		}
	}()
	var once sync.Once
	return func() uint64 {
		once.Do(func() { close(quit); <-done })
		return peak
	}
}
