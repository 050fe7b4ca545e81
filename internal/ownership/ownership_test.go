package ownership

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/finalizer-dev/finalizer/control"
	"github.com/finalizer-dev/finalizer/internal/pgcluster/pgtest"
	"github.com/finalizer-dev/finalizer/internal/pgcluster/pgtest/pgcontrol"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

const buckets = 8

// setup opens and migrates a control store on a fresh database.
func setup(t *testing.T) (*control.Store, string) {
	t.Helper()
	return pgcontrol.Store(t)
}

// owner starts an Owner on store (closed at cleanup) and returns its gate.
func owner(t *testing.T, store *control.Store, url string, grace time.Duration, balance bool) *Store {
	t.Helper()
	w := New(Options{URL: url, Table: control.DefaultTable, Store: store, Buckets: buckets, Poll: 50 * time.Millisecond, Grace: grace, Balance: balance})
	w.Start(context.Background())
	t.Cleanup(w.Close)
	return Gate(store, w)
}

func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

var hour = time.Date(2026, 9, 28, 14, 0, 0, 0, time.UTC)

// adv is an advance of table to until, guarded as a tracker's that knows
// of no rewind of it (the gate's advances carry their tracker's guard).
func adv(table string, until time.Time) control.Advance {
	return control.Advance{Table: table, FinalizedUntil: until, EndTime: until.Add(5 * time.Minute), QueryID: "q1", RunID: "r1", BatchID: 3,
		Guard: control.KnownRewind(time.Time{})}
}

// verdict reads table's finalized_until, zero when it has no row.
func verdict(t *testing.T, store *control.Store, table string) time.Time {
	t.Helper()
	v, err := store.Get(context.Background(), table)
	if errors.Is(err, control.ErrNotFound) {
		return time.Time{}
	}
	if err != nil {
		t.Fatal(err)
	}
	return v.FinalizedUntil
}

// tableOf returns a table name whose bucket w owns (own) or does not.
func tableOf(t *testing.T, w *Owner, own bool) string {
	t.Helper()
	for i := range 1000 {
		name := fmt.Sprintf("bronze.t%d", i)
		if w.Owns(name) == own {
			return name
		}
	}
	t.Fatalf("no table with owned=%v", own)
	return ""
}

// TestOneOwnerAndTakeover: without balancing, the first replica owns
// every bucket and the second none; when the first dies the second takes
// them all.
func TestOneOwnerAndTakeover(t *testing.T) {
	store, url := setup(t)
	a := owner(t, store, url, time.Hour, false)
	b := owner(t, store, url, time.Hour, false)
	time.Sleep(300 * time.Millisecond)
	if na, nb := a.Owner().Owned(), b.Owner().Owned(); na != buckets || nb != 0 {
		t.Fatalf("owned %d and %d, want %d and 0", na, nb, buckets)
	}
	if _, _, err := b.Advance(context.Background(), adv("bronze.orders", hour)); err != nil {
		t.Fatal(err)
	}
	a.Owner().Close()
	began := time.Now()
	eventually(t, "the survivor owns every bucket", func() bool { return b.Owner().Owned() == buckets })
	eventually(t, "the held advance written", func() bool { return verdict(t, store, "bronze.orders").Equal(hour) })
	t.Logf("takeover and write in %v", time.Since(began))
}

// TestBalanceAndTakeover: a lone replica owns every bucket; a second one
// gets half; when the first dies (its session ends) the second owns them
// all within a few polls.
func TestBalanceAndTakeover(t *testing.T) {
	store, url := setup(t)
	a := owner(t, store, url, time.Hour, true)
	if n := a.Owner().Owned(); n != buckets {
		t.Fatalf("a lone replica owns %d buckets after its start, want %d", n, buckets)
	}
	b := owner(t, store, url, time.Hour, true)
	eventually(t, "the buckets split 4/4", func() bool { return a.Owner().Owned() == buckets/2 && b.Owner().Owned() == buckets/2 })
	for i := range 100 {
		name := fmt.Sprintf("bronze.t%d", i)
		if a.Owner().Owns(name) == b.Owner().Owns(name) {
			t.Fatalf("%s: owned by both or neither", name)
		}
	}
	a.Owner().Close()
	began := time.Now()
	eventually(t, "the survivor owns every bucket", func() bool { return b.Owner().Owned() == buckets })
	t.Logf("takeover in %v", time.Since(began))
}

// TestHeldAdvanceWrittenAtTakeover: a replica that does not own a table
// answers its advance without a statement and keeps it; it writes it when
// it takes the bucket over, without a further advance.
func TestHeldAdvanceWrittenAtTakeover(t *testing.T) {
	store, url := setup(t)
	a := owner(t, store, url, time.Hour, true)
	b := owner(t, store, url, time.Hour, true)
	eventually(t, "the buckets split", func() bool { return a.Owner().Owned() == buckets/2 && b.Owner().Owned() == buckets/2 })
	table := tableOf(t, a.Owner(), true)
	v, moved, err := b.Advance(context.Background(), adv(table, hour))
	if err != nil || moved || !v.FinalizedUntil.IsZero() || v.QueryID != "q1" {
		t.Fatalf("held advance: %+v, %v, %v; want no verdict, not moved", v, moved, err)
	}
	res, err := b.AdvanceBatch(context.Background(), []control.Advance{adv(table, hour.Add(time.Hour))})
	if err != nil || res[0].Err != nil || res[0].Moved {
		t.Fatalf("held batch: %+v, %v", res, err)
	}
	time.Sleep(200 * time.Millisecond)
	if got := verdict(t, store, table); !got.IsZero() {
		t.Fatalf("a non-owner wrote %v", got)
	}
	a.Owner().Close() // the owner dies: PostgreSQL releases its locks
	eventually(t, "the held advance written by the new owner", func() bool { return verdict(t, store, table).Equal(hour.Add(time.Hour)) })
}

// TestOwnerWrites: the owner's advance is a statement, as without the gate.
func TestOwnerWrites(t *testing.T) {
	store, url := setup(t)
	a := owner(t, store, url, time.Hour, true)
	v, moved, err := a.Advance(context.Background(), adv("bronze.orders", hour))
	if err != nil || !moved || !v.FinalizedUntil.Equal(hour) {
		t.Fatalf("owner's advance: %+v, %v, %v", v, moved, err)
	}
}

// TestFallbackAfterGrace: an advance the owner does not write (it does not
// track the run) is written by the replica holding it once the grace has
// passed; an announcement that the table reached it spares the write.
func TestFallbackAfterGrace(t *testing.T) {
	store, url := setup(t)
	a := owner(t, store, url, time.Hour, true)
	b := owner(t, store, url, 300*time.Millisecond, true)
	eventually(t, "the buckets split", func() bool { return a.Owner().Owned() == buckets/2 && b.Owner().Owned() == buckets/2 })
	t1 := tableOf(t, a.Owner(), true)
	if _, _, err := b.Advance(context.Background(), adv(t1, hour)); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the fallback write", func() bool { return verdict(t, store, t1).Equal(hour) })

	var t2 string
	for i := range 1000 {
		if n := fmt.Sprintf("silver.t%d", i); a.Owner().Owns(n) {
			t2 = n
			break
		}
	}
	if _, _, err := b.Advance(context.Background(), adv(t2, hour)); err != nil {
		t.Fatal(err)
	}
	b.Owner().Observed(t2, hour) // the owner's move, announced
	time.Sleep(time.Second)
	if got := verdict(t, store, t2); !got.IsZero() {
		t.Fatalf("a held advance the table was announced at was written again: %v", got)
	}
}

// TestRewrittenAfterLostConnection: when the lock connection drops (a
// PostgreSQL failover), the owner writes again every advance it holds once
// it has the buckets back: a write lost with the old primary comes back
// without waiting for the next period. A rewind made meanwhile is not
// undone.
func TestRewrittenAfterLostConnection(t *testing.T) {
	store, url := setup(t)
	a := owner(t, store, url, time.Hour, true)
	ctx := context.Background()
	if _, moved, err := a.Advance(ctx, adv("bronze.lost", hour)); err != nil || !moved {
		t.Fatal(moved, err)
	}
	if _, moved, err := a.Advance(ctx, adv("bronze.rewound", hour)); err != nil || !moved {
		t.Fatal(moved, err)
	}
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	// The failover lost one write; an operator rewound the other table
	// while this replica did not hear it.
	if _, err := conn.Exec(ctx, `DELETE FROM public.table_finalization WHERE table_name = 'bronze.lost'`); err != nil {
		t.Fatal(err)
	}
	if _, err := store.Rewind(ctx, control.Rewind{Table: "bronze.rewound", To: hour.Add(-time.Hour), Reason: "test", By: "test"}); err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Exec(ctx, `SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = 'finalizer-ownership'`); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the lost write written again", func() bool { return verdict(t, store, "bronze.lost").Equal(hour) })
	eventually(t, "the buckets back", func() bool { return a.Owner().Owned() == buckets })
	time.Sleep(200 * time.Millisecond)
	if got := verdict(t, store, "bronze.rewound"); !got.Equal(hour.Add(-time.Hour)) {
		t.Fatalf("the rewind was undone: %v", got)
	}
}

// TestReconnectedRewrites: a LISTEN reconnect (Owner.Reconnected) makes
// the owner write again what it holds, at once.
func TestReconnectedRewrites(t *testing.T) {
	store, url := setup(t)
	a := owner(t, store, url, time.Hour, true)
	ctx := context.Background()
	if _, _, err := a.Advance(ctx, adv("bronze.lost", hour)); err != nil {
		t.Fatal(err)
	}
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, `DELETE FROM public.table_finalization WHERE table_name = 'bronze.lost'`); err != nil {
		t.Fatal(err)
	}
	a.Owner().Reconnected()
	eventually(t, "the lost write written again", func() bool { return verdict(t, store, "bronze.lost").Equal(hour) })
}

// TestGateBatchResultsAtTheirIndexes: a group of tables the replica owns
// and tables it does not, in any order (the held ones first, between and
// last), and a group of owned tables only (sent as they are): every
// result is its own advance's, at its index, and only the owned tables
// are written.
func TestGateBatchResultsAtTheirIndexes(t *testing.T) {
	store, url := setup(t)
	a := owner(t, store, url, time.Hour, true)
	b := owner(t, store, url, time.Hour, true)
	eventually(t, "the buckets split", func() bool { return a.Owner().Owned() == buckets/2 && b.Owner().Owned() == buckets/2 })
	var owned, other []string
	for i := 0; len(owned) < 4 || len(other) < 3; i++ {
		name := fmt.Sprintf("bronze.mixed%d", i)
		if b.Owner().Owns(name) {
			owned = append(owned, name)
		} else {
			other = append(other, name)
		}
	}
	check := func(what string, tables []string, until time.Time) {
		t.Helper()
		as := make([]control.Advance, len(tables))
		for i, table := range tables {
			as[i] = adv(table, until)
		}
		res, err := b.AdvanceBatch(context.Background(), as)
		if err != nil || len(res) != len(as) {
			t.Fatalf("%s: %d results, %v", what, len(res), err)
		}
		for i, r := range res {
			own := b.Owner().Owns(tables[i])
			switch {
			case r.Err != nil:
				t.Errorf("%s: %s: %v", what, tables[i], r.Err)
			case own && (!r.Moved || r.Verdict.Table != tables[i] || !r.Verdict.FinalizedUntil.Equal(until)):
				t.Errorf("%s: owned %s at %d: %+v, want moved to %v", what, tables[i], i, r, until)
			case !own && (r.Moved || r.Verdict.Table != tables[i] || !r.Verdict.FinalizedUntil.IsZero()):
				t.Errorf("%s: held %s at %d: %+v, want no verdict, not moved", what, tables[i], i, r)
			}
			if got := verdict(t, store, tables[i]); own != got.Equal(until) {
				t.Errorf("%s: %s stands at %v (owned %v)", what, tables[i], got, own)
			}
		}
	}
	check("mixed", []string{other[0], owned[0], other[1], owned[1], owned[2], other[2]}, hour)
	check("held first", []string{other[0], other[1], owned[0], owned[3]}, hour.Add(time.Hour))
	check("owned only", []string{owned[0], owned[1], owned[2], owned[3]}, hour.Add(2*time.Hour))
}
