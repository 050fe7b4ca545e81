package finalizer

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/finalizer-dev/finalizer/control"
)

// gatedBatchStore applies batches in memory, forward-only; while gate is
// set, each batch waits for it to be closed.
type gatedBatchStore struct {
	mu      sync.Mutex
	rows    map[string]time.Time
	sizes   []int
	order   []string // the tables of every batch, in the order sent
	err     error
	busy    map[string]bool // tables that fail with control.ErrBusy
	gate    chan struct{}
	entered chan struct{} // receives once per batch that reached the store
}

func newGatedBatchStore() *gatedBatchStore {
	return &gatedBatchStore{rows: map[string]time.Time{}, entered: make(chan struct{}, 100)}
}

func (s *gatedBatchStore) Advance(ctx context.Context, a control.Advance) (control.Verdict, bool, error) {
	return advanceOne(ctx, s.AdvanceBatch, a)
}

// advanceOne is a fake store's Advance: a batch of one through batch.
func advanceOne(ctx context.Context, batch func(context.Context, []control.Advance) ([]control.AdvanceResult, error), a control.Advance) (control.Verdict, bool, error) {
	res, err := batch(ctx, []control.Advance{a})
	if err != nil {
		return control.Verdict{}, false, err
	}
	return res[0].Verdict, res[0].Moved, res[0].Err
}

func (s *gatedBatchStore) AdvanceBatch(ctx context.Context, as []control.Advance) ([]control.AdvanceResult, error) {
	s.entered <- struct{}{}
	s.mu.Lock()
	gate := s.gate
	s.mu.Unlock()
	if gate != nil {
		select {
		case <-gate:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.sizes = append(s.sizes, len(as))
	for _, a := range as {
		s.order = append(s.order, a.Table)
	}
	res := make([]control.AdvanceResult, len(as))
	if s.err != nil {
		for i := range res {
			res[i].Err = s.err
		}
		return res, s.err
	}
	applyForward(s.rows, s.busy, as, res)
	return res, nil
}

// applyForward applies as to rows in memory, forward-only, into res: a
// table in busy fails with control.ErrBusy, as one another session holds
// locked would.
func applyForward(rows map[string]time.Time, busy map[string]bool, as []control.Advance, res []control.AdvanceResult) {
	for i, a := range as {
		if busy[a.Table] {
			res[i].Err = fmt.Errorf("advance %s: %w", a.Table, control.ErrBusy)
			continue
		}
		cur, ok := rows[a.Table]
		if !ok || a.FinalizedUntil.After(cur) {
			rows[a.Table], cur = a.FinalizedUntil, a.FinalizedUntil
			res[i].Moved = true
		}
		res[i].Verdict = control.Verdict{Table: a.Table, FinalizedUntil: cur}
	}
}

func (s *gatedBatchStore) batchSizes() []int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]int(nil), s.sizes...)
}

// waitFor polls cond until it holds or a deadline passes.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

func hour(h int) time.Time { return time.Date(2026, 9, 28, h, 0, 0, 0, time.UTC) }

// Advances that land while a statement is in flight ride together in the
// next one, and each caller gets its own table's result.
func TestCommitterGathersAdvancesThatLandTogether(t *testing.T) {
	store := newGatedBatchStore()
	store.gate = make(chan struct{})
	c := newCommitter(context.Background(), store, NewMetrics(nil, nil), 1000, 1, time.Minute)
	defer c.close()

	type result struct {
		table string
		v     control.Verdict
		moved bool
		err   error
	}
	results := make(chan result, 51)
	advance := func(table string, until time.Time) {
		v, moved, err := c.Advance(context.Background(), control.Advance{Table: table, FinalizedUntil: until})
		results <- result{table, v, moved, err}
	}
	go advance("first", hour(1))
	<-store.entered // the first advance is in flight, alone
	for i := range 50 {
		go advance(fmt.Sprintf("t%02d", i), hour(2))
	}
	waitFor(t, "50 advances queued", func() bool { return c.queued() == 50 })
	close(store.gate)
	for range 51 {
		r := <-results
		want := hour(2)
		if r.table == "first" {
			want = hour(1)
		}
		if r.err != nil || !r.moved || r.v.Table != r.table || !r.v.FinalizedUntil.Equal(want) {
			t.Errorf("%s: %+v moved %v err %v", r.table, r.v, r.moved, r.err)
		}
	}
	if got := store.batchSizes(); fmt.Sprint(got) != "[1 50]" {
		t.Errorf("batch sizes = %v, want [1 50]", got)
	}
}

// A batch that fails fails every advance in it, and an advance whose
// caller gave up while queued is not sent.
func TestCommitterErrorsAndCancellation(t *testing.T) {
	store := newGatedBatchStore()
	store.gate = make(chan struct{})
	c := newCommitter(context.Background(), store, NewMetrics(nil, nil), 1000, 1, time.Minute)
	defer c.close()

	first := make(chan error, 1)
	go func() {
		_, _, err := c.Advance(context.Background(), control.Advance{Table: "a", FinalizedUntil: hour(1)})
		first <- err
	}()
	<-store.entered
	ctx, cancel := context.WithCancel(context.Background())
	gaveUp := make(chan error, 1)
	go func() {
		_, _, err := c.Advance(ctx, control.Advance{Table: "gone", FinalizedUntil: hour(1)})
		gaveUp <- err
	}()
	waitFor(t, "queued", func() bool { return c.queued() == 1 })
	cancel()
	if err := <-gaveUp; !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled advance: err = %v", err)
	}
	down := errors.New("postgresql unavailable")
	store.mu.Lock()
	store.err = down
	store.mu.Unlock()
	close(store.gate)
	if err := <-first; !errors.Is(err, down) {
		t.Fatalf("advance of a failed batch: err = %v, want %v", err, down)
	}
	// The cancelled one is dropped before a statement: the next advance,
	// handled after it by the one committer, is the second batch.
	store.mu.Lock()
	store.err = nil
	store.mu.Unlock()
	if _, moved, err := c.Advance(context.Background(), control.Advance{Table: "last", FinalizedUntil: hour(1)}); err != nil || !moved {
		t.Fatalf("last advance: moved %v, err %v", moved, err)
	}
	if got := store.batchSizes(); fmt.Sprint(got) != "[1 1]" {
		t.Errorf("batch sizes = %v, want [1 1]", got)
	}
	store.mu.Lock()
	_, written := store.rows["gone"]
	store.mu.Unlock()
	if written {
		t.Error("an advance whose caller gave up was written")
	}
}

// A table another session holds locked (control.ErrBusy) has its next
// advances sent alone, so that its retries do not make every group wait
// the lock wait; once one succeeds it rides in groups again.
func TestCommitterSendsABusyTableAlone(t *testing.T) {
	store := newGatedBatchStore()
	store.busy = map[string]bool{"held": true}
	c := newCommitter(context.Background(), store, NewMetrics(nil, nil), 1000, 1, time.Minute)
	defer c.close()

	round := func(h int) error { // the advance of held
		store.mu.Lock()
		store.gate = make(chan struct{})
		gate := store.gate
		store.mu.Unlock()
		errs := make(chan error, 12)
		go func() { // holds the committer while the round queues
			_, _, err := c.Advance(context.Background(), control.Advance{Table: "first", FinalizedUntil: hour(h)})
			errs <- err
		}()
		<-store.entered
		var held error
		heldDone := make(chan struct{})
		go func() {
			_, _, held = c.Advance(context.Background(), control.Advance{Table: "held", FinalizedUntil: hour(h)})
			close(heldDone)
		}()
		for i := range 10 {
			go func() {
				_, _, err := c.Advance(context.Background(), control.Advance{Table: fmt.Sprintf("t%d", i), FinalizedUntil: hour(h)})
				errs <- err
			}()
		}
		waitFor(t, "the round queued", func() bool {
			c.mu.Lock()
			defer c.mu.Unlock()
			return len(c.queue)-c.head+len(c.alone) == 11
		})
		close(gate)
		for range 11 {
			if err := <-errs; err != nil {
				t.Errorf("round %d: %v", h, err)
			}
		}
		<-heldDone
		for range len(store.entered) {
			<-store.entered
		}
		return held
	}

	// Round 1: held rides with the others and fails alone.
	if err := round(1); !errors.Is(err, control.ErrBusy) {
		t.Fatalf("held: %v, want ErrBusy", err)
	}
	if got := fmt.Sprint(store.batchSizes()); got != "[1 11]" {
		t.Errorf("round 1 groups %s, want [1 11]", got)
	}
	// Round 2: held is sent alone, before the group of the others.
	if err := round(2); !errors.Is(err, control.ErrBusy) {
		t.Fatalf("held: %v, want ErrBusy", err)
	}
	if got := fmt.Sprint(store.batchSizes()); got != "[1 11 1 1 10]" {
		t.Errorf("round 2 groups %s, want [1 11 1 1 10]", got)
	}
	// Round 3: the lock is gone; held, still sent alone, succeeds ...
	store.mu.Lock()
	store.busy = nil
	store.mu.Unlock()
	if err := round(3); err != nil {
		t.Fatalf("held: %v", err)
	}
	// ... and round 4 has it in the group again.
	if err := round(4); err != nil {
		t.Fatalf("held: %v", err)
	}
	if got := fmt.Sprint(store.batchSizes()); got != "[1 11 1 1 10 1 1 10 1 11]" {
		t.Errorf("groups %s, want [1 11 1 1 10 1 1 10 1 11]", got)
	}
}

// A queue that outgrows its room several times while callers add to it
// at once (the queue grows with c.mu released, growQueue) loses no
// advance and keeps them oldest first: advances queued one after the
// other by one caller come out in that order, in groups of maxBatch.
func TestCommitterQueueGrowsWithoutLosingAdvances(t *testing.T) {
	store := newGatedBatchStore()
	store.gate = make(chan struct{})
	c := newCommitter(context.Background(), store, NewMetrics(nil, nil), 250, 1, time.Minute)
	defer c.close()

	var got sync.Map
	var wg sync.WaitGroup
	add := func(table string) {
		wg.Add(1)
		c.advanceAsync(context.Background(), control.Advance{Table: table, FinalizedUntil: hour(1)}, func(r control.AdvanceResult) {
			got.Store(table, r)
			wg.Done()
		})
	}
	add("first")
	<-store.entered // in flight, alone: the rest queue behind it
	const callers, each = 8, 125
	var adders sync.WaitGroup
	for g := range callers {
		adders.Go(func() {
			for i := range each {
				add(fmt.Sprintf("c%d-%03d", g, i))
			}
		})
	}
	adders.Wait()
	for i := range 500 { // one caller's, in order, behind the others'
		add(fmt.Sprintf("z%03d", i))
	}
	if n := c.queued(); n != callers*each+500 {
		t.Fatalf("queued %d, want %d", n, callers*each+500)
	}
	close(store.gate)
	wg.Wait()
	for g := range callers {
		for i := range each {
			table := fmt.Sprintf("c%d-%03d", g, i)
			r, ok := got.Load(table)
			if !ok || r.(control.AdvanceResult).Err != nil || !r.(control.AdvanceResult).Moved {
				t.Fatalf("%s: result %v (found %v)", table, r, ok)
			}
		}
	}
	if got := store.batchSizes(); fmt.Sprint(got) != "[1 250 250 250 250 250 250]" {
		t.Errorf("batch sizes = %v, want [1 250 250 250 250 250 250]", got)
	}
	// The last 500 are the last two groups, in the order they were added.
	store.mu.Lock()
	defer store.mu.Unlock()
	last := store.order[len(store.order)-500:]
	for i, table := range last {
		if want := fmt.Sprintf("z%03d", i); table != want {
			t.Fatalf("advance %d of the last 500 sent is %s, want %s", i, table, want)
		}
	}
}

// TestCommitterSignalsASurge (ADR 0022, addendum 10): the group commit
// calls its surge hook each time its queue fills to maxBatch waiting
// advances (a burst), and not for a queue below it; every advance still
// gets its result.
func TestCommitterSignalsASurge(t *testing.T) {
	store := newGatedBatchStore()
	store.gate = make(chan struct{})
	c := newCommitter(context.Background(), store, NewMetrics(nil, nil), 10, 1, time.Minute)
	defer c.close()
	var surges atomic.Int64
	c.surge = func() { surges.Add(1) }

	done := make(chan error, 26)
	advance := func(table string) {
		_, _, err := c.Advance(context.Background(), control.Advance{Table: table, FinalizedUntil: hour(1)})
		done <- err
	}
	go advance("first")
	<-store.entered // in flight, alone: the rest queue
	for i := range 9 {
		go advance(fmt.Sprintf("t%02d", i))
	}
	waitFor(t, "9 advances queued", func() bool { return c.queued() == 9 })
	if n := surges.Load(); n != 0 {
		t.Fatalf("%d surges with 9 advances queued below a group of 10", n)
	}
	for i := 9; i < 25; i++ {
		go advance(fmt.Sprintf("t%02d", i))
	}
	waitFor(t, "25 advances queued", func() bool { return c.queued() == 25 })
	if n := surges.Load(); n != 1 {
		t.Fatalf("%d surges with 25 advances queued in groups of 10: want 1 (the queue filled once)", n)
	}
	close(store.gate)
	for range 26 {
		if err := <-done; err != nil {
			t.Error(err)
		}
	}
}

// TestCommitterGroupBuffersHoldNothing: a committer goroutine's group
// slices (groupBufs), kept from one group to the next, hold no advance
// once the group's results are handed out, and a second group reuses
// them with its own results.
func TestCommitterGroupBuffersHoldNothing(t *testing.T) {
	store := newGatedBatchStore()
	c := newCommitter(context.Background(), store, NewMetrics(nil, nil), 1000, 1, time.Minute)
	defer c.close()
	var bufs groupBufs
	for round := range 2 {
		var got []control.AdvanceResult
		batch := make([]*pendingAdvance, 0, 3)
		for i := range 3 - round {
			batch = append(batch, &pendingAdvance{ctx: context.Background(),
				a:    control.Advance{Table: fmt.Sprintf("r%dt%d", round, i), FinalizedUntil: hour(1 + round), Sources: []string{"s"}},
				done: func(r control.AdvanceResult) { got = append(got, r) }})
		}
		c.commit(batch, &bufs)
		for i, r := range got {
			if r.Err != nil || r.Verdict.Table != fmt.Sprintf("r%dt%d", round, i) || !r.Verdict.FinalizedUntil.Equal(hour(1+round)) {
				t.Errorf("round %d, advance %d: %+v", round, i, r)
			}
		}
		if len(got) != 3-round {
			t.Errorf("round %d: %d results, want %d", round, len(got), 3-round)
		}
		if cap(bufs.as) < 3 || len(bufs.as) != 0 || len(bufs.live) != 0 {
			t.Fatalf("round %d: the buffers were not kept empty (len %d/%d, cap %d)", round, len(bufs.as), len(bufs.live), cap(bufs.as))
		}
		for i, a := range bufs.as[:cap(bufs.as)] {
			if a.Table != "" || a.Sources != nil {
				t.Errorf("round %d: the kept advances slice still holds %q at %d", round, a.Table, i)
			}
		}
		for i, p := range bufs.live[:cap(bufs.live)] {
			if p != nil {
				t.Errorf("round %d: the kept live slice still holds an advance at %d", round, i)
			}
		}
	}
}

// BenchmarkCommitGroup is the committer's own part of one group of 1,000
// advances (the store's results made and handed out, no database): with
// the goroutine's kept slices (kept) and with slices made for the group
// (fresh, as before groupBufs). B/op is what a burst allocates per
// group on the committer's side.
func BenchmarkCommitGroup(b *testing.B) {
	store := &countingBatchStore{}
	c := newCommitter(context.Background(), store, NewMetrics(nil, nil), 1000, 1, time.Minute)
	defer c.close()
	done := func(control.AdvanceResult) {}
	batch := make([]*pendingAdvance, 1000)
	for i := range batch {
		batch[i] = &pendingAdvance{ctx: context.Background(), done: done,
			a: control.Advance{Table: fmt.Sprintf("t%04d", i), FinalizedUntil: hour(1), QueryID: "q", RunID: "r", Sources: []string{"s"}}}
	}
	for _, kept := range []bool{true, false} {
		name := map[bool]string{true: "kept", false: "fresh"}[kept]
		b.Run(name, func(b *testing.B) {
			var bufs *groupBufs
			if kept {
				bufs = &groupBufs{}
			}
			b.ReportAllocs()
			for b.Loop() {
				c.commit(batch, bufs)
			}
		})
	}
}

// countingBatchStore returns a result per advance and keeps nothing.
type countingBatchStore struct{ movingStore }

func (s *countingBatchStore) AdvanceBatch(_ context.Context, as []control.Advance) ([]control.AdvanceResult, error) {
	res := make([]control.AdvanceResult, len(as))
	for i, a := range as {
		res[i].Verdict = control.Verdict{Table: a.Table, FinalizedUntil: a.FinalizedUntil}
	}
	return res, nil
}
