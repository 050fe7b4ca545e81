package bench

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"go.uber.org/zap"

	"github.com/finalizer-dev/finalizer/control"
	"github.com/finalizer-dev/finalizer/progress"
)

// naive is the baseline a first attempt would write: one subscription per
// run whose callback parses every progress and upserts the control table
// at once, through the same forward-only statement (control.Store.Advance):
// no slot that keeps only the newest progress, no check whether the
// period changed, so one statement per event.
type naive struct {
	store  *control.Store
	nc     *nats.Conn
	subs   []*nats.Subscription
	ctx    context.Context
	cancel context.CancelFunc

	processed atomic.Int64 // progress events handled (statement done or failed)
	writes    atomic.Int64 // statements that succeeded
	failed    atomic.Int64
	closed    chan struct{} // closed by the connection's closed handler
}

// startNaive subscribes every run. Its control table is its own.
func startNaive(ctx context.Context, natsURL, pgURL, table string, sims []*sim, log *zap.Logger) (*naive, error) {
	store, err := control.Open(ctx, pgURL, control.Options{Table: table, Logger: log})
	if err != nil {
		return nil, err
	}
	if err := store.Migrate(ctx); err != nil {
		store.Close()
		return nil, err
	}
	closed := make(chan struct{})
	nc, err := nats.Connect(natsURL, nats.Name("finalizer-bench-naive"),
		nats.ClosedHandler(func(*nats.Conn) { close(closed) }))
	if err != nil {
		store.Close()
		return nil, fmt.Errorf("naive: connect: %w", err)
	}
	nctx, cancel := context.WithCancel(context.Background())
	n := &naive{store: store, nc: nc, ctx: nctx, cancel: cancel, closed: closed}
	for _, s := range sims {
		s := s
		sub, err := nc.Subscribe(s.subject, func(m *nats.Msg) { n.handle(s, m.Data) })
		if err != nil {
			n.stop()
			return nil, fmt.Errorf("naive: subscribe: %w", err)
		}
		_ = sub.SetPendingLimits(-1, -1)
		n.subs = append(n.subs, sub)
	}
	if err := nc.FlushTimeout(30 * time.Second); err != nil {
		n.stop()
		return nil, fmt.Errorf("naive: flush: %w", err)
	}
	return n, nil
}

// handle is one event: parse, read the candidate, upsert.
func (n *naive) handle(s *sim, data []byte) {
	defer n.processed.Add(1)
	ev, err := progress.Parse(data, progress.KindProgress)
	if err != nil {
		n.failed.Add(1)
		return
	}
	c, ok := s.spec.Candidate(ev)
	if !ok {
		n.failed.Add(1)
		return
	}
	_, _, err = n.store.Advance(n.ctx, control.Advance{
		Table: s.table, FinalizedUntil: c.Until, EndTime: c.Time, EndOffset: c.EndOffset,
		QueryID: ev.QueryID, RunID: ev.RunID, BatchID: ev.BatchID,
	})
	if err != nil {
		n.failed.Add(1)
		return
	}
	n.writes.Add(1)
}

// stop cancels the statements in flight, drains the connection (waiting
// for every callback to return) and closes the store. It blocks.
func (n *naive) stop() {
	n.cancel()
	if err := n.nc.Drain(); err != nil {
		n.nc.Close()
	}
	<-n.closed
	n.store.Close()
}
