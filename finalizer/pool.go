package finalizer

import "sync"

// DefaultWorkers is the most tracker steps that run at once (ADR 0022):
// the goroutines of the worker pool. A step whose advance waits for its
// group commit parks it and frees its worker (ADR 0008, addendum), so the
// pool's size does not bound a group.
const DefaultWorkers = 1024

// pool runs the steps of trackers on at most max goroutines (ADR 0022). A
// tracker is submitted when it has something to do (mail, a stop, a
// re-assert, a retry that is due) and is in the queue at most once; a
// worker takes the trackers in the order they were submitted and runs one
// step of each. Workers are started when work is queued and none is free,
// and exit when the queue is empty: an idle service holds no goroutine
// and no stack for its trackers.
type pool struct {
	max int

	mu      sync.Mutex
	queue   []*Tracker // queue[head:] waits
	head    int
	running int // workers alive
	wg      sync.WaitGroup
}

func newPool(max int) *pool {
	if max <= 0 {
		max = DefaultWorkers
	}
	return &pool{max: max}
}

// submit queues t for a step and starts a worker when none is free and
// fewer than max run. It never blocks on a step.
func (p *pool) submit(t *Tracker) {
	p.mu.Lock()
	if p.head > 0 && len(p.queue) == cap(p.queue) {
		n := copy(p.queue, p.queue[p.head:])
		clear(p.queue[n:])
		p.queue, p.head = p.queue[:n], 0
	}
	p.queue = append(p.queue, t)
	start := p.running < p.max
	if start {
		p.running++
		p.wg.Add(1)
	}
	p.mu.Unlock()
	if start {
		go p.work()
	}
}

// work runs queued steps until the queue is empty.
func (p *pool) work() {
	defer p.wg.Done()
	for {
		p.mu.Lock()
		if p.head == len(p.queue) {
			p.queue, p.head = p.queue[:0], 0
			p.running--
			p.mu.Unlock()
			return
		}
		t := p.queue[p.head]
		p.queue[p.head] = nil
		p.head++
		p.mu.Unlock()
		t.runStep()
	}
}

// wait waits until every worker has exited. Call it once every tracker
// has exited (nothing submits any more).
func (p *pool) wait() { p.wg.Wait() }
