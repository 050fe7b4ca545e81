package lograte

import (
	"testing"
	"time"

	"go.uber.org/zap/zapcore"
)

// TestBurstFlushSaysALoneBurst (the registry's sampler, NewBurst): a burst of a class over the sampler's
// burst, with no later line of the class, is said by flush once its
// interval has ended (the count, at the held lines' level), once; the
// flush's line is the first of a new interval's burst; a class whose next
// line said its count, or still in its interval, is not flushed.
func TestBurstFlushSaysALoneBurst(t *testing.T) {
	c := &clock{now: time.Date(2026, 12, 6, 0, 0, 0, 0, time.UTC)}
	s := NewBurst(c.Now, 10*time.Second, 3)
	for i := range 500 {
		if ok, _ := s.Allow(zapcore.WarnLevel, "no-time"); ok != (i < 3) {
			t.Fatalf("line %d: let through %v", i, ok)
		}
	}
	for range 5 {
		s.Allow(zapcore.InfoLevel, "said")
	}
	if held := s.Flush(false); held != nil {
		t.Fatalf("flushed within the interval: %v", held)
	}
	c.Advance(10 * time.Second)
	if ok, n := s.Allow(zapcore.InfoLevel, "said"); !ok || n != 2 {
		t.Fatalf("the next line of a class: %v %d, want let through with 2", ok, n)
	}
	held := s.Flush(false)
	if len(held) != 1 || held[0] != (Held{Class: "no-time", Level: zapcore.WarnLevel, Suppressed: 497}) {
		t.Fatalf("flush = %v, want no-time, WARN, 497", held)
	}
	if held := s.Flush(false); held != nil {
		t.Fatalf("flushed twice: %v", held)
	}
	// The flush's line took one of the new interval's three.
	for i := range 3 {
		if ok, _ := s.Allow(zapcore.WarnLevel, "no-time"); ok != (i < 2) {
			t.Fatalf("line %d after the flush: let through %v", i, ok)
		}
	}
	c.Advance(10 * time.Second)
	if held := s.Flush(false); len(held) != 1 || held[0].Suppressed != 1 {
		t.Fatalf("flush = %v, want the one held since", held)
	}
	// At the janitor's stop (all), a burst within its interval is said.
	for range 5 {
		s.Allow(zapcore.WarnLevel, "cut")
	}
	if held := s.Flush(false); held != nil {
		t.Fatalf("flushed within the interval: %v", held)
	}
	if held := s.Flush(true); len(held) != 1 || held[0] != (Held{Class: "cut", Level: zapcore.WarnLevel, Suppressed: 2}) {
		t.Fatalf("flush(all) = %v, want cut, WARN, 2", held)
	}
}

// TestBurstAllowDoesNotAllocate: the hot path stays free of
// allocations.
func TestBurstAllowDoesNotAllocate(t *testing.T) {
	c := &clock{now: time.Date(2026, 12, 6, 0, 0, 0, 0, time.UTC)}
	s := NewBurst(c.Now, 10*time.Second, 3)
	s.Allow(zapcore.InfoLevel, "x")
	if n := testing.AllocsPerRun(1000, func() { s.Allow(zapcore.InfoLevel, "x") }); n != 0 {
		t.Errorf("allow: %v allocations", n)
	}
}

// TestBurstFlushLeavesAGoingKindToItsNextLine: a kind that keeps
// logging past its burst is not summarised while it goes on; its next
// interval's first line says the count. Quiet for an interval, the rest
// is flushed.
func TestBurstFlushLeavesAGoingKindToItsNextLine(t *testing.T) {
	c := &clock{now: time.Date(2026, 12, 6, 0, 0, 0, 0, time.UTC)}
	s := NewBurst(c.Now, 10*time.Second, 3)
	for i := range 25 {
		ok, n := s.Allow(zapcore.InfoLevel, "tracking")
		if i == 10 || i == 20 {
			if !ok || n != 7 {
				t.Errorf("first line of the interval at %d s: %v with %d, want let through with 7", i, ok, n)
			}
		}
		if held := s.Flush(false); held != nil {
			t.Fatalf("at %d s, the kind logging on: flush = %v, want nothing", i, held)
		}
		c.Advance(time.Second)
	}
	c.Advance(10 * time.Second)
	if held := s.Flush(false); len(held) != 1 || held[0].Suppressed != 2 {
		t.Fatalf("quiet for an interval: flush = %v, want the 2 held since", held)
	}
}
