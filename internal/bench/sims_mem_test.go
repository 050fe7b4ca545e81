package bench

import (
	"runtime"
	"testing"
	"time"
)

// TestSimsHeap bounds the live heap of the bench's simulated runs: they
// live in the service's process, and the service's memory limit counts
// them in the live heap it grows by a share of (issue 12). A progress
// template per run held about 3 KiB per run; a template per shape, the
// run's ids, name and subjects, under 1 KiB.
func TestSimsHeap(t *testing.T) {
	const n = 5000
	before := liveHeap()
	sims, err := newSims(n, 0xabcdef01, "spark", "mixed", DefaultPerPeriod)
	if err != nil {
		t.Fatal(err)
	}
	per := (float64(liveHeap()) - float64(before)) / n
	runtime.KeepAlive(sims)
	t.Logf("%.0f bytes of live heap per simulated run", per)
	if per > 1200 {
		t.Errorf("a simulated run holds %.0f bytes: want at most 1,200", per)
	}
}

func BenchmarkProgressDocument(b *testing.B) {
	sims, err := newSims(4, 1, "spark", "mixed", DefaultPerPeriod)
	if err != nil {
		b.Fatal(err)
	}
	var buf []byte
	at := time.Unix(1_700_000_000, 0)
	for i := 0; b.Loop(); i++ {
		buf = sims[i%4].progress(buf, int64(i), at)
	}
}
