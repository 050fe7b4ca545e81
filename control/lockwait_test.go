package control

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// TestLockedTableDoesNotStallItsGroup holds, from another session, each
// kind of lock an advance can wait for (a control row, a feeder row, a
// table's advisory lock, the whole control table) in an open transaction,
// and checks that a group commit applies every other table in about one
// lock wait, fails only the held ones with ErrBusy, and applies them once
// the lock is gone. Before the lock wait, the group waited for its
// deadline and failed whole.
func TestLockedTableDoesNotStallItsGroup(t *testing.T) {
	const wait = 200 * time.Millisecond
	s, url := newStore(t, Options{LockWait: wait})
	ctx := context.Background()
	// 40 solo tables, and two tables with two feeders each (the feeders
	// table's path: advisory locks, then rows).
	var solo []string
	for i := range 40 {
		tb := fmt.Sprintf("t.%02d", i)
		solo = append(solo, tb)
		if _, _, err := s.Advance(ctx, Advance{Table: tb, FinalizedUntil: at(12, 0), QueryID: "q"}); err != nil {
			t.Fatal(err)
		}
	}
	for _, tb := range []string{"m.feeder", "m.advisory"} {
		for _, q := range []string{"q1", "q2"} {
			if _, _, err := s.Advance(ctx, Advance{Table: tb, FinalizedUntil: at(12, 0), QueryID: q}); err != nil {
				t.Fatal(err)
			}
		}
	}

	cases := []struct {
		name string
		lock string   // run in the other session's open transaction
		busy []string // the tables it holds
	}{
		{"a control row FOR SHARE", `SELECT * FROM table_finalization WHERE table_name = 't.07' FOR SHARE`, []string{"t.07"}},
		{"a control row updated", `UPDATE table_finalization SET updated_at = updated_at WHERE table_name = 't.21'`, []string{"t.21"}},
		{"a feeder row", `SELECT * FROM table_finalization_feeds WHERE table_name = 'm.feeder' AND feeder = 'q1' FOR UPDATE`, []string{"m.feeder"}},
		{"an advisory lock", `SELECT pg_advisory_xact_lock(hashtextextended('"public"."table_finalization"' || 'm.advisory', 0))`, []string{"m.advisory"}},
	}
	for step, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			until := at(13+step, 0)
			var as []Advance
			for _, tb := range solo {
				as = append(as, Advance{Table: tb, FinalizedUntil: until, QueryID: "q"})
			}
			for _, tb := range []string{"m.feeder", "m.advisory"} {
				for _, q := range []string{"q1", "q2"} {
					as = append(as, Advance{Table: tb, FinalizedUntil: until, QueryID: q})
				}
			}
			held := map[string]bool{}
			for _, tb := range c.busy {
				held[tb] = true
			}

			tx := otherTx(t, url)
			if _, err := tx.Exec(ctx, c.lock); err != nil {
				t.Fatal(err)
			}
			start := time.Now()
			cctx, cancel := context.WithTimeout(ctx, 20*time.Second)
			res, err := s.AdvanceBatch(cctx, as)
			cancel()
			took := time.Since(start)
			if err != nil {
				t.Fatalf("batch error %v after %v", err, took)
			}
			if took > 10*wait+2*time.Second {
				t.Errorf("the group took %v with a lock wait of %v", took, wait)
			}
			for i, a := range as {
				switch r := res[i]; {
				case held[a.Table] && !errors.Is(r.Err, ErrBusy):
					t.Errorf("%s (held): err = %v, want ErrBusy", a.Table, r.Err)
				case !held[a.Table] && (r.Err != nil || !r.Verdict.FinalizedUntil.Equal(until)):
					t.Errorf("%s: %v, err %v; want it at %v", a.Table, r.Verdict.FinalizedUntil, r.Err, until)
				}
			}
			if err := tx.Rollback(ctx); err != nil {
				t.Fatal(err)
			}
			// The lock gone, the held tables move (their retry).
			res, err = s.AdvanceBatch(ctx, as)
			if err != nil {
				t.Fatal(err)
			}
			for i, a := range as {
				if r := res[i]; r.Err != nil {
					t.Errorf("retry of %s: %v", a.Table, r.Err)
				}
				v, err := s.Get(ctx, a.Table)
				if err != nil || !v.FinalizedUntil.Equal(until) {
					t.Errorf("%s stands at %v (%v), want %v", a.Table, v.FinalizedUntil, err, until)
				}
			}
		})
	}
}

// TestWholeTableLockFailsTheGroupWithoutQuarantine holds the whole control
// table (LOCK TABLE, as a migration would): no advance can be applied, and
// the group fails, within its deadline (a statement the connection has
// not prepared yet waits in its preparation, before the lock wait is set)
// or after one lock wait, none of its advances as ErrBusy (which would
// send each alone for a while after the lock is gone).
func TestWholeTableLockFailsTheGroupWithoutQuarantine(t *testing.T) {
	const wait = 200 * time.Millisecond
	s, url := newStore(t, Options{LockWait: wait})
	ctx := context.Background()
	var as []Advance
	for i := range 20 {
		tb := fmt.Sprintf("t.%02d", i)
		if _, _, err := s.Advance(ctx, Advance{Table: tb, FinalizedUntil: at(12, 0), QueryID: "q"}); err != nil {
			t.Fatal(err)
		}
		as = append(as, Advance{Table: tb, FinalizedUntil: at(13, 0), QueryID: "q"})
	}
	tx := otherTx(t, url)
	if _, err := tx.Exec(ctx, `LOCK TABLE table_finalization IN SHARE MODE`); err != nil {
		t.Fatal(err)
	}
	cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	res, err := s.AdvanceBatch(cctx, as)
	for i, r := range res {
		if r.Err == nil {
			t.Errorf("%s applied under a table lock", as[i].Table)
		}
		if errors.Is(r.Err, ErrBusy) {
			t.Errorf("%s: ErrBusy for a lock on the whole table: %v", as[i].Table, r.Err)
		}
	}
	t.Logf("batch error: %v", err)
}

// standAt10 moves n tables (format, e.g. "t.%d", with their index) of s
// to 10:00 with query "q" and returns the advances that move them to 11:00.
func standAt10(t *testing.T, s *Store, format string, n int) []Advance {
	t.Helper()
	var first, second []Advance
	for i := range n {
		tb := fmt.Sprintf(format, i)
		first = append(first, Advance{Table: tb, QueryID: "q", FinalizedUntil: at(10, 0)})
		second = append(second, Advance{Table: tb, QueryID: "q", FinalizedUntil: at(11, 0)})
	}
	if _, err := s.AdvanceBatch(context.Background(), first); err != nil {
		t.Fatal(err)
	}
	return second
}

// otherTx begins a transaction on a connection of its own to url, as
// another session would hold locks in: rolled back at cleanup unless the
// test ends it first.
func otherTx(t *testing.T, url string) pgx.Tx {
	t.Helper()
	ctx := context.Background()
	tx, err := connect(t, url).Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tx.Rollback(ctx) })
	return tx
}
