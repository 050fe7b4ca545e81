package listener

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// waitIter is a MessagesContext whose Next waits for a message or for the
// end of the scanWait's current context, as NextContext makes the real
// one do.
type waitIter struct {
	jetstream.MessagesContext
	w    *scanWait
	msgs chan jetstream.Msg
}

func (it *waitIter) Next(...jetstream.NextOpt) (jetstream.Msg, error) {
	it.w.mu.Lock()
	ctx := it.w.ctx
	it.w.mu.Unlock()
	select {
	case m := <-it.msgs:
		return m, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// TestScanWaitBoundsEachWait: a wait that brings nothing within d returns
// nats.ErrTimeout, as NextMaxWait's did, and the next wait is not ended at
// once by it (a fresh context); a message ends a wait at once, and the
// time until the next wait (the scan's visit) counts in no wait; the
// parent's cancellation is returned as itself, not as a timeout.
func TestScanWaitBoundsEachWait(t *testing.T) {
	parent, cancel := context.WithCancel(context.Background())
	defer cancel()
	const d = 30 * time.Millisecond
	w := newScanWait(parent, d)
	defer w.stop()
	it := &waitIter{w: w, msgs: make(chan jetstream.Msg, 1)}

	start := time.Now()
	if _, err := w.next(it); !errors.Is(err, nats.ErrTimeout) {
		t.Fatalf("a wait with nothing: %v, want nats.ErrTimeout", err)
	}
	if took := time.Since(start); took < d {
		t.Fatalf("the wait ended after %s, before its bound %s", took, d)
	}
	for i := range 8 {
		// The time between two waits (the scan's visit of a message)
		// is no wait: however long, it ends none.
		it.msgs <- nil
		if _, err := w.next(it); err != nil {
			t.Fatalf("round %d: a wait with a message: %v", i, err)
		}
		time.Sleep(2 * d)
	}
	if _, err := w.next(it); !errors.Is(err, nats.ErrTimeout) {
		t.Fatalf("a second wait with nothing: %v, want nats.ErrTimeout", err)
	}
	cancel()
	if _, err := w.next(it); !errors.Is(err, context.Canceled) || errors.Is(err, nats.ErrTimeout) {
		t.Fatalf("after the parent's cancellation: %v, want context.Canceled", err)
	}
}

// TestScanWaitIgnoresAnEarlierWaitsTimer: the timer of a wait that fired
// as its message came, its callback run late (after the next wait
// renewed the context and armed the timer again), ended the next wait at
// once: a spurious stall of the scan. A callback that comes before the
// current wait lasted its bound ends nothing.
func TestScanWaitIgnoresAnEarlierWaitsTimer(t *testing.T) {
	const d = time.Hour
	w := newScanWait(context.Background(), d)
	defer w.stop()
	w.expire() // an earlier wait's callback, run late
	w.mu.Lock()
	ctx := w.ctx
	w.mu.Unlock()
	if ctx.Err() != nil {
		t.Fatal("a late callback of an earlier wait's timer ended the current wait")
	}
	w.mu.Lock()
	w.armed = time.Now().Add(-d)
	w.mu.Unlock()
	w.expire()
	if ctx.Err() == nil {
		t.Fatal("a wait that lasted its bound was not ended")
	}
}
