package finalizer

import "sync"

// DefaultWorkers is the most tracker steps that run at once (ADR 0022):
// the goroutines of the worker pool. A step whose advance waits for its
// group commit parks it and frees its worker (ADR 0008, addendum), so the
// pool's size does not bound a group.
const DefaultWorkers = 1024

// keepWorkers is how many workers of a pool wait for work when the
// queue is empty, instead of exiting (issue 12): at one event a
// millisecond (10,000 idle runs) a worker that exits leaves the next
// event a new goroutine to start and a stack to grow again to the
// parser's depth, about 3% of the idle service's CPU. Their stacks are
// the pool's, not any tracker's: a service holds these few goroutines
// however many runs it tracks.
const keepWorkers = 8

// stepper is what a pool runs: a Tracker (a fake in the pool's tests).
type stepper interface{ runStep() }

// pool runs the steps of trackers on at most max goroutines (ADR 0022). A
// tracker is submitted when it has something to do (mail, a stop, a
// re-assert, a retry that is due) and is in the queue at most once; a
// worker takes the trackers in the order they were submitted and runs one
// step of each. A submit wakes a waiting worker, or starts one when none
// waits and fewer than max run; a worker that finds the queue empty waits
// for the next submit when fewer than keep wait already, and exits
// otherwise: an idle service holds at most keep goroutines, and no stack
// for its trackers. close makes the waiting workers exit.
type pool struct {
	max  int
	keep int

	mu      sync.Mutex
	queue   []stepper // queue[head:] waits
	head    int
	running int // workers alive, waiting ones included
	waiting int // workers waiting on wake
	closed  bool
	steps   int64         // steps submitted since the pool was made: a worker's wake-up each
	wake    chan struct{} // one token per woken worker; capacity keep
	wg      sync.WaitGroup
}

func newPool(max int) *pool {
	if max <= 0 {
		max = DefaultWorkers
	}
	keep := min(max, keepWorkers)
	return &pool{max: max, keep: keep, wake: make(chan struct{}, keep)}
}

// submit queues t for a step and wakes a waiting worker, or starts one
// when none waits and fewer than max run. It never blocks on a step.
func (p *pool) submit(t stepper) {
	p.mu.Lock()
	if p.head > 0 && len(p.queue) == cap(p.queue) {
		n := copy(p.queue, p.queue[p.head:])
		clear(p.queue[n:])
		p.queue, p.head = p.queue[:n], 0
	}
	p.queue = append(p.queue, t)
	p.steps++
	wake := p.waiting > 0
	start := !wake && p.running < p.max
	switch {
	case wake:
		// The token cannot block: at most keep workers wait, each
		// taking one token, and a token is sent only for a worker
		// counted here.
		p.waiting--
		p.wake <- struct{}{}
	case start:
		p.running++
		p.wg.Add(1)
	}
	p.mu.Unlock()
	if start {
		go p.work()
	}
}

// work runs queued steps; when the queue is empty it waits for a submit
// (fewer than keep waiting, the pool open) or exits.
func (p *pool) work() {
	defer p.wg.Done()
	for {
		p.mu.Lock()
		if p.head == len(p.queue) {
			p.queue, p.head = p.queue[:0], 0
			if p.closed || p.waiting >= p.keep {
				p.running--
				p.mu.Unlock()
				return
			}
			p.waiting++
			p.mu.Unlock()
			if _, ok := <-p.wake; !ok {
				p.mu.Lock()
				p.running--
				p.mu.Unlock()
				return
			}
			continue
		}
		t := p.queue[p.head]
		p.queue[p.head] = nil
		p.head++
		p.mu.Unlock()
		t.runStep()
	}
}

// submitted returns how many steps were submitted since the pool was
// made.
func (p *pool) submitted() int64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.steps
}

// wait makes the waiting workers exit and waits until every worker has
// exited. Call it once every tracker has exited (nothing submits any
// more).
func (p *pool) wait() {
	p.mu.Lock()
	if !p.closed {
		p.closed = true
		close(p.wake)
	}
	p.mu.Unlock()
	p.wg.Wait()
}

// fanOut runs fn on every value fed to it on up to max goroutines,
// started as values come (no more than there are values), each taking the
// next value when done: a restart's starts and feeder joins (Recover,
// prejoin), where a goroutine per value (100,000 at a restart) grew each
// one's stack anew to the depth of a start (issue 12, sixth pass). feed
// blocks until a goroutine takes the value; wait, called once after the
// last feed, returns when every value is done. Feed and wait are called
// from one goroutine.
type fanOut[T any] struct {
	max     int
	fn      func(T)
	next    chan T
	started int
	wg      sync.WaitGroup
}

// newFanOut returns a fanOut of up to max goroutines (at least one: with
// none, feed would block for ever).
func newFanOut[T any](n int, fn func(T)) *fanOut[T] {
	return &fanOut[T]{max: max(n, 1), fn: fn, next: make(chan T)}
}

func (f *fanOut[T]) feed(v T) {
	if f.started < f.max {
		f.started++
		f.wg.Add(1)
		go func() {
			defer f.wg.Done()
			for v := range f.next {
				f.fn(v)
			}
		}()
	}
	f.next <- v
}

func (f *fanOut[T]) wait() {
	close(f.next)
	f.wg.Wait()
}
