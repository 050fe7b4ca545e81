package lograte

import (
	"sync"
	"time"
)

// ReportEvery is how often a Loop calls its reports: a class's held-back
// count is said at most this long after its interval ended.
const ReportEvery = 10 * time.Second

// Loop calls its reports (a Limiter's Report, bound to its logger and
// kind) every interval, for limiters whose owner has no periodic loop of
// its own to call them from (a store, an HTTP handler). Its goroutine is
// its starter's: Stop ends it and waits for it.
type Loop struct {
	mu      sync.Mutex
	reports []func(final bool)

	stop chan struct{}
	done chan struct{}
	once sync.Once
}

// StartLoop starts a Loop calling its reports every interval (ReportEvery
// when not positive).
func StartLoop(every time.Duration) *Loop {
	if every <= 0 {
		every = ReportEvery
	}
	l := &Loop{stop: make(chan struct{}), done: make(chan struct{})}
	go l.run(every)
	return l
}

// Add has the Loop call report from its next round on.
func (l *Loop) Add(report func(final bool)) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.reports = append(l.reports, report)
}

// Stop ends the Loop after one last round (a class whose interval has
// ended by then is still said) and waits for it. Safe to call twice.
func (l *Loop) Stop() {
	l.once.Do(func() { close(l.stop) })
	<-l.done
}

func (l *Loop) run(every time.Duration) {
	defer close(l.done)
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-l.stop:
			l.round(true)
			return
		case <-t.C:
			l.round(false)
		}
	}
}

// round calls every report once; final is true for the last round, at
// the stop, when a report says every class with lines held back (its
// interval ended or not: nothing comes after it).
func (l *Loop) round(final bool) {
	l.mu.Lock()
	reports := append([]func(bool){}, l.reports...)
	l.mu.Unlock()
	for _, r := range reports {
		r(final)
	}
}
