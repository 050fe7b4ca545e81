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

// pendingAdvance is one tracker's advance waiting for its group.
type pendingAdvance struct {
	ctx  context.Context
	a    control.Advance
	done chan control.AdvanceResult // capacity 1
}

// committer is the group commit of advances. Trackers call its Advance as
// they would call the store's; it queues the call, and each of its
// goroutines takes the first advance waiting, adds every other one waiting
// (up to maxBatch) and applies them with one AdvanceBatch. An advance that
// finds a committer idle is sent at once, alone; advances that land while
// a statement is in flight ride together in the next one. So a quiet
// service pays no delay and a burst costs a few statements instead of one
// round trip and one commit per table.
type committer struct {
	store    BatchStore
	metrics  *Metrics
	queue    chan *pendingAdvance
	maxBatch int
	timeout  time.Duration
	ctx      context.Context // bounds every statement; canceled at shutdown
	stop     chan struct{}
	wg       sync.WaitGroup
	once     sync.Once
}

var _ Store = (*committer)(nil)

// newCommitter starts n committer goroutines. ctx bounds their statements.
func newCommitter(ctx context.Context, store BatchStore, m *Metrics, maxBatch, n int, timeout time.Duration) *committer {
	c := &committer{
		store:    store,
		metrics:  m,
		queue:    make(chan *pendingAdvance, maxBatch),
		maxBatch: maxBatch,
		timeout:  timeout,
		ctx:      ctx,
		stop:     make(chan struct{}),
	}
	c.wg.Add(n)
	for range n {
		go c.loop()
	}
	return c
}

// Advance queues a for the next group and waits for its result, or for
// ctx (then the advance may still be applied: it is idempotent).
func (c *committer) Advance(ctx context.Context, a control.Advance) (control.Verdict, bool, error) {
	p := &pendingAdvance{ctx: ctx, a: a, done: make(chan control.AdvanceResult, 1)}
	select {
	case c.queue <- p:
	case <-ctx.Done():
		return control.Verdict{}, false, fmt.Errorf("advance %s: %w", a.Table, ctx.Err())
	case <-c.stop:
		return control.Verdict{}, false, fmt.Errorf("advance %s: %w", a.Table, errCommitterClosed)
	}
	select {
	case r := <-p.done:
		return r.Verdict, r.Moved, r.Err
	case <-ctx.Done():
		return control.Verdict{}, false, fmt.Errorf("advance %s: %w", a.Table, ctx.Err())
	}
}

func (c *committer) loop() {
	defer c.wg.Done()
	batch := make([]*pendingAdvance, 0, c.maxBatch)
	for {
		select {
		case <-c.stop:
			return
		case p := <-c.queue:
			batch = append(batch[:0], p)
		}
	gather:
		for len(batch) < c.maxBatch {
			select {
			case p := <-c.queue:
				batch = append(batch, p)
			default:
				break gather
			}
		}
		c.commit(batch)
		clear(batch)
	}
}

// commit applies one group and hands every advance its result.
func (c *committer) commit(batch []*pendingAdvance) {
	live := make([]*pendingAdvance, 0, len(batch))
	as := make([]control.Advance, 0, len(batch))
	for _, p := range batch {
		if err := p.ctx.Err(); err != nil {
			p.done <- control.AdvanceResult{Err: err} // its caller has gone
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
	for i, p := range live {
		p.done <- res[i]
	}
}

// close stops the goroutines once the batches in flight are done. Call it
// after every tracker has exited. It blocks and is safe to call twice.
func (c *committer) close() {
	c.once.Do(func() { close(c.stop) })
	c.wg.Wait()
}
