package ownership

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/finalizer-dev/finalizer/control"
)

// duringStore runs during (a reconnect, say) inside its statement or its
// read of the rows, as a LISTEN connection re-established while a write
// is in flight does.
type duringStore struct {
	fakeStore
	duringWrite, duringList func()
}

func (d *duringStore) AdvanceBatch(ctx context.Context, as []control.Advance) ([]control.AdvanceResult, error) {
	if f := d.duringWrite; f != nil {
		d.duringWrite = nil
		f()
	}
	return d.fakeStore.AdvanceBatch(ctx, as)
}

func (d *duringStore) List(ctx context.Context) ([]control.Verdict, error) {
	if f := d.duringList; f != nil {
		d.duringList = nil
		f()
	}
	return d.fakeStore.List(ctx)
}

func ownAll(w *Owner) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.known = true
	for b := range w.owned {
		w.owned[b] = true
	}
}

// TestReconnectDuringAWriteIsNotForgotten: a reconnect (a failover may
// have lost the newest writes) that comes while a flush's statement or a
// tracker's is in flight leaves what that statement wrote to be written
// again: neither the flush's end (its buckets marked clean) nor the
// statement's answer (its advances marked reached) undoes the doubt. On
// the old code the advance was then never written again by this replica
// (the owner): fallback skips owned tables and flush clean buckets.
func TestReconnectDuringAWriteIsNotForgotten(t *testing.T) {
	base := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	a := control.Advance{Table: "t", QueryID: "q", FinalizedUntil: base}

	t.Run("flush", func(t *testing.T) {
		ds := &duringStore{}
		w := New(Options{Table: control.DefaultTable, Store: ds, Buckets: 4, Grace: time.Hour, Forget: time.Hour})
		w.hold(a, time.Now()) // not known: written by the tracker; say its write failed
		ownAll(w)
		w.mu.Lock()
		for b := range w.dirty {
			w.dirty[b] = true // just taken
		}
		w.mu.Unlock()
		ds.duringWrite = w.Reconnected
		w.flush(context.Background())
		checkIndex(t, w, "flush across a reconnect")
		if len(w.unreached) != 1 {
			t.Fatalf("after a flush across a reconnect, %d unreached, want the one doubted", len(w.unreached))
		}
		w.flush(context.Background())
		if len(ds.batches) != 2 {
			t.Fatalf("the doubted advance was written %d times, want again at the next flush (2)", len(ds.batches))
		}
		if len(w.unreached) != 0 {
			t.Fatalf("%d unreached after the second flush", len(w.unreached))
		}
	})

	t.Run("the fallback reads the rows across a reconnect", func(t *testing.T) {
		ds := &duringStore{}
		w := New(Options{Table: control.DefaultTable, Store: ds, Buckets: 4, Grace: time.Nanosecond, Forget: time.Hour})
		w.mu.Lock()
		w.known = true // owns no bucket
		w.mu.Unlock()
		w.hold(a, time.Now())
		w.Reconnected() // in doubt: the fallback reads the rows first
		ds.duringList = w.Reconnected
		time.Sleep(time.Millisecond) // the grace
		w.fallback(context.Background())
		if len(ds.batches) != 0 {
			t.Fatalf("written from rows read across a reconnect: %v", ds.batches)
		}
		time.Sleep(time.Millisecond)
		w.fallback(context.Background())
		if len(ds.batches) != 1 || len(w.unreached) != 0 {
			t.Fatalf("not written at the next fallback: %v, %d unreached", ds.batches, len(w.unreached))
		}
	})

	t.Run("a tracker's statement", func(t *testing.T) {
		ds := &duringStore{}
		w := New(Options{Table: control.DefaultTable, Store: ds, Buckets: 4, Grace: time.Hour, Forget: time.Hour})
		ownAll(w)
		write, epoch := w.holdEpoch(a, time.Now())
		if !write {
			t.Fatal("an owned table's advance was held")
		}
		w.Reconnected() // while the tracker's statement is in flight
		w.reached(a, control.Verdict{Table: a.Table, FinalizedUntil: a.FinalizedUntil}, epoch)
		checkIndex(t, w, "reached across a reconnect")
		if len(w.unreached) != 1 {
			t.Fatalf("a statement that ended after a reconnect marked its advance reached (%d unreached)", len(w.unreached))
		}
		w.flush(context.Background())
		if len(ds.batches) != 1 {
			t.Fatalf("the doubted advance was not written again: %v", ds.batches)
		}
	})
}

// An advance collected by a poll (flush, fallback) and dropped by a
// rewind before its statement is sent is not written: it would undo the
// rewind. Before, the advances a poll collected were sent as collected
// unless in doubt.
func TestRewindBeforeAPollsWriteIsNotUndone(t *testing.T) {
	base := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	a := control.Advance{Table: "t", QueryID: "q", FinalizedUntil: base}
	other := control.Advance{Table: "u", QueryID: "q", FinalizedUntil: base}
	fs := &fakeStore{}
	w := New(Options{Table: control.DefaultTable, Store: fs, Buckets: 4, Grace: time.Hour, Forget: time.Hour})
	w.hold(a, time.Now())
	w.hold(other, time.Now())
	w.mu.Lock()
	as := []control.Advance{w.heldOf("t", "q").a, w.heldOf("u", "q").a}
	epoch := w.epoch
	w.mu.Unlock()
	w.Rewound("t", time.Time{}) // between the collection and the statement
	if err := w.write(context.Background(), as, false, "fallback", epoch); err != nil {
		t.Fatal(err)
	}
	if len(fs.batches) != 1 || len(fs.batches[0]) != 1 || fs.batches[0][0].Table != "u" {
		t.Fatalf("wrote %v, want u's advance alone (t was rewound)", fs.batches)
	}
	checkIndex(t, w, "after the write")
}

// TestFlushLeavesAStatementInFlightToIt (ADR 0023 addendum): an advance
// the gate let through (ownership not known yet, as for every tracker's
// first advance during a restart's recovery) is not written again by the
// flush of the buckets taken while its statement is in flight; once it
// has answered without reaching the table (failed), or after a reconnect
// doubted it, the flush writes it as before. Before, the first take after
// a start wrote every advance in flight a second time, as one statement
// beside the trackers' own.
func TestFlushLeavesAStatementInFlightToIt(t *testing.T) {
	base := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	a := control.Advance{Table: "t", QueryID: "q", FinalizedUntil: base}
	b := control.Advance{Table: "u", QueryID: "q", FinalizedUntil: base}
	dirty := func(w *Owner) {
		w.mu.Lock()
		for i := range w.dirty {
			w.dirty[i] = true // just taken
		}
		w.mu.Unlock()
	}
	fs := &fakeStore{}
	w := New(Options{Table: control.DefaultTable, Store: fs, Buckets: 4, Grace: time.Hour, Forget: time.Hour})
	for _, x := range []control.Advance{a, b} {
		if write, _ := w.holdSend(x, time.Now(), true); !write {
			t.Fatal("held before ownership is known")
		}
	}
	ownAll(w)
	dirty(w)
	w.flush(context.Background())
	if len(fs.batches) != 0 {
		t.Fatalf("the flush wrote advances whose statements are in flight: %v", fs.batches)
	}
	// a's statement failed (no reached); b's is in flight across a
	// reconnect.
	w.sent(a)
	w.Reconnected()
	dirty(w)
	w.flush(context.Background())
	if len(fs.batches) != 1 || len(fs.batches[0]) != 2 {
		t.Fatalf("after a failed statement and a reconnect the flush wrote %v, want both", fs.batches)
	}
	checkIndex(t, w, "flush")
	// A later advance of b replaces the one in flight; the old
	// statement's answer does not count against the new one.
	b2 := b
	b2.FinalizedUntil = base.Add(time.Minute)
	w.holdSend(b2, time.Now(), true)
	w.sent(b)
	w.mu.Lock()
	n := w.heldOf(b.Table, b.QueryID).sending
	w.mu.Unlock()
	if n != 1 {
		t.Fatalf("the newer advance counts %d statements in flight, want 1", n)
	}
}

// rowsStore lists the rows it is given.
type rowsStore struct {
	fakeStore
	rows []control.Verdict
}

func (r *rowsStore) List(context.Context) ([]control.Verdict, error) { return r.rows, nil }

// TestFallbackAfterAReconnectWritesOnlyWhatTheTableMissed: after a
// reconnect every held advance is in doubt and, on a table this replica
// does not own, written by the fallback once the grace is up unless an
// announcement shows it reached, and announcements made while the
// connection was down are lost. The fallback reads the rows first (for
// rewinds): a table that stands at or past the held advance (its owner
// wrote it again) is what the lost announcement would have said, and is
// not written; one that stands behind (the owner does not track the run,
// or a failover lost the write) is. Before, every held advance of every
// unowned table was written after every reconnect: safe (forward-only,
// a no-op is a read), but a statement's share per held advance, a
// replica's whole tracked set, each time.
func TestFallbackAfterAReconnectWritesOnlyWhatTheTableMissed(t *testing.T) {
	base := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	rs := &rowsStore{rows: []control.Verdict{
		{Table: "t.at", FinalizedUntil: base},
		{Table: "t.past", FinalizedUntil: base.Add(time.Hour)},
		{Table: "t.behind", FinalizedUntil: base.Add(-time.Hour)},
	}}
	w := New(Options{Table: control.DefaultTable, Store: rs, Buckets: 4, Grace: time.Nanosecond, Forget: time.Hour})
	w.mu.Lock()
	w.known = true // owns no bucket
	w.mu.Unlock()
	held := time.Now().Add(-time.Minute)
	for _, tb := range []string{"t.at", "t.past", "t.behind", "t.norow"} {
		w.hold(control.Advance{Table: tb, QueryID: "q", FinalizedUntil: base}, held)
	}
	w.Observed("t.at", base)
	w.Observed("t.past", base)
	w.Observed("t.behind", base) // reached once; a failover lost it
	w.Observed("t.norow", base)
	w.Reconnected()
	time.Sleep(time.Millisecond) // the grace, from the reconnect
	w.fallback(context.Background())
	checkIndex(t, w, "fallback after a reconnect")
	if len(rs.batches) != 1 {
		t.Fatalf("%d statements, want 1", len(rs.batches))
	}
	var wrote []string
	for _, a := range rs.batches[0] {
		wrote = append(wrote, a.Table)
	}
	slices.Sort(wrote)
	if want := []string{"t.behind", "t.norow"}; !slices.Equal(wrote, want) {
		t.Fatalf("the fallback wrote %v, want only the tables behind their held advance %v", wrote, want)
	}
	if len(w.unreached) != 0 {
		t.Fatalf("%d held advances still unreached", len(w.unreached))
	}
}

// rewoundStore is a control table whose table "t" was rewound at
// rewoundAt after its rows were listed (List shows no rewind: the doubt
// check's read came before it), and whose statements refuse a guarded
// advance that knew an earlier rewind, as control's do.
type rewoundStore struct {
	fakeStore
	rewoundAt time.Time
}

func (r *rewoundStore) AdvanceBatch(ctx context.Context, as []control.Advance) ([]control.AdvanceResult, error) {
	r.batches = append(r.batches, append([]control.Advance(nil), as...))
	res := make([]control.AdvanceResult, len(as))
	for i, a := range as {
		v := control.Verdict{Table: a.Table, FinalizedUntil: a.FinalizedUntil, RewoundAt: r.rewoundAt}
		if a.Guard.Refuses(r.rewoundAt) {
			res[i] = control.AdvanceResult{Verdict: v, Err: control.ErrBeforeRewind}
			continue
		}
		res[i] = control.AdvanceResult{Verdict: v, Moved: true}
	}
	return res, nil
}

// TestAHeldAdvanceRefusedByARewindIsDropped (ADR 0019, addendum of
// 2026-12-06): a held advance written again at a reconnect carries the
// rewind its tracker knew; when the table was rewound after the doubt
// check's read of the rows, the statement refuses it, and the held
// advance is dropped (not written again at every poll), with no error
// for the write.
func TestAHeldAdvanceRefusedByARewindIsDropped(t *testing.T) {
	base := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	a := control.Advance{Table: "t", QueryID: "q", FinalizedUntil: base, Guard: control.KnownRewind(time.Time{})}
	fs := &rewoundStore{rewoundAt: base.Add(time.Hour)}
	w := New(Options{Table: control.DefaultTable, Store: fs, Buckets: 4, Grace: time.Hour, Forget: time.Hour})
	w.hold(a, time.Now())
	ownAll(w)
	w.Reconnected()
	w.mu.Lock()
	as := []control.Advance{w.heldOf("t", "q").a}
	epoch := w.epoch
	w.mu.Unlock()
	if err := w.write(context.Background(), as, true, "flush", epoch); err != nil {
		t.Fatalf("write: %v", err)
	}
	if len(fs.batches) != 1 || fs.batches[0][0].Guard != a.Guard {
		t.Fatalf("wrote %v, want the held advance with its tracker's guard", fs.batches)
	}
	w.mu.Lock()
	h := w.heldOf("t", "q")
	w.mu.Unlock()
	if h != nil {
		t.Error("the refused held advance is still held")
	}
	checkIndex(t, w, "after the refusal")
}
