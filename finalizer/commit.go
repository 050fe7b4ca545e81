package finalizer

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/finalizer-dev/finalizer/control"
)

// Defaults of group commit (ADR 0008).
const (
	// DefaultMaxBatch is the most advances one group commit applies in
	// one statement.
	DefaultMaxBatch = 1000
	// DefaultCommitters is how many group commits may be in flight at once:
	// while one waits for PostgreSQL, the next one gathers.
	DefaultCommitters = 2
)

// BatchStore is a Store that can also apply many advances in one statement
// (see control.Store.AdvanceBatch): the result at index i is what Advance
// would have returned for advance i. *control.Store implements it; a
// Registry whose Store does commits the advances of its trackers in groups.
type BatchStore interface {
	Store
	AdvanceBatch(ctx context.Context, as []control.Advance) ([]control.AdvanceResult, error)
}

// errCommitterClosed is returned to an advance that arrives after the
// committer stopped (only after every tracker has exited, so never in
// practice).
var errCommitterClosed = errors.New("group commit stopped")

// asyncStore is a Store that also takes an advance without blocking its
// caller: done is called once with the result, on another goroutine (or
// on the caller's, when the advance cannot be queued). The committer
// implements it, so that a tracker's step need not hold its worker while
// its advance waits for its group (ADR 0008, addendum). lead applies an
// advance at once on the caller's goroutine when no group waits for a
// committer and one may be sent, and reports false, having done nothing,
// otherwise (ADR 0008, addendum "the first advancer leads").
type asyncStore interface {
	advanceAsync(ctx context.Context, a control.Advance, done func(control.AdvanceResult))
	lead(ctx context.Context, a control.Advance) (control.AdvanceResult, bool)
}

// pendingAdvance is one tracker's advance waiting for its group.
type pendingAdvance struct {
	ctx  context.Context
	a    control.Advance
	done func(control.AdvanceResult) // called once; nil for a leader's, whose result goes to *out
	out  *control.AdvanceResult
}

// finish hands p its result: done, or *out for a leader's advance (no
// callback to allocate).
func (p *pendingAdvance) finish(r control.AdvanceResult) {
	if p.done == nil {
		*p.out = r
		return
	}
	p.done(r)
}

// ledAdvance is a leader's advance and its result, in one allocation.
type ledAdvance struct {
	p   pendingAdvance
	res control.AdvanceResult
}

// committer is the group commit of advances. Trackers hand it their
// advances (advanceAsync, or Advance, which waits); it queues them, and
// each of its goroutines takes the advances waiting, oldest first, up to
// maxBatch, and applies them with one AdvanceBatch. An advance that finds
// a committer idle is sent at once, alone; advances that land while a
// statement is in flight ride together in the next one. So a quiet
// service pays no delay and a burst costs a few statements instead of one
// round trip and one commit per table.
//
// The queue is not bounded: it holds at most one advance per tracker
// (a tracker waits for its advance's result before it makes another), so
// the tracked runs bound it. Nothing ever blocks on a send to it.
//
// An advance that finds nothing queued and fewer than n groups being sent
// need not wake a committer goroutine at all: its caller (a tracker's step
// on a pool worker) sends it itself, as a group of one (lead), and the
// advances that arrive while that statement runs queue for the committer
// goroutines as before. That removes one goroutine hand-off from a quiet
// service's crossing (BENCHMARKS.md, "The latency tail (fifth pass)").
// Leaders and committer goroutines share the n slots (sending), so at
// most n groups are in flight, as before.
type committer struct {
	store    BatchStore
	metrics  *Metrics
	maxBatch int
	n        int // most groups in flight at once
	timeout  time.Duration
	ctx      context.Context // bounds every statement; canceled at shutdown
	// surge, when set, is called (never blocking) each time the queue
	// fills to maxBatch waiting advances: a burst (Config.Surge).
	surge func()

	mu   sync.Mutex
	cond *sync.Cond // signalled when an advance is queued, a slot frees or closed is set
	// sending is how many groups are being sent (by committer goroutines
	// and leaders); at most n.
	sending int
	queue   []*pendingAdvance // queue[head:] waits, oldest first
	head    int
	closed  bool
	// busy are the tables whose last advance failed with control.ErrBusy
	// (another session holds them locked), until when they count as
	// busy; alone are the advances of busy tables, each sent in a group
	// of its own, so that a table held locked costs its neighbours one
	// lock wait, not one per retry.
	busy  map[string]time.Time
	alone []*pendingAdvance
	// aloneSending: a committer is sending an advance of alone (each
	// costs a lock wait while the table stays held); the others take the
	// queue meanwhile, so that held tables' retries never take every
	// committer. lastAlone: the last group taken was one of alone; with
	// the queue waiting too, the next is the queue's (a single committer
	// alternates).
	aloneSending, lastAlone bool

	// led and ledBufs are the leader's (lead): a leader leads only when
	// nothing is sent (sending was 0, and it holds a slot until sent),
	// so at most one uses them at a time. Kept from one crossing to the
	// next, they save a quiet service's crossing its advance's record
	// and the group's slices, about 0.8 KiB (issue 12, third session).
	// They hold nothing between leaders.
	led     ledAdvance
	ledBufs groupBufs

	wg   sync.WaitGroup
	once sync.Once
}

var (
	_ Store      = (*committer)(nil)
	_ asyncStore = (*committer)(nil)
)

// newCommitter starts n committer goroutines. ctx bounds their statements.
func newCommitter(ctx context.Context, store BatchStore, m *Metrics, maxBatch, n int, timeout time.Duration) *committer {
	c := &committer{
		store:    store,
		metrics:  m,
		maxBatch: maxBatch,
		n:        n,
		timeout:  timeout,
		ctx:      ctx,
	}
	c.cond = sync.NewCond(&c.mu)
	c.wg.Add(n)
	for range n {
		go c.loop()
	}
	return c
}

// advanceAsync queues a for the next group; done gets its result. An
// advance whose ctx ends before its group is sent is not sent (done gets
// ctx's error); one whose ctx ends while its statement runs gets what the
// statement returned (it is idempotent either way).
//
// Nothing is allocated while c.mu is held (but a busy table's advance,
// which is rare): every worker whose step crosses a period takes this
// lock, and an allocation made while the collector marks may first have
// to do marking work (an assist), with every other worker queued behind
// the lock. At 100,000 runs, where the collector marks during most of a
// burst, the workers' summed waits on c.mu were 238-2,546 s per two
// bursts and the process ran on one core of two (BENCHMARKS.md, "The
// burst at 100,000"). The advance's record is made before the lock, and
// a full queue grows outside it (growQueue).
func (c *committer) advanceAsync(ctx context.Context, a control.Advance, done func(control.AdvanceResult)) {
	p := &pendingAdvance{ctx: ctx, a: a, done: done}
	c.mu.Lock()
	c.growQueue()
	if c.closed {
		c.mu.Unlock()
		done(control.AdvanceResult{Err: fmt.Errorf("advance %s: %w", a.Table, errCommitterClosed)})
		return
	}
	if until, ok := c.busy[a.Table]; ok {
		if time.Now().Before(until) {
			c.alone = append(c.alone, p)
			c.mu.Unlock()
			c.cond.Signal()
			return
		}
		delete(c.busy, a.Table)
	}
	if c.head > 0 && len(c.queue) == cap(c.queue) {
		n := copy(c.queue, c.queue[c.head:])
		clear(c.queue[n:])
		c.queue, c.head = c.queue[:n], 0
	}
	c.queue = append(c.queue, p) // never grows it: growQueue made room
	full := len(c.queue)-c.head == c.maxBatch
	c.mu.Unlock()
	c.cond.Signal()
	if full && c.surge != nil {
		c.surge()
	}
}

// growQueue makes room in c.queue for one more advance (unless the
// committer is closed): when the queue is full and nothing at its head
// was taken (which moving the rest down would free), it allocates a queue
// twice as large with c.mu released, then moves the waiting advances into
// it with c.mu held again, unless another caller grew it meanwhile. c.mu
// held on entry and on return.
func (c *committer) growQueue() {
	for !c.closed && c.head == 0 && len(c.queue) == cap(c.queue) {
		n := cap(c.queue)
		c.mu.Unlock()
		bigger := make([]*pendingAdvance, 0, max(2*n, 64))
		c.mu.Lock()
		if cap(c.queue) == n && len(c.queue)-c.head < cap(bigger) {
			c.queue, c.head = append(bigger, c.queue[c.head:]...), 0
		}
	}
}

// lead applies a as a group of its own on the caller's goroutine when
// nothing waits for a group (no advance queued, none of a busy table
// waiting to be sent alone), no group is being sent, a's table is not one
// sent alone (busy) and the committer is open; it then
// returns a's result and true. Otherwise it does nothing and returns
// false: the caller queues a (advanceAsync) as before. Advances that
// arrive while the leader's statement runs queue behind it and go in the
// committer goroutines' next groups, so a leader never gathers and never
// waits for anything but its own statement.
//
// The statement is the group commit's (commit): bounded by the
// committer's timeout and context, not sent when ctx has ended, busy
// tables noted. A leader holds one of the n slots while it sends, so that
// groups in flight stay at most n. It leads only when no group is in
// flight at all: during a flood the queue empties for an instant at
// every group a committer takes, and a leader of one advance then took a
// slot from the next group (100,000 runs' first verdicts in
// TestScaleRuns: 33.0 s against 22.5 s before leaders; see ADR 0008,
// addendum "the first advancer leads"). A quiet committer is what a
// leader saves a wake-up in.
func (c *committer) lead(ctx context.Context, a control.Advance) (control.AdvanceResult, bool) {
	c.mu.Lock()
	if c.closed || c.sending > 0 || c.head < len(c.queue) || len(c.alone) > 0 {
		c.mu.Unlock()
		return control.AdvanceResult{}, false
	}
	if until, ok := c.busy[a.Table]; ok {
		if time.Now().Before(until) {
			c.mu.Unlock()
			return control.AdvanceResult{}, false
		}
		delete(c.busy, a.Table)
	}
	c.sending++
	c.mu.Unlock()
	// The one leader (see led): nothing else reads led or ledBufs until
	// sent frees the slot, and they are cleared before.
	l := &c.led
	l.p = pendingAdvance{ctx: ctx, a: a, out: &l.res}
	batch := [1]*pendingAdvance{&l.p}
	c.commit(batch[:], &c.ledBufs)
	res := l.res
	*l = ledAdvance{}
	c.sent(false)
	return res, true
}

// Advance applies a at once when it may lead (lead), and otherwise queues
// it for the next group and waits for its result, or for ctx (then the
// advance may still be applied: it is idempotent).
func (c *committer) Advance(ctx context.Context, a control.Advance) (control.Verdict, bool, error) {
	if r, ok := c.lead(ctx, a); ok {
		return r.Verdict, r.Moved, r.Err
	}
	ch := make(chan control.AdvanceResult, 1)
	c.advanceAsync(ctx, a, func(r control.AdvanceResult) { ch <- r })
	select {
	case r := <-ch:
		return r.Verdict, r.Moved, r.Err
	case <-ctx.Done():
		return control.Verdict{}, false, fmt.Errorf("advance %s: %w", a.Table, ctx.Err())
	}
}

// queued returns how many advances wait for a group (tests).
func (c *committer) queued() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.queue) - c.head
}

// take waits for advances and moves up to maxBatch of them, oldest
// first, into batch. It returns false once the committer is closed and
// nothing waits.
//
// An advance of alone is a group of its own, taken before the queue's,
// but by one committer at a time, and never twice in a row while the
// queue waits: alone reports it, and the caller calls aloneSent once it
// is applied.
func (c *committer) take(batch []*pendingAdvance) (_ []*pendingAdvance, ok, alone bool) {
	c.mu.Lock()
	// A slot is taken by a leader at most until its statement returns
	// (sent signals then); once closed, no leader runs (close is called
	// after every tracker exited).
	for !c.closed && (c.sending >= c.n || (c.head == len(c.queue) && !c.canTakeAlone())) {
		c.cond.Wait()
	}
	if c.canTakeAlone() && (c.head == len(c.queue) || !c.lastAlone) {
		batch = append(batch[:0], c.alone[0])
		c.alone[0] = nil
		c.alone = c.alone[1:]
		if len(c.alone) == 0 {
			c.alone = nil
		}
		c.aloneSending, c.lastAlone = true, true
		c.sending++
		more := c.head < len(c.queue)
		c.mu.Unlock()
		if more {
			c.cond.Signal()
		}
		return batch, true, true
	}
	if c.head == len(c.queue) {
		// Closed, and what is left of alone is being sent: the
		// committer sending it takes the rest.
		c.mu.Unlock()
		return batch, false, false
	}
	c.lastAlone = false
	c.sending++
	n := min(c.maxBatch, len(c.queue)-c.head)
	batch = append(batch[:0], c.queue[c.head:c.head+n]...)
	clear(c.queue[c.head : c.head+n])
	c.head += n
	if c.head == len(c.queue) {
		c.queue, c.head = c.queue[:0], 0
	}
	more := c.head < len(c.queue)
	c.mu.Unlock()
	if more {
		// More than a group waits: another committer takes the next one
		// while this one's statement runs.
		c.cond.Signal()
	}
	return batch, true, false
}

// canTakeAlone reports whether an advance of alone waits and none is
// being sent. c.mu is held.
func (c *committer) canTakeAlone() bool { return len(c.alone) > 0 && !c.aloneSending }

// sent ends the sending of a group: its slot is free, and when it was an
// advance of alone, the next one of alone may be taken, by any committer.
// A committer goroutine that called it takes the next group itself; a
// leader's slot (or the end of an advance of alone) may be what another
// committer waits for, so it is woken when something waits to be sent.
func (c *committer) sent(alone bool) {
	c.mu.Lock()
	c.sending--
	if alone {
		c.aloneSending = false
	}
	next := c.head < len(c.queue) || len(c.alone) > 0 || c.closed
	c.mu.Unlock()
	if next {
		c.cond.Broadcast()
	}
}

func (c *committer) loop() {
	defer c.wg.Done()
	batch := make([]*pendingAdvance, 0, c.maxBatch)
	var bufs groupBufs
	for {
		var ok, alone bool
		if batch, ok, alone = c.take(batch); !ok {
			return
		}
		c.commit(batch, &bufs)
		clear(batch)
		c.sent(alone)
	}
}

// groupBufs are a committer goroutine's slices of a group's live
// advances and their copies for AdvanceBatch, kept from one group to the
// next: made anew per group of 1,000 they were about 190 KB of large
// allocations per statement, each taken from the heap's pages (faulted
// in again after the scavenger returned them) rather than a size class's
// span (BENCHMARKS.md, "The burst (seventh pass)"). They hold nothing
// between groups.
type groupBufs struct {
	live []*pendingAdvance
	as   []control.Advance
}

// commit applies one group and hands every advance its result. bufs,
// when not nil, lends the group's slices (cleared before it returns:
// AdvanceBatch keeps nothing of its argument).
func (c *committer) commit(batch []*pendingAdvance, bufs *groupBufs) {
	if bufs == nil {
		bufs = &groupBufs{}
	}
	if cap(bufs.as) < len(batch) {
		bufs.live, bufs.as = make([]*pendingAdvance, 0, len(batch)), make([]control.Advance, 0, len(batch))
	}
	live, as := bufs.live[:0], bufs.as[:0]
	defer func() {
		clear(live)
		clear(as)
		bufs.live, bufs.as = live[:0], as[:0]
	}()
	for _, p := range batch {
		if err := p.ctx.Err(); err != nil {
			p.finish(control.AdvanceResult{Err: fmt.Errorf("advance %s: %w", p.a.Table, err)}) // its caller has gone
			continue
		}
		live = append(live, p)
		as = append(as, p.a)
	}
	if len(live) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(c.ctx, c.timeout)
	res, err := c.store.AdvanceBatch(ctx, as)
	cancel()
	c.metrics.AdvanceBatchSize.Observe(float64(len(live)))
	if len(res) != len(live) {
		if err == nil {
			err = fmt.Errorf("advance batch: %d results for %d advances", len(res), len(live))
		}
		res = make([]control.AdvanceResult, len(live))
		for i := range res {
			res[i].Err = err
		}
	}
	c.noteBusy(live, res)
	for i, p := range live {
		p.finish(res[i])
	}
}

// busyFor is how long a table whose advance found it locked by another
// session (control.ErrBusy) has its advances sent alone: its tracker's
// retries (1 s, 2 s) and the next periods' advances within it. An advance
// of it that succeeds ends it at once.
const busyFor = time.Minute

// maxBusy bounds the tables sent alone: beyond it, so many tables are
// held that sending each alone would cost more than the lock waits it
// saves, and they ride in groups as usual.
const maxBusy = 64

// noteBusy records which tables of a group were busy and which are no
// longer.
func (c *committer) noteBusy(live []*pendingAdvance, res []control.AdvanceResult) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for i, p := range live {
		switch {
		case errors.Is(res[i].Err, control.ErrBusy):
			if _, ok := c.busy[p.a.Table]; !ok && len(c.busy) >= maxBusy {
				// Forget the tables whose time is up and that no
				// advance came for since (a run ended, a table no
				// longer written): they would hold their places for
				// ever.
				now := time.Now()
				for t, until := range c.busy {
					if !now.Before(until) {
						delete(c.busy, t)
					}
				}
				if len(c.busy) >= maxBusy {
					continue
				}
			}
			if c.busy == nil {
				c.busy = make(map[string]time.Time)
			}
			c.busy[p.a.Table] = time.Now().Add(busyFor)
		case res[i].Err == nil && len(c.busy) > 0:
			delete(c.busy, p.a.Table)
		}
	}
}

// close stops the goroutines once every advance queued has its result,
// and returns once no leader is sending either. Call it after every
// tracker has exited (then no leader runs, nor starts: lead refuses once
// closed). It blocks and is safe to call twice.
func (c *committer) close() {
	c.once.Do(func() {
		c.mu.Lock()
		c.closed = true
		c.mu.Unlock()
		c.cond.Broadcast()
	})
	c.wg.Wait()
	c.mu.Lock()
	for c.sending > 0 {
		c.cond.Wait()
	}
	c.mu.Unlock()
}
