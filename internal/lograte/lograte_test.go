package lograte

import (
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// clock is a fake clock for a Limiter.
type clock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *clock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

// TestFlushSaysALoneBurst: a burst of one class with no later line of the
// class held back all but its first; once its interval has ended, Flush
// returns the count, at the held lines' level, once: the class's next
// Flush and its next line say nothing more of it. A class whose count the
// next line let through said is not flushed, nor one whose interval has
// not ended.
func TestFlushSaysALoneBurst(t *testing.T) {
	c := &clock{now: time.Date(2026, 12, 6, 0, 0, 0, 0, time.UTC)}
	w := New(c.Now, 10*time.Second)
	if ok, n := w.Allow(zapcore.WarnLevel, "refused"); !ok || n != 0 {
		t.Fatalf("first line: %v %d", ok, n)
	}
	for range 1999 {
		if ok, _ := w.Allow(zapcore.WarnLevel, "refused"); ok {
			t.Fatal("a line of the burst let through")
		}
	}
	w.Allow(zapcore.ErrorLevel, "said")
	w.Allow(zapcore.ErrorLevel, "said")
	if held := w.Flush(false); held != nil {
		t.Fatalf("flushed within the interval: %v", held)
	}
	c.Advance(10 * time.Second)
	if ok, n := w.Allow(zapcore.ErrorLevel, "said"); !ok || n != 1 {
		t.Fatalf("the next line of a class: %v %d, want let through with 1", ok, n)
	}
	held := w.Flush(false)
	if len(held) != 1 || held[0] != (Held{Class: "refused", Level: zapcore.WarnLevel, Suppressed: 1999}) {
		t.Fatalf("Flush = %v, want refused, WARN, 1999", held)
	}
	if held := w.Flush(false); held != nil {
		t.Fatalf("flushed twice: %v", held)
	}
	// The flush's line is the class's line of a new interval.
	if ok, _ := w.Allow(zapcore.WarnLevel, "refused"); ok {
		t.Fatal("a line let through in the interval the flush's line opened")
	}
	c.Advance(9 * time.Second)
	if held := w.Flush(false); held != nil {
		t.Fatalf("flushed before the interval ended: %v", held)
	}
	c.Advance(time.Second)
	if held := w.Flush(false); len(held) != 1 || held[0].Suppressed != 1 {
		t.Fatalf("Flush = %v, want the one held since", held)
	}
	c.Advance(time.Hour)
	if ok, n := w.Allow(zapcore.WarnLevel, "refused"); !ok || n != 0 {
		t.Fatalf("the line after the flush: %v %d, want let through with 0", ok, n)
	}
}

// TestReportLogsOneLinePerClass: Report writes one HeldMsg line per class
// with lines to say, at the level they had, with kind, class, suppressed
// and interval; a level the logger does not enable writes nothing.
func TestReportLogsOneLinePerClass(t *testing.T) {
	c := &clock{now: time.Date(2026, 12, 6, 0, 0, 0, 0, time.UTC)}
	w := New(c.Now, 30*time.Second)
	for range 3 {
		w.Allow(zapcore.WarnLevel, "a")
		w.Allow(zapcore.ErrorLevel, "b")
		w.Allow(zapcore.DebugLevel, "c")
	}
	core, logs := observer.New(zapcore.InfoLevel)
	c.Advance(30 * time.Second)
	w.Report(zap.New(core), "test", false)
	w.Report(zap.New(core), "test", false)
	if logs.Len() != 2 {
		t.Fatalf("%d lines, want 2: %v", logs.Len(), logs.All())
	}
	for _, e := range logs.All() {
		m := e.ContextMap()
		want := map[string]zapcore.Level{"a": zapcore.WarnLevel, "b": zapcore.ErrorLevel}[m["class"].(string)]
		if e.Message != HeldMsg || e.Level != want || m["kind"] != "test" || m["suppressed"] != int64(2) || m["interval"] != 30*time.Second {
			t.Errorf("line: %v %v %v", e.Level, e.Message, m)
		}
	}
}

// TestAllowDoesNotAllocate: the hot path stays free of allocations, held
// or let through.
func TestAllowDoesNotAllocate(t *testing.T) {
	c := &clock{now: time.Date(2026, 12, 6, 0, 0, 0, 0, time.UTC)}
	w := New(c.Now, 10*time.Second)
	w.Allow(zapcore.WarnLevel, "x")
	if n := testing.AllocsPerRun(1000, func() { w.Allow(zapcore.WarnLevel, "x") }); n != 0 {
		t.Errorf("Allow held back: %v allocations", n)
	}
	if n := testing.AllocsPerRun(1000, func() { c.Advance(time.Minute); w.Allow(zapcore.WarnLevel, "x") }); n != 0 {
		t.Errorf("Allow let through: %v allocations", n)
	}
}

// TestLoopReportsAndStops: a Loop calls its reports every interval and
// once more at Stop, which waits for its goroutine (goleak checks none is
// left); Stop twice is safe.
func TestLoopReportsAndStops(t *testing.T) {
	calls := make(chan struct{}, 100)
	l := StartLoop(time.Millisecond)
	l.Add(func(bool) { calls <- struct{}{} })
	for range 3 {
		select {
		case <-calls:
		case <-time.After(5 * time.Second):
			t.Fatal("no report")
		}
	}
	l.Stop()
	l.Stop()
	for len(calls) > 0 {
		<-calls
	}
	time.Sleep(5 * time.Millisecond)
	if len(calls) != 0 {
		t.Fatal("a report after Stop")
	}

	// A limiter's lone burst, said by the loop's last round at Stop.
	c := &clock{now: time.Date(2026, 12, 6, 0, 0, 0, 0, time.UTC)}
	w := New(c.Now, 10*time.Second)
	w.Allow(zapcore.WarnLevel, "lone")
	w.Allow(zapcore.WarnLevel, "lone")
	core, logs := observer.New(zapcore.InfoLevel)
	l = StartLoop(time.Hour)
	l.Add(func(final bool) { w.Report(zap.New(core), "loop", final) })
	c.Advance(10 * time.Second)
	l.Stop()
	if got := logs.FilterMessage(HeldMsg).Len(); got != 1 {
		t.Fatalf("%d held lines after Stop, want 1", got)
	}

	// A burst cut off by the stop, its interval not ended: the last
	// round says it all the same, once.
	w.Allow(zapcore.ErrorLevel, "cut")
	w.Allow(zapcore.ErrorLevel, "cut")
	w.Allow(zapcore.ErrorLevel, "cut")
	core, logs = observer.New(zapcore.InfoLevel)
	l = StartLoop(time.Hour)
	l.Add(func(final bool) { w.Report(zap.New(core), "loop", final) })
	l.Stop()
	held := logs.FilterMessage(HeldMsg).All()
	if len(held) != 1 || held[0].Level != zapcore.ErrorLevel || held[0].ContextMap()["suppressed"] != int64(2) || held[0].ContextMap()["class"] != "cut" {
		t.Fatalf("held lines after a stop within the interval: %v, want one ERROR line of class cut with 2", held)
	}
	if again := w.Flush(true); again != nil {
		t.Fatalf("said twice: %v", again)
	}
}

// TestFlushLeavesAGoingBurstToItsNextLine: a sparse burst that goes on
// (a line a second, interval 10 s) is not summarised by Flush while its
// lines keep coming: its next line, due within the interval, says the
// count with the subject and error a summary lacks. Once it has been
// quiet for an interval, Flush says what is left.
func TestFlushLeavesAGoingBurstToItsNextLine(t *testing.T) {
	c := &clock{now: time.Date(2026, 12, 6, 0, 0, 0, 0, time.UTC)}
	w := New(c.Now, 10*time.Second)
	let := 0
	for i := range 25 {
		if ok, n := w.Allow(zapcore.WarnLevel, "sparse"); ok {
			let++
			if i > 0 && n != 9 {
				t.Errorf("line at %d s carries %d, want the 9 held since the last", i, n)
			}
		}
		if held := w.Flush(false); held != nil {
			t.Fatalf("at %d s, the burst going on: Flush = %v, want nothing", i, held)
		}
		c.Advance(time.Second)
	}
	if let != 3 {
		t.Errorf("%d lines let through in 25 s, want 3 (0, 10, 20 s)", let)
	}
	c.Advance(10 * time.Second)
	if held := w.Flush(false); len(held) != 1 || held[0].Suppressed != 4 {
		t.Fatalf("quiet for an interval: Flush = %v, want the 4 held since the line at 20 s", held)
	}
}
