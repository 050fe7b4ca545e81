package finalizer

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/finalizer-dev/finalizer/control"
)

// Defaults of the group commit of what tracking a run writes (ADR 0023).
const (
	// DefaultMaxTrackBatch is the most tracks, or feeder joins, saved in
	// one statement. Each join takes its table's advisory lock for the
	// transaction, so a group holds at most this many locks (PostgreSQL's
	// lock table holds max_locks_per_transaction × max_connections, 6,400
	// by default, shared with the advances' groups).
	DefaultMaxTrackBatch = 500
	// trackGatherers is how many groups of one kind may be in flight at
	// once: while one waits for PostgreSQL, the next one gathers.
	trackGatherers = 2
)

// BatchTrackStore is a TrackStore that can also save many tracks in one
// statement (control.Store.SaveTracks): the error at index i is what
// SaveTrack would have returned for track i. A Registry whose Tracks is
// one saves the tracks requested together in groups.
type BatchTrackStore interface {
	TrackStore
	SaveTracks(ctx context.Context, ts []control.Track) []error
}

// BatchFeederJoiner is a FeederJoiner that can also join many feeders in
// one transaction (control.Store.JoinFeeders). A Registry whose Store is
// one joins the feeders of the runs it starts together in groups.
type BatchFeederJoiner interface {
	FeederJoiner
	JoinFeeders(ctx context.Context, js []control.FeederJoin) []control.JoinedResult
}

// errGatherClosed is returned to a call that arrives after its group
// stopped (the registry is closing).
var errGatherClosed = errors.New("registry closed")

// gather is the group commit of one kind of call that many runs make when
// they are tracked (ADR 0023), as the committer is for advances (ADR
// 0008): a caller queues its input and waits for its own output; each of
// the gather's goroutines takes the first input waiting, adds every other
// one already waiting (up to max) and applies them with one call of
// apply. A call that finds a goroutine idle goes at once, alone; calls
// that arrive while a group is in flight ride in the next one. apply
// returns one output per input, in order, each with its own error, so
// that one bad input never fails the others.
type gather[In, Out any] struct {
	apply   func(ctx context.Context, in []In) []Out
	fail    func(in In, err error) Out // the output of an input not applied
	queue   chan *gatherCall[In, Out]
	max     int
	timeout time.Duration
	ctx     context.Context // bounds every group; canceled at shutdown
	stop    chan struct{}
	exited  chan struct{} // closed once every goroutine has returned
	wg      sync.WaitGroup
	once    sync.Once
}

type gatherCall[In, Out any] struct {
	ctx  context.Context
	in   In
	done chan Out // capacity 1
}

// newGather starts n goroutines that apply groups of at most max inputs,
// each bounded by timeout and by ctx.
func newGather[In, Out any](ctx context.Context, n, max int, timeout time.Duration,
	apply func(context.Context, []In) []Out, fail func(In, error) Out) *gather[In, Out] {
	g := &gather[In, Out]{
		apply: apply, fail: fail,
		queue: make(chan *gatherCall[In, Out], max),
		max:   max, timeout: timeout, ctx: ctx,
		stop: make(chan struct{}), exited: make(chan struct{}),
	}
	g.wg.Add(n)
	for range n {
		go g.loop()
	}
	go func() { g.wg.Wait(); close(g.exited) }()
	return g
}

// do queues in for the next group and waits for its output, or for ctx
// (then in may still be applied: every kind gathered is idempotent).
func (g *gather[In, Out]) do(ctx context.Context, in In) Out {
	c := &gatherCall[In, Out]{ctx: ctx, in: in, done: make(chan Out, 1)}
	select {
	case g.queue <- c:
	case <-ctx.Done():
		return g.fail(in, ctx.Err())
	case <-g.stop:
		return g.fail(in, errGatherClosed)
	}
	select {
	case out := <-c.done:
		return out
	case <-ctx.Done():
		return g.fail(in, ctx.Err())
	case <-g.exited: // stopped with c still queued
		select {
		case out := <-c.done:
			return out
		default:
			return g.fail(in, errGatherClosed)
		}
	}
}

func (g *gather[In, Out]) loop() {
	defer g.wg.Done()
	group := make([]*gatherCall[In, Out], 0, g.max)
	for {
		select {
		case <-g.stop:
			return
		case c := <-g.queue:
			group = append(group[:0], c)
		}
	collect:
		for len(group) < g.max {
			select {
			case c := <-g.queue:
				group = append(group, c)
			default:
				break collect
			}
		}
		g.run(group)
		clear(group)
	}
}

// run applies one group and hands every caller its output.
func (g *gather[In, Out]) run(group []*gatherCall[In, Out]) {
	live := make([]*gatherCall[In, Out], 0, len(group))
	ins := make([]In, 0, len(group))
	for _, c := range group {
		if err := c.ctx.Err(); err != nil {
			c.done <- g.fail(c.in, err) // its caller has gone
			continue
		}
		live = append(live, c)
		ins = append(ins, c.in)
	}
	if len(live) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(g.ctx, g.timeout)
	outs := g.apply(ctx, ins)
	cancel()
	for i, c := range live {
		if i < len(outs) {
			c.done <- outs[i]
		} else {
			c.done <- g.fail(c.in, errors.New("no result for this call in its group"))
		}
	}
}

// close stops the goroutines once the groups in flight are done; a call
// still queued gets errGatherClosed. It blocks and is safe to call twice.
func (g *gather[In, Out]) close() {
	g.once.Do(func() { close(g.stop) })
	<-g.exited
}
