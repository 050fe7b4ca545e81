package ownership

import (
	"fmt"
	"runtime"
	"testing"
	"time"

	"github.com/finalizer-dev/finalizer/control"
	"github.com/finalizer-dev/finalizer/internal/heaptest"
)

// The held advances of a table are a chain, one per feeder: each feeder's
// newest is found, replaced by a newer one only, dropped alone, and
// forgotten once reached long ago, whatever its place in the chain.
func TestHeldChainPerTable(t *testing.T) {
	w := New(Options{Forget: time.Hour})
	hour := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	now := time.Now()
	adv := func(table, feeder string, until time.Time) control.Advance {
		return control.Advance{Table: table, QueryID: feeder, FinalizedUntil: until}
	}
	for _, f := range []string{"a", "b", "c"} {
		w.hold(adv("t", f, hour), now)
	}
	w.hold(adv("u", "a", hour), now)
	w.hold(adv("t", "b", hour.Add(time.Hour)), now)  // newer: replaces
	w.hold(adv("t", "c", hour.Add(-time.Hour)), now) // older: ignored
	until := func(table, feeder string) time.Time {
		w.mu.Lock()
		defer w.mu.Unlock()
		if h := w.heldOf(table, feeder); h != nil {
			return h.a.FinalizedUntil
		}
		return time.Time{}
	}
	for _, c := range []struct {
		table, feeder string
		want          time.Time
	}{{"t", "a", hour}, {"t", "b", hour.Add(time.Hour)}, {"t", "c", hour}, {"u", "a", hour}, {"u", "b", time.Time{}}} {
		if got := until(c.table, c.feeder); !got.Equal(c.want) {
			t.Errorf("held %s/%s = %v, want %v", c.table, c.feeder, got, c.want)
		}
	}
	// An announcement of t at hour reaches a and c, not b.
	w.Observed("t", hour)
	w.mu.Lock()
	ra, rb, rc := w.heldOf("t", "a").reached, w.heldOf("t", "b").reached, w.heldOf("t", "c").reached
	w.dropLocked("t", "b") // the middle one
	w.mu.Unlock()
	if !ra || rb || !rc {
		t.Errorf("reached a, b, c = %v, %v, %v; want true, false, true", ra, rb, rc)
	}
	if !until("t", "b").IsZero() || !until("t", "a").Equal(hour) || !until("t", "c").Equal(hour) {
		t.Error("dropping b changed the others")
	}
	// Forget drops what was reached before the cut, wherever it is.
	w.mu.Lock()
	w.heldOf("t", "a").at = now.Add(-2 * time.Hour).UnixNano()
	w.heldOf("u", "a").at = now.Add(-2 * time.Hour).UnixNano()
	w.heldOf("u", "a").reached = true
	w.mu.Unlock()
	w.forget()
	if !until("t", "a").IsZero() || !until("t", "c").Equal(hour) || !until("u", "a").IsZero() {
		t.Errorf("after forget: t/a %v, t/c %v, u/a %v; want zero, %v, zero", until("t", "a"), until("t", "c"), until("u", "a"), hour)
	}
	w.mu.Lock()
	_, hasU := w.held["u"]
	w.mu.Unlock()
	if hasU {
		t.Error("a table whose every held advance was forgotten is still in the map")
	}
	w.Rewound("t", time.Time{})
	if !until("t", "c").IsZero() {
		t.Error("a rewind left a held advance")
	}
}

// TestHeldMemory bounds what ownership keeps per table of one feeder: a
// map of feeders per table cost about 250 bytes more per tracked run
// (issue 12). The advance is detached already (as a tracker's is), so its
// buffers are the tracker's and not counted.
func TestHeldMemory(t *testing.T) {
	w := New(Options{})
	const n = 5000
	as := make([]control.Advance, n)
	for i := range as {
		as[i] = control.Advance{Table: fmt.Sprintf("bronze.table_%06d", i), QueryID: "q", RunID: "r",
			FinalizedUntil: time.Unix(1_700_000_000, 0), EndOffset: []byte(`{"lsn":1}`), Sources: []string{"s"}}.Detached()
	}
	now := time.Now()
	per := heaptest.PerItem(n, func() {
		for _, a := range as {
			w.hold(a, now)
		}
	})
	t.Logf("%.0f bytes of heap per held table", per)
	// 300 until the advance carried its rewind guard (8 bytes, ADR 0019
	// addendum of 2026-12-06), which takes a held advance from the
	// 208-byte size class to the 224-byte one.
	if per > 316 {
		t.Errorf("ownership holds %.0f bytes per table: want at most 316", per)
	}
	runtime.KeepAlive(as)
	runtime.KeepAlive(w)
}
