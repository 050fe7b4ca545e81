package finalizer

import (
	"sync"
	"testing"
	"time"
	"unsafe"
)

// A latch wakes every waiter, whether it began to wait before or after
// the close, and holds no channel until someone waits (issue 12).
func TestLatch(t *testing.T) {
	var l latch
	if l.closed() {
		t.Fatal("a new latch is closed")
	}
	if n := testing.AllocsPerRun(100, func() { _ = l.closed() }); n != 0 {
		t.Errorf("closed allocates %.0f times", n)
	}
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() { defer wg.Done(); <-l.wait() }()
	}
	time.Sleep(10 * time.Millisecond)
	l.close()
	l.close() // twice is safe
	wg.Wait()
	if !l.closed() {
		t.Fatal("not closed after close")
	}
	select {
	case <-l.wait():
	default:
		t.Fatal("wait after close is not ready")
	}
	// Closed without a waiter: no channel made.
	var m latch
	m.close()
	if !m.closed() || m.p.Load() != closedLatch {
		t.Error("a latch closed without a waiter made a channel")
	}
	if unsafe.Sizeof(latch{}) != 8 {
		t.Errorf("a latch is %d bytes, want a pointer's 8", unsafe.Sizeof(latch{}))
	}
	// Racing waits and closes (go test -race).
	for range 100 {
		var r latch
		var wg sync.WaitGroup
		for range 4 {
			wg.Add(1)
			go func() { defer wg.Done(); <-r.wait() }()
		}
		go r.close()
		wg.Wait()
	}
}
