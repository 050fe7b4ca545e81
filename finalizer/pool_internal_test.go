package finalizer

import (
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// fakeStep counts its steps and, when gate is set, waits for it.
type fakeStep struct {
	n    *atomic.Int64
	gate chan struct{}
	done *sync.WaitGroup
}

func (f fakeStep) runStep() {
	if f.gate != nil {
		<-f.gate
	}
	f.n.Add(1)
	f.done.Done()
}

func poolCounts(p *pool) (running, waiting int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.running, p.waiting
}

// One step at a time, as an idle service's events come: the first starts
// a worker, which then waits for the next instead of exiting, so every
// later step runs on it; wait makes it exit.
func TestPoolWorkerWaitsForTheNextStep(t *testing.T) {
	p := newPool(16)
	var n atomic.Int64
	var wg sync.WaitGroup
	for range 100 {
		wg.Add(1)
		p.submit(fakeStep{n: &n, done: &wg})
		wg.Wait()
		waitFor(t, "the worker waits", func() bool { r, w := poolCounts(p); return r == 1 && w == 1 })
	}
	if n.Load() != 100 {
		t.Fatalf("%d steps ran, want 100", n.Load())
	}
	p.wait()
	if r, _ := poolCounts(p); r != 0 {
		t.Fatalf("%d workers alive after wait", r)
	}
}

// Blocked steps start workers up to max; once the queue is empty, keep of
// them wait and the rest exit.
func TestPoolKeepsAtMostKeepWorkers(t *testing.T) {
	p := newPool(32)
	var n atomic.Int64
	var wg sync.WaitGroup
	gate := make(chan struct{})
	for range 32 {
		wg.Add(1)
		p.submit(fakeStep{n: &n, gate: gate, done: &wg})
	}
	waitFor(t, "32 workers", func() bool { r, _ := poolCounts(p); return r == 32 })
	close(gate)
	wg.Wait()
	waitFor(t, "keep workers left", func() bool { r, w := poolCounts(p); return r == keepWorkers && w == keepWorkers })
	p.wait()
	if r, _ := poolCounts(p); r != 0 {
		t.Fatalf("%d workers alive after wait", r)
	}
}

// Submits from many goroutines while workers come and go: every step
// runs exactly once, and wait returns with no worker left (run it with
// -race).
func TestPoolEveryStepRunsOnce(t *testing.T) {
	for _, max := range []int{1, 2, 8, 1024} {
		p := newPool(max)
		var n atomic.Int64
		var wg sync.WaitGroup
		var submitters sync.WaitGroup
		const each, goroutines = 5000, 8
		wg.Add(each * goroutines)
		for g := range goroutines {
			submitters.Add(1)
			go func() {
				defer submitters.Done()
				for i := range each {
					p.submit(fakeStep{n: &n, done: &wg})
					if (i+g)%97 == 0 {
						time.Sleep(50 * time.Microsecond) // let the queue drain and workers wait
					}
				}
			}()
		}
		submitters.Wait()
		wg.Wait()
		if got := n.Load(); got != each*goroutines {
			t.Fatalf("max %d: %d steps ran, want %d", max, got, each*goroutines)
		}
		p.wait()
		if r, w := poolCounts(p); r != 0 {
			t.Fatalf("max %d: %d workers alive after wait (%d waiting)", max, r, w)
		}
	}
}

// fanOut runs every value fed, on no more goroutines than its max nor
// than the values, and wait returns once all are done.
func TestFanOut(t *testing.T) {
	for _, tc := range []struct{ max, n int }{{4, 100}, {16, 3}, {1, 10}, {0, 5}, {-1, 5}} {
		var running, most, done atomic.Int32
		f := newFanOut(tc.max, func(int) {
			if r := running.Add(1); r > most.Load() {
				most.Store(r)
			}
			time.Sleep(time.Millisecond)
			running.Add(-1)
			done.Add(1)
		})
		for i := range tc.n {
			f.feed(i)
		}
		f.wait()
		if int(done.Load()) != tc.n || int(most.Load()) > min(max(tc.max, 1), tc.n) || f.started > min(max(tc.max, 1), tc.n) {
			t.Fatalf("max %d, %d values: %d done, %d at once, %d goroutines", tc.max, tc.n, done.Load(), most.Load(), f.started)
		}
	}
}
