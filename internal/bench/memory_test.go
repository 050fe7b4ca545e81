package bench

import (
	"os"
	"path/filepath"
	"runtime"
	"testing"
	"time"
)

// peakHeap writes the profile of the highest live heap it saw, and its
// stop is safe twice; without a directory it does nothing.
func TestPeakHeap(t *testing.T) {
	if peakHeap("", "x")() != 0 {
		t.Error("peakHeap without a directory measured something")
	}
	dir := t.TempDir()
	stop := peakHeap(dir, "heap-peak.pprof")
	keep := make([][]byte, 0, 64)
	for range 64 {
		keep = append(keep, make([]byte, 64<<10))
	}
	runtime.GC()
	time.Sleep(100 * time.Millisecond)
	peak := stop()
	_ = stop()
	runtime.KeepAlive(keep)
	if peak < 4<<20 {
		t.Errorf("peak live heap %d bytes, want at least the 4 MiB held", peak)
	}
	if fi, err := os.Stat(filepath.Join(dir, "heap-peak.pprof")); err != nil || fi.Size() == 0 {
		t.Errorf("no heap-peak.pprof: %v", err)
	}
}
