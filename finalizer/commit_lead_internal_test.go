package finalizer

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/finalizer-dev/finalizer/control"
)

// leadAsync runs c.lead for a on a goroutine of its own; the channel gets
// its result and whether it led.
type leadResult struct {
	r   control.AdvanceResult
	led bool
}

func leadAsync(c *committer, ctx context.Context, a control.Advance) <-chan leadResult {
	ch := make(chan leadResult, 1)
	go func() {
		r, led := c.lead(ctx, a)
		ch <- leadResult{r, led}
	}()
	return ch
}

// waitQuiet waits until no group is being sent (a committer goroutine
// hands its advances their results before it frees its slot).
func waitQuiet(t *testing.T, c *committer) {
	t.Helper()
	waitFor(t, "no group in flight", func() bool {
		c.mu.Lock()
		defer c.mu.Unlock()
		return c.sending == 0
	})
}

// An advance that finds nothing queued and a slot free is sent at once by
// its caller, alone; while it is in flight the others queue (a caller
// cannot lead: the one slot is taken), no committer goroutine sends them
// (the slot is the leader's), and once the leader's statement returns
// they go together in one group. Every caller gets its own result.
func TestLeaderSendsAloneAndOthersJoinTheNextGroup(t *testing.T) {
	store := newGatedBatchStore()
	store.gate = make(chan struct{})
	c := newCommitter(context.Background(), store, NewMetrics(nil, nil), 1000, 1, time.Minute)
	defer c.close()

	leader := leadAsync(c, context.Background(), control.Advance{Table: "leader", FinalizedUntil: hour(1)})
	<-store.entered // the leader's statement is in flight
	if _, led := c.lead(context.Background(), control.Advance{Table: "x", FinalizedUntil: hour(1)}); led {
		t.Fatal("led while the only slot was taken")
	}
	results := make(chan control.AdvanceResult, 20)
	for i := range 20 {
		c.advanceAsync(context.Background(), control.Advance{Table: fmt.Sprintf("t%02d", i), FinalizedUntil: hour(2)},
			func(r control.AdvanceResult) { results <- r })
	}
	if _, led := c.lead(context.Background(), control.Advance{Table: "y", FinalizedUntil: hour(1)}); led {
		t.Fatal("led while advances were queued")
	}
	time.Sleep(20 * time.Millisecond) // a committer goroutine that took a group now would show in entered
	if n := len(store.entered); n != 0 {
		t.Fatalf("%d statements began beside the leader's; at most 1 group may be in flight", n)
	}
	close(store.gate)
	lr := <-leader
	if !lr.led || lr.r.Err != nil || !lr.r.Moved || lr.r.Verdict.Table != "leader" || !lr.r.Verdict.FinalizedUntil.Equal(hour(1)) {
		t.Fatalf("leader: %+v", lr)
	}
	for range 20 {
		if r := <-results; r.Err != nil || !r.Moved || !r.Verdict.FinalizedUntil.Equal(hour(2)) {
			t.Errorf("follower: %+v", r)
		}
	}
	if got := fmt.Sprint(store.batchSizes()); got != "[1 20]" {
		t.Errorf("groups %s, want [1 20]", got)
	}
	// Quiet again: the next advance leads.
	waitQuiet(t, c)
	if r, led := c.lead(context.Background(), control.Advance{Table: "leader", FinalizedUntil: hour(3)}); !led || r.Err != nil || !r.Moved {
		t.Fatalf("quiet committer: led %v, %+v", led, r)
	}
}

// A caller leads only when no group is in flight at all: with two
// slots and a leader's statement in flight, a second caller is refused
// (during a flood the queue empties at every group a committer takes, and
// leaders of one advance then took the slots from the groups), the
// advances queued meanwhile go as one group in the second slot, and with
// both slots taken nothing more begins.
func TestLeadersShareTheSlotsWithTheCommitters(t *testing.T) {
	store := newGatedBatchStore()
	store.gate = make(chan struct{})
	c := newCommitter(context.Background(), store, NewMetrics(nil, nil), 1000, 2, time.Minute)
	defer c.close()

	first := leadAsync(c, context.Background(), control.Advance{Table: "a", FinalizedUntil: hour(1)})
	<-store.entered
	if r := <-leadAsync(c, context.Background(), control.Advance{Table: "b", FinalizedUntil: hour(1)}); r.led {
		t.Fatal("a second caller led while a leader's group was in flight")
	}
	done := make(chan control.AdvanceResult, 5)
	for i := range 5 {
		c.advanceAsync(context.Background(), control.Advance{Table: fmt.Sprintf("q%d", i), FinalizedUntil: hour(1)},
			func(r control.AdvanceResult) { done <- r })
	}
	<-store.entered // the queued advances' group, in the second slot
	if r := <-leadAsync(c, context.Background(), control.Advance{Table: "c", FinalizedUntil: hour(1)}); r.led {
		t.Fatal("a third group went in flight with two slots")
	}
	c.advanceAsync(context.Background(), control.Advance{Table: "late", FinalizedUntil: hour(1)},
		func(r control.AdvanceResult) { done <- r })
	time.Sleep(20 * time.Millisecond)
	if n := len(store.entered); n != 0 {
		t.Fatalf("%d statements began with both slots taken", n)
	}
	close(store.gate)
	if r := <-first; !r.led || r.r.Err != nil {
		t.Errorf("leader: %+v", r)
	}
	for range 6 {
		if r := <-done; r.Err != nil || !r.Moved {
			t.Errorf("queued: %+v", r)
		}
	}
	// Three statements: the leader's alone, the group the second slot
	// took (as many of the five as were queued when its committer woke),
	// and after the gate the rest with the late advance, in one group.
	sizes := store.batchSizes()
	slices.Sort(sizes) // the statements end in any order
	sum := 0
	for _, n := range sizes {
		sum += n
	}
	if len(sizes) != 3 || sizes[0] != 1 || sum != 7 {
		t.Errorf("groups %v, want 3 of 7 advances in all: the leader's alone, the queued ones, the rest with the late one", sizes)
	}
}

// A leader's statement that fails gives the leader the error, and the
// followers queued meanwhile are sent in their own group, unharmed. A
// leader's advance whose table is busy (control.ErrBusy) makes its next
// advances go alone: the table's next lead is refused and its advance,
// queued, is sent alone before the others' group. A leader whose caller
// has gone is not sent.
func TestLeaderErrorsBusyTablesAndCancellation(t *testing.T) {
	store := newGatedBatchStore()
	store.gate = make(chan struct{})
	down := errors.New("postgresql unavailable")
	c := newCommitter(context.Background(), failingTables{store, map[string]error{"a": down}}, NewMetrics(nil, nil), 1000, 1, time.Minute)
	defer c.close()

	leader := leadAsync(c, context.Background(), control.Advance{Table: "a", FinalizedUntil: hour(1)})
	<-store.entered
	results := make(chan control.AdvanceResult, 3)
	for _, table := range []string{"b", "c", "d"} {
		c.advanceAsync(context.Background(), control.Advance{Table: table, FinalizedUntil: hour(1)},
			func(r control.AdvanceResult) { results <- r })
	}
	waitFor(t, "followers queued", func() bool { return c.queued() == 3 })
	store.mu.Lock()
	close(store.gate)
	store.gate = nil
	store.mu.Unlock()
	if r := <-leader; !r.led || !errors.Is(r.r.Err, down) {
		t.Fatalf("leader of a failed statement: %+v", r)
	}
	for range 3 {
		if r := <-results; r.Err != nil || !r.Moved {
			t.Errorf("follower after a failed leader: %+v", r)
		}
	}
	if got := fmt.Sprint(store.batchSizes()); got != "[1 3]" {
		t.Errorf("groups %s, want [1 3]", got)
	}
	for range len(store.entered) {
		<-store.entered
	}

	waitQuiet(t, c)
	store.mu.Lock()
	store.busy = map[string]bool{"held": true}
	store.mu.Unlock()
	if r, led := c.lead(context.Background(), control.Advance{Table: "held", FinalizedUntil: hour(1)}); !led || !errors.Is(r.Err, control.ErrBusy) {
		t.Fatalf("busy leader: led %v, %+v", led, r)
	}
	if _, led := c.lead(context.Background(), control.Advance{Table: "held", FinalizedUntil: hour(2)}); led {
		t.Fatal("a busy table's advance led instead of going alone")
	}
	c.mu.Lock()
	_, busy := c.busy["held"]
	c.mu.Unlock()
	if !busy {
		t.Fatal("a leader's ErrBusy did not mark its table busy")
	}
	// Another table still leads; held's retry, queued, goes alone.
	if r, led := c.lead(context.Background(), control.Advance{Table: "free", FinalizedUntil: hour(1)}); !led || r.Err != nil {
		t.Fatalf("free table: led %v, %+v", led, r)
	}
	store.mu.Lock()
	store.busy = nil
	store.mu.Unlock()
	if _, moved, err := c.Advance(context.Background(), control.Advance{Table: "held", FinalizedUntil: hour(2)}); err != nil || !moved {
		t.Fatalf("held after the lock went: moved %v, %v", moved, err)
	}
	c.mu.Lock()
	_, busy = c.busy["held"]
	c.mu.Unlock()
	if busy {
		t.Error("held still busy after its advance succeeded")
	}

	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	before := len(store.batchSizes())
	if r, led := c.lead(ctx, control.Advance{Table: "gone", FinalizedUntil: hour(5)}); !led || !errors.Is(r.Err, context.Canceled) {
		t.Fatalf("leader whose caller has gone: led %v, %+v", led, r)
	}
	if n := len(store.batchSizes()); n != before {
		t.Error("an advance whose caller had gone was sent")
	}
}

// Shutdown while a leader's statement runs: the committer's context ends
// the statement, the leader gets the error, close waits for the leader
// (a slot held) and returns, and nothing leads or queues after it.
func TestShutdownWhileLeading(t *testing.T) {
	store := newGatedBatchStore()
	store.gate = make(chan struct{})
	defer close(store.gate)
	ctx, cancel := context.WithCancel(context.Background())
	c := newCommitter(ctx, store, NewMetrics(nil, nil), 1000, 2, time.Minute)

	leader := leadAsync(c, context.Background(), control.Advance{Table: "a", FinalizedUntil: hour(1)})
	<-store.entered
	closed := make(chan struct{})
	go func() {
		c.close()
		close(closed)
	}()
	select {
	case <-closed:
		t.Fatal("close returned while a leader was sending")
	case <-time.After(20 * time.Millisecond):
	}
	cancel() // shutdown: the registry's context
	if r := <-leader; !r.led || !errors.Is(r.r.Err, context.Canceled) {
		t.Fatalf("leader at shutdown: %+v", r)
	}
	<-closed
	if _, led := c.lead(context.Background(), control.Advance{Table: "b", FinalizedUntil: hour(1)}); led {
		t.Fatal("led after close")
	}
	if _, _, err := c.Advance(context.Background(), control.Advance{Table: "b", FinalizedUntil: hour(1)}); !errors.Is(err, errCommitterClosed) {
		t.Fatalf("advance after close: %v", err)
	}
}

// failingTables is a BatchStore whose statements fail whole (the error
// of the group) when they hold one of fail's tables, after reaching the
// gated store (so its gate and entered hold for them too).
type failingTables struct {
	*gatedBatchStore
	fail map[string]error
}

func (s failingTables) Advance(ctx context.Context, a control.Advance) (control.Verdict, bool, error) {
	return advanceOne(ctx, s.AdvanceBatch, a)
}

func (s failingTables) AdvanceBatch(ctx context.Context, as []control.Advance) ([]control.AdvanceResult, error) {
	res, err := s.gatedBatchStore.AdvanceBatch(ctx, as)
	for _, a := range as {
		if e, ok := s.fail[a.Table]; ok {
			return nil, e
		}
	}
	return res, err
}

// memBatchStore applies every group at once, in memory (no database):
// what a quiet advance costs the group commit's own machinery.
type memBatchStore struct{ movingStore }

func (s *memBatchStore) AdvanceBatch(ctx context.Context, as []control.Advance) ([]control.AdvanceResult, error) {
	res := make([]control.AdvanceResult, len(as))
	for i, a := range as {
		res[i].Verdict, res[i].Moved, res[i].Err = s.Advance(ctx, a)
	}
	return res, nil
}

// BenchmarkQuietAdvance is one advance through a quiet group commit, its
// result back on the caller's goroutine: led (the caller sends it) or
// queued (a committer goroutine is woken, sends it and hands the result
// back), which is what every crossing of a quiet service paid before the
// first advancer led. ns/op is the hop's latency on an idle machine.
func BenchmarkQuietAdvance(b *testing.B) {
	a := control.Advance{Table: "t", FinalizedUntil: hour(1)}
	ctx := context.Background()
	b.Run("led", func(b *testing.B) {
		c := newCommitter(ctx, &memBatchStore{}, NewMetrics(nil, nil), 1000, DefaultCommitters, time.Minute)
		defer c.close()
		b.ReportAllocs()
		for b.Loop() {
			if _, led := c.lead(ctx, a); !led {
				b.Fatal("did not lead on a quiet committer")
			}
		}
	})
	b.Run("queued", func(b *testing.B) {
		c := newCommitter(ctx, &memBatchStore{}, NewMetrics(nil, nil), 1000, DefaultCommitters, time.Minute)
		defer c.close()
		ch := make(chan control.AdvanceResult, 1)
		done := func(r control.AdvanceResult) { ch <- r }
		b.ReportAllocs()
		for b.Loop() {
			c.advanceAsync(ctx, a, done)
			<-ch
		}
	})
}

// reuseBatchStore answers every group from one result slice, allocating
// nothing: what is left in an allocation count is the committer's own.
type reuseBatchStore struct {
	movingStore
	res []control.AdvanceResult
}

func (s *reuseBatchStore) AdvanceBatch(_ context.Context, as []control.Advance) ([]control.AdvanceResult, error) {
	if cap(s.res) < len(as) {
		s.res = make([]control.AdvanceResult, len(as))
	}
	res := s.res[:len(as)]
	for i := range res {
		res[i] = control.AdvanceResult{Verdict: control.Verdict{Table: as[i].Table, FinalizedUntil: as[i].FinalizedUntil}, Moved: true}
	}
	return res, nil
}

// TestLeadKeepsItsRecords: a leader's advance record and its group's
// slices are the committer's, reused from one crossing to the next (issue
// 12, third session): a lead allocates only the statement's deadline
// (context.WithTimeout: four objects, the context and its timer), and
// keeps nothing of the advance once it returns. It allocated three more
// (the record, the group's slices; about 0.7 KiB) before.
func TestLeadKeepsItsRecords(t *testing.T) {
	ctx := context.Background()
	c := newCommitter(ctx, &reuseBatchStore{}, NewMetrics(nil, nil), 1000, DefaultCommitters, time.Minute)
	defer c.close()
	a := control.Advance{Table: "t", FinalizedUntil: hour(1), EndOffset: []byte(`{"o":1}`)}
	r, led := c.lead(ctx, a)
	if !led || !r.Moved || r.Verdict.Table != "t" || !r.Verdict.FinalizedUntil.Equal(hour(1)) {
		t.Fatalf("lead = %+v, %v; want t moved to %v, led", r, led, hour(1))
	}
	if l := c.led; l.p.ctx != nil || l.p.a.Table != "" || l.p.a.EndOffset != nil || l.p.out != nil || l.res.Verdict.Table != "" {
		t.Errorf("after the lead the committer still holds %+v", l)
	}
	for _, x := range c.ledBufs.as[:cap(c.ledBufs.as)] {
		if x.Table != "" || x.EndOffset != nil {
			t.Errorf("after the lead the group's slice still holds %+v", x)
		}
	}
	n := testing.AllocsPerRun(100, func() {
		if _, led := c.lead(ctx, a); !led {
			t.Fatal("did not lead on a quiet committer")
		}
	})
	if n > 4 {
		t.Errorf("a lead allocates %v times; want at most 4 (the statement's deadline)", n)
	}
}
