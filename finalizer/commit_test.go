package finalizer_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/finalizer-dev/finalizer/control"
	"github.com/finalizer-dev/finalizer/finalizer"
)

// batchFake is a fakeStore that also applies batches, one advance after
// the other, and counts them.
type batchFake struct {
	*fakeStore
	mu      sync.Mutex
	batches int
	rows    int
}

func (s *batchFake) AdvanceBatch(ctx context.Context, as []control.Advance) ([]control.AdvanceResult, error) {
	s.mu.Lock()
	s.batches++
	s.rows += len(as)
	s.mu.Unlock()
	res := make([]control.AdvanceResult, len(as))
	for i, a := range as {
		res[i].Verdict, res[i].Moved, res[i].Err = s.fakeStore.Advance(ctx, a)
	}
	return res, nil
}

func (s *batchFake) counts() (batches, rows int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.batches, s.rows
}

// A registry whose store applies batches sends its trackers' advances
// through group commit: every verdict lands, one row per (table, period),
// and nothing goes around it.
func TestRegistryGroupCommit(t *testing.T) {
	store := &batchFake{fakeStore: newFakeStore()}
	bus := newFakeBus()
	reg := finalizer.NewRegistry(finalizer.RegistryConfig{Bus: bus, Store: store,
		Clock: newFakeClock(time.Date(2026, 9, 29, 0, 0, 0, 0, time.UTC))})
	const runs = 40
	runID := func(i int) string { return fmt.Sprintf("e225d92f-2545-48f8-87a2-%012d", i) }
	for i := range runs {
		if _, err := reg.Track(context.Background(), finalizer.Request{QueryID: queryA, RunID: runID(i),
			Table: fmt.Sprintf("t%d", i), Spec: hourSpec(t)}); err != nil {
			t.Fatal(err)
		}
	}
	for i := range runs {
		bus.Publish(cdcProgress(runID(i), "2026-09-28T14:05:00"))
		bus.Publish(cdcProgress(runID(i), "2026-09-28T14:35:00")) // same hour: no write
	}
	eventually(t, "every verdict", func() bool {
		for i := range runs {
			if !store.Verdict(fmt.Sprintf("t%d", i)).Equal(utc("2026-09-28T14:00:00Z")) {
				return false
			}
		}
		return true
	})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := reg.Close(ctx); err != nil {
		t.Fatal(err)
	}
	batches, rows := store.counts()
	if rows != runs || len(store.Calls()) != runs {
		t.Errorf("%d rows in %d batches, %d advances; want %d rows, all through batches", rows, batches, len(store.Calls()), runs)
	}
}
