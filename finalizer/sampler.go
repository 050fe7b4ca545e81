package finalizer

import (
	"sync"
	"time"

	"go.uber.org/zap/zapcore"

	"github.com/finalizer-dev/finalizer/internal/lograte"
)

// Defaults of the log sampler.
const (
	// sampleEvery and sampleBurst: of each kind of line that every run
	// logs in the normal course, at most sampleBurst go out at their level
	// per sampleEvery; the others go to DEBUG. A service of a few runs
	// logs each of them; one of 100,000 logs about one per second per kind.
	sampleEvery = 10 * time.Second
	sampleBurst = 10
)

// logSampler rate-limits log lines by class: up to burst lines per
// interval go through, the next one after the interval says how many did
// not; when none comes, the registry's janitor says it (flush). Safe for
// concurrent use; one is shared by a registry and its trackers.
type logSampler struct {
	now   func() time.Time
	every time.Duration
	burst int

	mu      sync.Mutex
	classes map[string]*sampleClass
}

type sampleClass struct {
	start      time.Time     // of the current interval
	n          int           // lines let through in it
	suppressed int           // lines held back since the last one let through
	level      zapcore.Level // of the lines held back (the last one's)
	seen       time.Time     // of the last line held back
}

func newLogSampler(now func() time.Time, every time.Duration, burst int) *logSampler {
	return &logSampler{now: now, every: every, burst: burst, classes: make(map[string]*sampleClass)}
}

// allow reports whether a line of class goes out at its level lvl, and
// how many of its class were held back since the last one that did (or
// since the flush that said them).
func (s *logSampler) allow(lvl zapcore.Level, class string) (ok bool, suppressed int) {
	now := s.now()
	s.mu.Lock()
	defer s.mu.Unlock()
	c := s.classes[class]
	if c == nil {
		c = &sampleClass{start: now}
		s.classes[class] = c
	}
	if now.Sub(c.start) >= s.every {
		c.start, c.n = now, 0
	}
	if c.n >= s.burst {
		c.suppressed++
		c.level, c.seen = lvl, now
		return false, 0
	}
	c.n++
	n := c.suppressed
	c.suppressed = 0
	return true, n
}

// flush returns each class whose interval has ended with lines held back
// and no line of the class let through since to say so, and none held
// back for an interval since (a kind that goes on logging has its next
// line say the count, with the run the summary lacks), and resets its
// count. The line its caller logs for the class (lograte.LogHeld) counts
// as the first of a new interval's burst, so it comes at most once per
// interval and the class still has at most burst lines in it.
// With all (at the janitor's stop) it returns every class with lines
// held back, its interval ended or not.
func (s *logSampler) flush(all bool) []lograte.Held {
	now := s.now()
	s.mu.Lock()
	defer s.mu.Unlock()
	var held []lograte.Held
	for class, c := range s.classes {
		if c.suppressed == 0 || (!all && (now.Sub(c.start) < s.every || now.Sub(c.seen) < s.every)) {
			continue
		}
		held = append(held, lograte.Held{Class: class, Level: c.level, Suppressed: c.suppressed})
		c.start, c.n, c.suppressed = now, 1, 0
	}
	return held
}
