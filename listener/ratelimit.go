package listener

import (
	"sync"
	"time"
)

// warnLimiter lets at most one warning per class through every interval
// and counts the ones it held back.
type warnLimiter struct {
	now   func() time.Time
	every time.Duration

	mu      sync.Mutex
	classes map[string]*warnClass
}

type warnClass struct {
	last       time.Time
	suppressed int
}

func newWarnLimiter(now func() time.Time, every time.Duration) *warnLimiter {
	return &warnLimiter{now: now, every: every, classes: make(map[string]*warnClass)}
}

// allow reports whether a warning of class may be logged now and, if so,
// how many of that class were suppressed since the last one logged.
func (w *warnLimiter) allow(class string) (ok bool, suppressed int) {
	now := w.now()
	w.mu.Lock()
	defer w.mu.Unlock()
	c := w.classes[class]
	if c == nil {
		w.classes[class] = &warnClass{last: now}
		return true, 0
	}
	if now.Sub(c.last) < w.every {
		c.suppressed++
		return false, 0
	}
	n := c.suppressed
	c.last, c.suppressed = now, 0
	return true, n
}
