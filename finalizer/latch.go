package finalizer

import "sync/atomic"

// latch is a signal closed once, that few ever wait on: a tracker's end,
// a registry entry's start and reaping. Its channel is made only when
// someone waits before it is closed, so that a tracked run does not hold
// three channels of 96 bytes each that nobody reads (issue 12); checking
// it is an atomic load. The zero value is open.
type latch struct {
	p atomic.Pointer[latchChan] // nil: open, nobody waits; closedLatch: closed
}

type latchChan struct{ c chan struct{} }

// closedLatch marks a closed latch; its channel is closed.
var closedLatch = func() *latchChan {
	l := &latchChan{c: make(chan struct{})}
	close(l.c)
	return l
}()

// close closes the latch and wakes whoever waits. Safe to call twice.
func (l *latch) close() {
	if old := l.p.Swap(closedLatch); old != nil && old != closedLatch {
		close(old.c)
	}
}

// closed reports whether close was called. What was written before close
// is visible after closed reports true.
func (l *latch) closed() bool { return l.p.Load() == closedLatch }

// wait returns a channel closed once the latch is.
func (l *latch) wait() <-chan struct{} {
	for {
		if p := l.p.Load(); p != nil {
			return p.c
		}
		n := &latchChan{c: make(chan struct{})}
		if l.p.CompareAndSwap(nil, n) {
			return n.c
		}
	}
}
