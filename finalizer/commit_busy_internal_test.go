package finalizer

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/finalizer-dev/finalizer/control"
)

// lockWaitStore is a BatchStore in which some tables are held locked by
// another session: a batch that holds one waits the lock wait, then
// fails those tables with control.ErrBusy and applies the others.
type lockWaitStore struct {
	wait time.Duration
	mu   sync.Mutex
	busy map[string]bool
	rows map[string]time.Time
}

func (s *lockWaitStore) Advance(ctx context.Context, a control.Advance) (control.Verdict, bool, error) {
	return advanceOne(ctx, s.AdvanceBatch, a)
}

func (s *lockWaitStore) AdvanceBatch(ctx context.Context, as []control.Advance) ([]control.AdvanceResult, error) {
	s.mu.Lock()
	held := false
	for _, a := range as {
		held = held || s.busy[a.Table]
	}
	s.mu.Unlock()
	if held {
		select {
		case <-time.After(s.wait):
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	res := make([]control.AdvanceResult, len(as))
	applyForward(s.rows, s.busy, as, res)
	return res, nil
}

// TestBusyTablesDoNotStarveTheOthers: while many tables are held locked
// by another session and their trackers keep retrying (each retry a lock
// wait, sent alone), the advances of every other table are still applied
// within about one lock wait: the advances sent alone never take every
// committer, however many there are, nor the only one.
func TestBusyTablesDoNotStarveTheOthers(t *testing.T) {
	for _, committers := range []int{1, 2} {
		t.Run(fmt.Sprintf("committers=%d", committers), func(t *testing.T) {
			const wait = 50 * time.Millisecond
			store := &lockWaitStore{wait: wait, busy: map[string]bool{}, rows: map[string]time.Time{}}
			for i := range 8 {
				store.busy[fmt.Sprintf("held%d", i)] = true
			}
			c := newCommitter(context.Background(), store, NewMetrics(nil, nil), 1000, committers, time.Minute)
			defer c.close()
			ctx, stop := context.WithCancel(context.Background())
			var wg sync.WaitGroup
			for i := range 8 { // the held tables' trackers, retrying at once
				wg.Go(func() {
					for h := 1; ctx.Err() == nil; h++ {
						_, _, err := c.Advance(context.Background(), control.Advance{Table: fmt.Sprintf("held%d", i), FinalizedUntil: hour(h % 24)})
						if !errors.Is(err, control.ErrBusy) {
							t.Errorf("held%d: %v, want ErrBusy", i, err)
							return
						}
					}
				})
			}
			time.Sleep(4 * wait) // every held table has been found busy
			// Starved, every advance of the free table would wait behind
			// the 8 held tables' retries (8 lock waits or more, each
			// time); the median of 5 tells that apart from one advance
			// delayed by the machine (the race detector's CI pass runs
			// under a load of 10: one of 5 took 220 ms there).
			took := make([]time.Duration, 0, 5)
			for h := 1; h <= 5; h++ {
				start := time.Now()
				actx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
				_, _, err := c.Advance(actx, control.Advance{Table: "free", FinalizedUntil: hour(h)})
				cancel()
				took = append(took, time.Since(start))
				if err != nil {
					t.Errorf("an advance of a table nobody holds: %v after %v", err, time.Since(start))
					break
				}
			}
			stop()
			wg.Wait()
			slices.Sort(took)
			if median := took[len(took)/2]; median > 4*wait {
				t.Errorf("an advance of a table nobody holds took %v (median; all %v) behind 8 held tables' retries (lock wait %v)", median, took, wait)
			}
		})
	}
}

// TestBusyTablesExpireForNewOnes: the tables found busy whose minute is
// up, and that no advance came for since, give their places to tables
// found busy later; before, 64 of them held the places for ever and no
// table was sent alone again.
func TestBusyTablesExpireForNewOnes(t *testing.T) {
	c := &committer{busy: map[string]time.Time{}}
	past := time.Now().Add(-time.Second)
	for i := range maxBusy {
		c.busy[fmt.Sprintf("gone%d", i)] = past
	}
	p := &pendingAdvance{ctx: context.Background(), a: control.Advance{Table: "new"}}
	c.noteBusy([]*pendingAdvance{p}, []control.AdvanceResult{{Err: control.ErrBusy}})
	if _, ok := c.busy["new"]; !ok || len(c.busy) != 1 {
		t.Errorf("busy %d tables, new among them: %v; want only new", len(c.busy), ok)
	}
	for i := range maxBusy { // still busy: they keep their places
		c.busy[fmt.Sprintf("held%d", i)] = time.Now().Add(time.Minute)
	}
	p.a.Table = "later"
	c.noteBusy([]*pendingAdvance{p}, []control.AdvanceResult{{Err: control.ErrBusy}})
	if _, ok := c.busy["later"]; ok {
		t.Error("a table beyond maxBusy live ones was sent alone")
	}
}
