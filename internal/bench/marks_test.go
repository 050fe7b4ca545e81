package bench

import (
	"context"
	"runtime"
	"testing"
	"time"
)

// A collection that completes is seen as a mark between two looks, and no
// mark is open after it; runtime.GC returns after the mark and its sweep.
func TestMarkWatchSeesACollection(t *testing.T) {
	w := startMarkWatch(context.Background())
	runtime.GC()
	if w.marking() {
		t.Fatal("marking after runtime.GC returned")
	}
	marks := w.finish()
	for _, m := range marks {
		if m.to.Before(m.from) {
			t.Errorf("mark %v ends before it starts", m)
		}
	}
}

// A crossing meets a mark when its flight and the mark share an instant.
func TestOverlaps(t *testing.T) {
	t0 := time.Date(2026, 12, 2, 13, 0, 0, 0, time.UTC)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	marks := []interval{{at(100), at(200)}, {at(500), at(900)}}
	for _, c := range []struct {
		from, to int
		want     bool
	}{{0, 99, false}, {0, 100, true}, {150, 160, true}, {200, 300, true}, {201, 499, false}, {450, 1000, true}, {901, 950, false}} {
		if got := overlaps(marks, at(c.from), at(c.to)); got != c.want {
			t.Errorf("[%d, %d]: %v, want %v", c.from, c.to, got, c.want)
		}
	}
}
