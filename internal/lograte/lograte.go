// Package lograte holds back repeated log lines: at most one line per class
// in each interval, with the count of those held back since the last one.
//
// The count rides on the next line of the class that goes out; when none
// comes (a lone burst), the owner of a periodic loop calls Report (or
// Flush) so that the count is still said, in one line per class at most
// once per interval (ADR 0022, addendum of 2026-12-06).
package lograte

import (
	"sync"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
)

// HeldMsg is the message of the line that says how many lines of a class
// were held back when no later line of the class went out to say it.
const HeldMsg = "log lines held back"

// Limiter lets at most burst lines per class through every interval (one
// with New) and counts the ones it held back. It is safe for concurrent
// use. Classes are remembered for the Limiter's lifetime, so a class must
// come from a small set (an outcome, a kind), never from input.
type Limiter struct {
	now   func() time.Time
	every time.Duration
	burst int

	mu      sync.Mutex
	classes map[string]*class
}

type class struct {
	start      time.Time     // of the current interval
	n          int           // lines let through in it
	seen       time.Time     // of the last line held back
	suppressed int           // held back since the last line let through
	level      zapcore.Level // of the lines held back
}

// New returns a Limiter that lets one line per class through every
// interval; now nil means time.Now.
func New(now func() time.Time, every time.Duration) *Limiter {
	return NewBurst(now, every, 1)
}

// NewBurst returns a Limiter that lets burst lines per class through
// every interval (at least one): the registry's sampler of the lines
// every run logs (ADR 0022). now nil means time.Now.
func NewBurst(now func() time.Time, every time.Duration, burst int) *Limiter {
	if now == nil {
		now = time.Now
	}
	return &Limiter{now: now, every: every, burst: max(burst, 1), classes: make(map[string]*class)}
}

// Every returns the Limiter's interval.
func (w *Limiter) Every() time.Duration { return w.every }

// Allow reports whether a line of class, to be logged at lvl, may be
// logged now and, if so, how many of that class were held back since the
// last one logged (or since the last Flush that said them). The level is
// what Flush reports the held-back lines at.
func (w *Limiter) Allow(lvl zapcore.Level, c string) (ok bool, suppressed int) {
	now := w.now()
	w.mu.Lock()
	defer w.mu.Unlock()
	cl := w.classes[c]
	if cl == nil {
		cl = &class{start: now}
		w.classes[c] = cl
	}
	if now.Sub(cl.start) >= w.every {
		cl.start, cl.n = now, 0
	}
	if cl.n >= w.burst {
		cl.suppressed++
		cl.level, cl.seen = lvl, now
		return false, 0
	}
	cl.n++
	n := cl.suppressed
	cl.suppressed = 0
	return true, n
}

// Held is a class of lines held back whose interval ended with no line of
// the class let through to say so (Limiter.Flush).
type Held struct {
	Class      string
	Level      zapcore.Level // of the lines held back (the last one's)
	Suppressed int
}

// Flush returns each class whose interval has ended with lines held back
// since the last one let through, and none held back for an interval
// since (a burst that goes on has its next line, due within the
// interval, say the count with the subject and error the summary lacks;
// a review found a sparse burst's summaries taking every interval's line
// from it), and resets its count: the line its
// caller logs for the class (Report) counts as the first of a new
// interval's lines, so Flush's line comes at most once per interval and a
// class still has at most burst lines in one. It returns nil when no class has lines to say.
// Classes come in no particular order. With all (the last round, at a
// stop) it returns every class with lines held back, its interval ended
// or not: nothing comes after it to say them.
func (w *Limiter) Flush(all bool) []Held {
	now := w.now()
	w.mu.Lock()
	defer w.mu.Unlock()
	var held []Held
	for c, cl := range w.classes {
		if cl.suppressed == 0 || (!all && (now.Sub(cl.start) < w.every || now.Sub(cl.seen) < w.every)) {
			continue
		}
		held = append(held, Held{Class: c, Level: cl.level, Suppressed: cl.suppressed})
		cl.start, cl.n, cl.suppressed = now, 1, 0
	}
	return held
}

// Report logs what Flush returns on log (LogHeld): one line per class
// whose held-back lines no later line of the class said, with kind naming
// the limiter; all as Flush's.
func (w *Limiter) Report(log *zap.Logger, kind string, all bool) {
	LogHeld(log, kind, w.every, w.Flush(all))
}

// LogHeld logs one line (HeldMsg) per class of held, at the level of the
// class's held-back lines, with kind (which limiter), the class, how many
// were held back (suppressed) and the limiter's interval.
func LogHeld(log *zap.Logger, kind string, every time.Duration, held []Held) {
	for _, h := range held {
		if ce := log.Check(h.Level, HeldMsg); ce != nil {
			ce.Write(zap.String("kind", kind), zap.String("class", h.Class),
				zap.Int("suppressed", h.Suppressed), zap.Duration("interval", every))
		}
	}
}
