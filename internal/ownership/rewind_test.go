package ownership

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/finalizer-dev/finalizer/control"
)

// nonOwner starts two Owners on store: the first owns every bucket, the
// second (returned, with the first) none. The second's grace is grace.
func nonOwner(t *testing.T, store *control.Store, url string, grace time.Duration) (owning, held *Store) {
	t.Helper()
	owning = owner(t, store, url, time.Hour, false)
	eventually(t, "the first replica owns every bucket", func() bool { return owning.Owner().Owned() == buckets })
	held = owner(t, store, url, grace, false)
	if n := held.Owner().Owned(); n != 0 {
		t.Fatalf("the second replica owns %d buckets", n)
	}
	return owning, held
}

// rewindTo rewinds table to until and returns its rewound_at.
func rewindTo(t *testing.T, store *control.Store, table string, until time.Time) time.Time {
	t.Helper()
	ctx := context.Background()
	if _, err := store.Rewind(ctx, control.Rewind{Table: table, To: until, Reason: "test", By: "test"}); err != nil {
		t.Fatal(err)
	}
	v, err := store.Get(ctx, table)
	if err != nil || v.RewoundAt.IsZero() {
		t.Fatalf("the rewound row: %+v, %v", v, err)
	}
	return v.RewoundAt
}

// TestHeldAfterRewindIsWrittenAfterAReconnect (ADR 0020, addendum of
// 2026-12-06): a replica that does not own a table holds an advance its
// tracker decided after the table's rewind, knowing it (its guard); a
// reconnect of the control database's connection puts it in doubt before
// the grace; the owner does not track the run, so the fallback writes it,
// and the statement, whose guard knows the rewind, moves the table. On
// the old code it was dropped as "older than the table's rewind" (held
// within a minute after it), and the table stayed at the rewound verdict
// for good, its run showing nothing.
func TestHeldAfterRewindIsWrittenAfterAReconnect(t *testing.T) {
	store, url := setup(t)
	a, b := nonOwner(t, store, url, 300*time.Millisecond)
	ctx := context.Background()
	table := tableOf(t, b.Owner(), false)
	if _, moved, err := a.Advance(ctx, adv(table, hour)); err != nil || !moved {
		t.Fatal(moved, err)
	}
	at := rewindTo(t, store, table, hour.Add(-time.Hour))
	b.Owner().Rewound(table, at) // heard live, before the new run's progress

	var refused []control.Advance
	var mu sync.Mutex
	b.Owner().OnRefused(func(a control.Advance, _ control.Verdict) {
		mu.Lock()
		refused = append(refused, a)
		mu.Unlock()
	})
	after := adv(table, hour)
	after.RunID, after.Guard = "r2", control.KnownRewind(at)
	if _, moved, err := b.Advance(ctx, after); err != nil || moved {
		t.Fatalf("held advance: %v, %v", moved, err)
	}
	b.Owner().Reconnected() // a blip of the control database, before the grace
	eventually(t, "the held advance decided after the rewind written by the fallback", func() bool {
		return verdict(t, store, table).Equal(hour)
	})
	mu.Lock()
	defer mu.Unlock()
	if len(refused) != 0 {
		t.Fatalf("refused: %v", refused)
	}
}

// TestHeldBeforeRewindIsRefusedAndTold: a held advance decided before
// the table's rewind (its guard knows none), which this replica did not
// hear (the connection was down), is written after the reconnect; the
// statement refuses it, the table stays at the rewound verdict, the held
// advance is dropped (not written again), and its refusal is told to
// OnRefused with the row that refused it, for its run to show it.
func TestHeldBeforeRewindIsRefusedAndTold(t *testing.T) {
	store, url := setup(t)
	a, b := nonOwner(t, store, url, 300*time.Millisecond)
	ctx := context.Background()
	table := tableOf(t, b.Owner(), false)
	if _, moved, err := a.Advance(ctx, adv(table, hour.Add(-30*time.Minute))); err != nil || !moved {
		t.Fatal(moved, err)
	}
	type refusal struct {
		a control.Advance
		v control.Verdict
	}
	told := make(chan refusal, 4)
	b.Owner().OnRefused(func(a control.Advance, v control.Verdict) { told <- refusal{a, v} })
	before := adv(table, hour) // knows no rewind
	if _, moved, err := b.Advance(ctx, before); err != nil || moved {
		t.Fatalf("held advance: %v, %v", moved, err)
	}
	at := rewindTo(t, store, table, hour.Add(-time.Hour)) // not heard by b
	b.Owner().Reconnected()
	select {
	case r := <-told:
		if r.a.Table != table || !r.a.FinalizedUntil.Equal(hour) || r.a.RunID != before.RunID || !r.v.RewoundAt.Equal(at) {
			t.Fatalf("told %+v, %+v; want the held advance and the row rewound at %v", r.a, r.v, at)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the refusal was not told")
	}
	time.Sleep(time.Second) // polls and graces: nothing written again
	if got := verdict(t, store, table); !got.Equal(hour.Add(-time.Hour)) {
		t.Fatalf("the rewind was undone: %v", got)
	}
	select {
	case r := <-told:
		t.Fatalf("told again: %+v", r.a)
	default:
	}
	w := b.Owner()
	w.mu.Lock()
	h := w.heldOf(table, before.QueryID)
	w.mu.Unlock()
	if h != nil {
		t.Fatal("the refused advance is still held")
	}
}

// TestRewoundKeepsWhatKnewTheRewind: a rewind heard live drops the held
// advances it refuses (decided before it, or with no guard), not one
// whose tracker knew it already (learnt from a refused statement or a
// re-read of the rows before the notification came), which was decided
// after it: dropping it lost it when its run had ended.
func TestRewoundKeepsWhatKnewTheRewind(t *testing.T) {
	at := time.Date(2026, 12, 6, 5, 0, 0, 0, time.UTC)
	w := New(Options{Table: control.DefaultTable, Store: &fakeStore{}, Buckets: 4, Grace: time.Hour, Forget: time.Hour})
	for q, g := range map[string]control.RewindGuard{
		"none":    {},
		"unknown": control.KnownRewind(time.Time{}),
		"older":   control.KnownRewind(at.Add(-time.Second)),
		"knew":    control.KnownRewind(at),
		"":        control.KnownRewind(at.Add(time.Second)),
	} {
		w.hold(control.Advance{Table: "t", QueryID: q, FinalizedUntil: at, Guard: g}, time.Now())
	}
	w.hold(control.Advance{Table: "u", QueryID: "knew", FinalizedUntil: at, Guard: control.KnownRewind(at)}, time.Now())
	w.Rewound("t", at)
	checkIndex(t, w, "after the rewind")
	w.mu.Lock()
	var kept []string
	for h := w.held["t"]; h != nil; h = h.next {
		kept = append(kept, h.a.QueryID)
	}
	u := w.held["u"] != nil
	w.mu.Unlock()
	if len(kept) != 2 || !u {
		t.Fatalf("kept %q of t (want the feeders that knew the rewind: \"knew\" and \"\"), u kept: %v", kept, u)
	}
	for _, q := range kept {
		if q != "knew" && q != "" {
			t.Fatalf("kept %q", q)
		}
	}
	w.Rewound("t", time.Time{}) // a rewind whose time is not known drops them all
	w.mu.Lock()
	n := w.held["t"]
	w.mu.Unlock()
	if n != nil {
		t.Fatal("a rewind of unknown time left held advances")
	}
}
