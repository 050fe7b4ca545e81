package finalizer_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/finalizer-dev/finalizer/listener"
)

// answer is what a scriptedMarker's StreamPosition returns: the
// stream's last sequence.
type answer struct {
	last uint64
	err  error
}

// scriptedMarker is a fakeBus whose stream's state is read by the test:
// each StreamPosition call is handed to the test (calls), which answers it.
type scriptedMarker struct {
	*fakeBus
	calls chan chan answer
}

func (b *scriptedMarker) StreamPosition(ctx context.Context) (listener.StreamPosition, error) {
	ch := make(chan answer, 1)
	select {
	case b.calls <- ch:
	case <-ctx.Done():
		return listener.StreamPosition{}, ctx.Err()
	}
	select {
	case a := <-ch:
		return listener.StreamPosition{LastSeq: a.last, Created: streamCreated}, a.err
	case <-ctx.Done():
		return listener.StreamPosition{}, ctx.Err()
	}
}

// newScriptedRig is newMarkRig with a scriptedMarker.
func newScriptedRig(t *testing.T) (*rig, *scriptedMarker) {
	t.Helper()
	sm := &scriptedMarker{fakeBus: newFakeBus(), calls: make(chan chan answer)}
	return newRigOver(t, sm, &batchFake{fakeStore: newFakeStore()}, rigOptions{}), sm
}

// call is the next StreamPosition call of sm.
func (sm *scriptedMarker) call(t *testing.T) chan answer {
	t.Helper()
	select {
	case ch := <-sm.calls:
		return ch
	case <-time.After(5 * time.Second):
		t.Fatal("the stream's state was not read")
		return nil
	}
}

// TestAStreamReadForAnEarlierRewindDoesNotReplaceALaterOne (ADR 0019,
// addendum of 2026-12-06, review F3): the stream's state read for
// rewind 1 answered after rewind 2 was heard, and replaced rewind 2's
// entry (its stored rewound_at, that it was heard live) with rewind 1's.
// The late answer is dropped; rewind 2 keeps its entry and its own read.
func TestAStreamReadForAnEarlierRewindDoesNotReplaceALaterOne(t *testing.T) {
	r, sm := newScriptedRig(t)
	at1 := utc("2026-09-29T00:00:00Z")
	r.store.rewind("t_a", utc("2026-09-28T14:00:00Z"), at1)
	r.reg.Rewound("t_a", utc("2026-09-28T14:00:00Z"), at1)
	first := sm.call(t)
	r.clock.Advance(10 * time.Second)
	heard2 := r.clock.Now()
	at2 := at1.Add(10 * time.Second)
	r.store.rewind("t_a", utc("2026-09-28T12:00:00Z"), at2)
	r.reg.Rewound("t_a", utc("2026-09-28T12:00:00Z"), at2)
	second := sm.call(t)
	first <- answer{last: 100}
	eventually(t, "rewind 1's answer handled", func() bool {
		return r.logs.FilterMessageSnippet("the event stream's state read for a rewind is not kept").Len() == 1 ||
			r.logs.FilterMessageSnippet("the event stream's state when the rewind was heard").Len() == 1
	})
	second <- answer{last: 200}
	eventually(t, "rewind 2's answer kept", func() bool {
		_, _, _, _, read := r.reg.StreamMarkOf("t_a")
		return read
	})
	rewind, stored, last, heard, _ := r.reg.StreamMarkOf("t_a")
	if !rewind.Equal(heard2) || !stored.Equal(at2) || !heard || last != 200 {
		t.Fatalf("t_a's mark = rewind %v stored %v heard %v last %v; want rewind 2's: %v, %v, true, 200",
			rewind, stored, heard, last, heard2, at2)
	}
}

// TestAFailedStreamReadAfterARewindIsTriedAgain (ADR 0019, addendum of
// 2026-12-06, review F1b): NATS stalled as the rewind was heard, the one
// read of the stream's state failed, and the margin held a reset run's
// only progress, stored 15 s after the rewind, for good. The read is
// tried again with backoff until it answers; the progress is applied.
func TestAFailedStreamReadAfterARewindIsTriedAgain(t *testing.T) {
	r, sm := newScriptedRig(t)
	rewoundAt := utc("2026-09-29T00:00:00Z")
	r.store.rewind("t_a", utc("2026-09-28T14:00:00Z"), rewoundAt)
	r.reg.Rewound("t_a", utc("2026-09-28T14:00:00Z"), rewoundAt)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := 0; i < 3; i++ {
			var ch chan answer
			select {
			case ch = <-sm.calls:
			case <-time.After(5 * time.Second):
				return // the test fails waiting for the read
			}
			if i < 2 {
				ch <- answer{err: errors.New("nats: timeout")}
				continue
			}
			ch <- answer{last: 100}
		}
	}()
	eventually(t, "the stream's state read on the third try", func() bool {
		r.clock.Advance(time.Second) // fires the backoff's timer
		return r.logs.FilterMessageSnippet("the event stream's state when the rewind was heard").Len() == 1
	})
	<-done
	if n := r.logs.FilterMessageSnippet("could not read the event stream's state after hearing a rewind, retrying").Len(); n != 2 {
		t.Errorf("%d failed reads logged, want 2", n)
	}
	r.retainLast(rewoundAt.Add(10*time.Second), rewoundAt.Add(15*time.Second), 101)
	r.track(t, runA, "t_a")
	r.movesTo18(t, "t_a", "the reset run's progress applied")
}
