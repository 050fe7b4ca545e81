package finalizer

import (
	"time"

	"github.com/cenkalti/backoff/v4"
)

// Clock is the time source of trackers. Tests inject a fake one so that they
// never sleep; production uses SystemClock.
type Clock interface {
	// Now returns the current time.
	Now() time.Time
	// NewTimer returns a stopped timer (backoff's Timer interface) whose
	// channel fires once after Start(d).
	NewTimer() backoff.Timer
	// AfterFunc calls f on a goroutine of its own once d has passed, and
	// returns a function that stops it (reporting whether it did so before
	// f was called). Trackers arm their retries with it (ADR 0022).
	AfterFunc(d time.Duration, f func()) (stop func() bool)
}

// SystemClock is the Clock of the real world.
type SystemClock struct{}

// Now returns time.Now().
func (SystemClock) Now() time.Time { return time.Now() }

// AfterFunc is time.AfterFunc.
func (SystemClock) AfterFunc(d time.Duration, f func()) func() bool { return time.AfterFunc(d, f).Stop }

// NewTimer returns a timer backed by time.Timer.
func (SystemClock) NewTimer() backoff.Timer { return &systemTimer{} }

type systemTimer struct{ t *time.Timer }

func (s *systemTimer) Start(d time.Duration) {
	if s.t == nil {
		s.t = time.NewTimer(d)
		return
	}
	s.t.Reset(d)
}

func (s *systemTimer) Stop() {
	if s.t != nil {
		s.t.Stop()
	}
}

func (s *systemTimer) C() <-chan time.Time {
	if s.t == nil {
		return nil
	}
	return s.t.C
}
