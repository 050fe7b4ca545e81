package control

import (
	"context"
	"testing"
	"time"
)

// TestConnectionBrokenWhileWaitingForALock: the group's statement waits
// for a row another session holds, and its connection is cut (the
// backend terminated, as a failover or an operator's
// pg_terminate_backend would) in the middle of the pipeline, through
// soleDirect and through pgx, and again during the busy probe that
// follows a lock wait. The group fails without hanging, nothing is
// written ahead, no broken connection stays in the pool, and the next
// group applies every advance.
func TestConnectionBrokenWhileWaitingForALock(t *testing.T) {
	for _, tc := range []struct {
		name   string
		direct bool
		probe  bool // cut the busy probe's connection instead
	}{{"soleDirect", true, false}, {"pgx", false, false}, {"the busy probe", true, true}} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			wait := 4 * time.Second
			if tc.probe {
				wait = 300 * time.Millisecond
			}
			s, url := newStore(t, Options{LockWait: wait})
			s.direct = tc.direct
			second := standAt10(t, s, "b.t%d", 6)
			tx := otherTx(t, url)
			lock := `SELECT * FROM table_finalization WHERE table_name = 'b.t2' FOR SHARE`
			if _, err := tx.Exec(ctx, lock); err != nil {
				t.Fatal(err)
			}
			killer := connect(t, url)
			done := make(chan struct{})
			var res []AdvanceResult
			var batchErr error
			go func() {
				defer close(done)
				cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
				defer cancel()
				res, batchErr = s.AdvanceBatch(cctx, second)
			}()
			kill := `SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND pid <> pg_backend_pid() AND query LIKE '%unnest%'`
			if tc.probe {
				// The probe waits for no row; hold the whole feeders
				// table (ACCESS EXCLUSIVE) once the group waits for the
				// row, so that the probe waits too, and is cut there.
				if _, err := killer.Exec(ctx, `SELECT pg_sleep(0.1)`); err != nil {
					t.Fatal(err)
				}
				if _, err := tx.Exec(ctx, `LOCK TABLE table_finalization_feeds IN ACCESS EXCLUSIVE MODE`); err != nil {
					t.Fatal(err)
				}
				kill = `SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND pid <> pg_backend_pid() AND query LIKE '%SKIP LOCKED%'`
			}
			var killed int
			deadline := time.Now().Add(10 * time.Second)
			for killed == 0 && time.Now().Before(deadline) {
				if err := killer.QueryRow(ctx, kill).Scan(&killed); err != nil {
					t.Fatal(err)
				}
				if killed == 0 {
					time.Sleep(20 * time.Millisecond)
				}
			}
			if killed == 0 {
				t.Fatal("no backend of the group's was seen waiting for the lock")
			}
			select {
			case <-done:
			case <-time.After(20 * time.Second):
				t.Fatal("the group hung after its connection was cut")
			}
			t.Logf("batch error: %v", batchErr)
			for i, r := range res {
				t.Logf("%s: moved %v err %v", second[i].Table, r.Moved, r.Err)
			}
			if err := tx.Rollback(ctx); err != nil {
				t.Fatal(err)
			}
			// Nothing ahead of the data, nothing lost: the retry applies all.
			for range 3 { // every connection of the pool in turn
				r, err := s.AdvanceBatch(ctx, second)
				if err != nil {
					t.Fatalf("the retry: %v", err)
				}
				for i := range r {
					if r[i].Err != nil {
						t.Errorf("retry of %s: %v", second[i].Table, r[i].Err)
					}
				}
			}
			for _, a := range second {
				v, err := s.Get(ctx, a.Table)
				if err != nil || !v.FinalizedUntil.Equal(at(11, 0)) {
					t.Errorf("%s stands at %v (%v)", a.Table, v.FinalizedUntil, err)
				}
			}
		})
	}
}
