// Package lograte holds back repeated log lines: at most one line per class
// in each interval, with the count of those held back since the last one.
package lograte

import (
	"sync"
	"time"
)

// Limiter lets at most one line per class through every interval and
// counts the ones it held back. It is safe for concurrent use. Classes are
// remembered for the Limiter's lifetime, so a class must come from a small
// set (an outcome, a kind), never from input.
type Limiter struct {
	now   func() time.Time
	every time.Duration

	mu      sync.Mutex
	classes map[string]*class
}

type class struct {
	last       time.Time
	suppressed int
}

// New returns a Limiter that lets one line per class through every
// interval; now nil means time.Now.
func New(now func() time.Time, every time.Duration) *Limiter {
	if now == nil {
		now = time.Now
	}
	return &Limiter{now: now, every: every, classes: make(map[string]*class)}
}

// Allow reports whether a line of class may be logged now and, if so, how
// many of that class were held back since the last one logged.
func (w *Limiter) Allow(c string) (ok bool, suppressed int) {
	now := w.now()
	w.mu.Lock()
	defer w.mu.Unlock()
	cl := w.classes[c]
	if cl == nil {
		w.classes[c] = &class{last: now}
		return true, 0
	}
	if now.Sub(cl.last) < w.every {
		cl.suppressed++
		return false, 0
	}
	n := cl.suppressed
	cl.last, cl.suppressed = now, 0
	return true, n
}
