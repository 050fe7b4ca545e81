package ownership

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/finalizer-dev/finalizer/control"
)

// fakeStore applies every advance (moved) and lists nothing: enough for
// the Owner's own writes in a logic test.
type fakeStore struct{ batches [][]control.Advance }

func (f *fakeStore) AdvanceBatch(_ context.Context, as []control.Advance) ([]control.AdvanceResult, error) {
	f.batches = append(f.batches, append([]control.Advance(nil), as...))
	res := make([]control.AdvanceResult, len(as))
	for i, a := range as {
		res[i] = control.AdvanceResult{Verdict: control.Verdict{Table: a.Table, FinalizedUntil: a.FinalizedUntil}, Moved: true}
	}
	return res, nil
}

func (f *fakeStore) List(context.Context) ([]control.Verdict, error) { return nil, nil }

// checkIndex fails unless unreached holds exactly the held advances not
// known reached, and nheld counts every held advance.
func checkIndex(t *testing.T, w *Owner, step string) {
	t.Helper()
	w.mu.Lock()
	defer w.mu.Unlock()
	n, want := 0, 0
	for table, first := range w.held {
		for h := first; h != nil; h = h.next {
			n++
			if h.reached {
				if _, ok := w.unreached[h]; ok {
					t.Errorf("%s: a reached advance of %s is indexed as unreached", step, table)
				}
				continue
			}
			want++
			if got, ok := w.unreached[h]; !ok || got != table {
				t.Errorf("%s: an unreached advance of %s is not indexed (%q, %v)", step, table, got, ok)
			}
		}
	}
	if len(w.unreached) != want {
		t.Errorf("%s: %d indexed as unreached, %d are", step, len(w.unreached), want)
	}
	if w.nheld != n {
		t.Errorf("%s: nheld %d, %d held", step, w.nheld, n)
	}
}

// TestPollLooksAtUnreachedOnly: what a poll writes (flush, fallback) is
// found through the index of the advances not known reached, which every
// path that holds, reaches, doubts or drops an advance keeps exact; the
// advances already reached (all but the ones in flight, in the normal
// course) are not walked by a poll, so the poll's time under the lock the
// trackers' advances take does not grow with the tables (BENCHMARKS.md,
// "The latency tail").
func TestPollLooksAtUnreachedOnly(t *testing.T) {
	fs := &fakeStore{}
	w := New(Options{Table: control.DefaultTable, Store: fs, Buckets: 4, Grace: time.Hour, Forget: time.Hour})
	base := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	adv := func(table, query string, min int) control.Advance {
		return control.Advance{Table: table, QueryID: query, FinalizedUntil: base.Add(time.Duration(min) * time.Minute)}
	}
	now := time.Now()
	// Known, owning every bucket: each advance is written by its
	// tracker and reached.
	w.mu.Lock()
	w.known = true
	for b := range w.owned {
		w.owned[b] = true
	}
	w.mu.Unlock()
	for i := range 100 {
		table := fmt.Sprintf("t%03d", i)
		for _, q := range []string{"q1", "q2"} {
			a := adv(table, q, 1)
			if !w.hold(a, now) {
				t.Fatal("an owned table's advance was held")
			}
			w.reached(a, control.Verdict{Table: table, FinalizedUntil: a.FinalizedUntil}, w.epoch)
		}
	}
	checkIndex(t, w, "all reached")
	if len(w.unreached) != 0 {
		t.Fatalf("%d unreached after every advance was reached", len(w.unreached))
	}

	// Newer advances, some in flight (not reached yet).
	for i := range 10 {
		w.hold(adv(fmt.Sprintf("t%03d", i), "q1", 2), now)
	}
	checkIndex(t, w, "in flight")
	if len(w.unreached) != 10 {
		t.Fatalf("%d unreached, want the 10 in flight", len(w.unreached))
	}
	// An older advance does not replace a newer one.
	w.hold(adv("t000", "q1", 1), now)
	checkIndex(t, w, "older")

	// An announcement reaches some, a rewind drops one table, one
	// feeder's advance is dropped.
	w.Observed("t001", base.Add(2*time.Minute))
	w.Observed("t002", base.Add(time.Minute)) // short of the held one
	w.Rewound("t003", time.Time{})
	w.mu.Lock()
	w.dropLocked("t004", "q1")
	w.mu.Unlock()
	checkIndex(t, w, "observed, rewound, dropped")
	if len(w.unreached) != 7 {
		t.Fatalf("%d unreached, want 7", len(w.unreached))
	}

	// A reconnect doubts every held advance: every one is to be written
	// again, by a flush of the owned buckets.
	w.Reconnected()
	checkIndex(t, w, "reconnected")
	w.mu.Lock()
	n := w.nheld
	w.mu.Unlock()
	if len(w.unreached) != n {
		t.Fatalf("%d unreached after a reconnect, want all %d", len(w.unreached), n)
	}
	w.flush(context.Background())
	checkIndex(t, w, "flushed")
	if len(fs.batches) != 1 || len(fs.batches[0]) != n {
		t.Fatalf("flush wrote %d batches (%v), want one of %d", len(fs.batches), fs.batches, n)
	}
	if len(w.unreached) != 0 {
		t.Fatalf("%d unreached after the flush wrote them", len(w.unreached))
	}

	// Not owned, past the grace: the fallback writes the unreached only.
	w.mu.Lock()
	clear(w.owned)
	w.mu.Unlock()
	w.hold(adv("t050", "q1", 5), now.Add(-2*time.Hour))
	w.hold(adv("t051", "q1", 5), now)
	w.fallback(context.Background())
	checkIndex(t, w, "fallback")
	if got := fs.batches[len(fs.batches)-1]; len(fs.batches) != 2 || len(got) != 1 || got[0].Table != "t050" {
		t.Fatalf("fallback wrote %v, want t050's advance alone", fs.batches[1:])
	}

	// Everything dropped.
	w.Rewound("", time.Time{})
	checkIndex(t, w, "all rewound")
	if len(w.unreached) != 0 {
		t.Fatalf("%d unreached after every table was rewound", len(w.unreached))
	}
}

// TestForgetInChunks: forget drops the advances reached before Forget,
// walking the tables in chunks (the lock let go between them), and keeps
// the count exact.
func TestForgetInChunks(t *testing.T) {
	w := New(Options{Table: control.DefaultTable, Store: &fakeStore{}, Buckets: 4, Forget: time.Hour})
	old, now := time.Now().Add(-2*time.Hour), time.Now()
	for i := range 3*forgetChunk + 7 {
		at := now
		if i%2 == 0 {
			at = old
		}
		a := control.Advance{Table: fmt.Sprintf("t%05d", i), QueryID: "q", FinalizedUntil: now.Truncate(time.Minute)}
		w.hold(a, at)
		if i%3 != 0 {
			w.reached(a, control.Verdict{Table: a.Table, FinalizedUntil: a.FinalizedUntil}, w.epoch)
		}
	}
	w.forget()
	checkIndex(t, w, "forget")
	want := 0
	for i := range 3*forgetChunk + 7 {
		if !(i%2 == 0 && i%3 != 0) {
			want++
		}
	}
	if w.nheld != want || len(w.held) != want {
		t.Fatalf("after forget: nheld %d, %d tables held, want %d", w.nheld, len(w.held), want)
	}
	// Not again before forgetEvery.
	w.mu.Lock()
	for _, first := range w.held {
		for h := first; h != nil; h = h.next {
			h.at, h.reached = old.UnixNano(), true
			delete(w.unreached, h)
		}
	}
	w.mu.Unlock()
	w.forget()
	if w.nheld != want {
		t.Fatalf("forget ran again within forgetEvery: nheld %d, want %d", w.nheld, want)
	}
}
