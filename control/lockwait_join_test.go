package control

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"
)

// TestLockedTableDoesNotStallItsJoins holds, from another session, each
// kind of lock a group of feeder joins can wait for (a solo table's
// control row, which a second query's join promotes; a table's advisory
// lock) in an open transaction, and checks that the group joins every
// other table in about one lock wait, fails only the held table's joins
// with ErrBusy, and joins them once the lock is gone. Before the lock
// wait, the group waited for its deadline (the service's: about 10 s) and
// failed whole, and every run of the group was tracked without holding
// its table.
func TestLockedTableDoesNotStallItsJoins(t *testing.T) {
	const wait = 200 * time.Millisecond
	s, url := newStore(t, Options{LockWait: wait})
	ctx := context.Background()
	// 30 solo tables fed by q, per case: a join of another query
	// promotes each.
	soloTables := func(step int) []string {
		var solo []string
		for i := range 30 {
			tb := fmt.Sprintf("j%d.%02d", step, i)
			solo = append(solo, tb)
			feed(t, s, tb, "q", "", at(12, 0))
		}
		return solo
	}
	cases := []struct {
		name, lock, busy string
	}{
		{"a control row FOR SHARE", `SELECT * FROM table_finalization WHERE table_name = 'j0.07' FOR SHARE`, "j0.07"},
		{"a control row updated", `UPDATE table_finalization SET updated_at = updated_at WHERE table_name = 'j1.21'`, "j1.21"},
		{"an advisory lock", `SELECT pg_advisory_xact_lock(hashtextextended('"public"."table_finalization"' || 'j2.13', 0))`, "j2.13"},
	}
	for step, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			q := fmt.Sprintf("q-new-%d", step)
			solo := soloTables(step)
			var js []FeederJoin
			for _, tb := range solo {
				js = append(js, FeederJoin{Table: tb, Query: q, Name: q})
			}
			// And a table the control table does not know yet.
			js = append(js, FeederJoin{Table: fmt.Sprintf("j.fresh%d", step), Query: q})
			tx := otherTx(t, url)
			if _, err := tx.Exec(ctx, c.lock); err != nil {
				t.Fatal(err)
			}
			start := time.Now()
			cctx, cancel := context.WithTimeout(ctx, 20*time.Second)
			res := s.JoinFeeders(cctx, js)
			cancel()
			took := time.Since(start)
			if took > 10*wait+2*time.Second {
				t.Errorf("the group took %v with a lock wait of %v", took, wait)
			}
			for i, j := range js {
				switch r := res[i]; {
				case j.Table == c.busy && !errors.Is(r.Err, ErrBusy):
					t.Errorf("%s (held): %+v, want ErrBusy", j.Table, r)
				case j.Table != c.busy && (r.Err != nil || !r.Joined.Added):
					t.Errorf("%s: %+v, want joined at once", j.Table, r)
				}
			}
			if err := tx.Rollback(ctx); err != nil {
				t.Fatal(err)
			}
			// The lock gone, the held table's join (its retry) goes.
			r := s.JoinFeeders(ctx, []FeederJoin{{Table: c.busy, Query: q, Name: q}})
			if r[0].Err != nil || !r[0].Joined.Added {
				t.Fatalf("retry of %s: %+v", c.busy, r[0])
			}
			fs, err := s.Feeders(ctx, c.busy)
			if err != nil {
				t.Fatal(err)
			}
			var found bool
			for _, f := range fs {
				found = found || (f.Feeder == q && !f.Retired())
			}
			if !found {
				t.Errorf("%s: feeders %+v, want %s among them", c.busy, fs, q)
			}
		})
	}
	t.Run("the whole table locked", func(t *testing.T) {
		tables := soloTables(9)[:10]
		tx := otherTx(t, url)
		if _, err := tx.Exec(ctx, `LOCK TABLE table_finalization IN SHARE MODE`); err != nil {
			t.Fatal(err)
		}
		var js []FeederJoin
		for _, tb := range tables {
			js = append(js, FeederJoin{Table: tb, Query: "q-locked"})
		}
		cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		for i, r := range s.JoinFeeders(cctx, js) {
			if r.Err == nil {
				t.Errorf("%s joined under a lock of the whole table", js[i].Table)
			}
			if errors.Is(r.Err, ErrBusy) {
				t.Errorf("%s: ErrBusy for a lock on the whole table: %v", js[i].Table, r.Err)
			}
		}
	})
}
