package control

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"
)

// TestDeadlineWhileWaitingForALock: the group's deadline ends while its
// statement waits for a held row (the lock wait longer than the
// deadline), through soleDirect's pipeline and through pgx: the group
// returns the deadline at about the deadline, writes nothing, and the
// pool's connections serve the next groups (none is left in the middle of
// a pipeline).
func TestDeadlineWhileWaitingForALock(t *testing.T) {
	for _, direct := range []bool{true, false} {
		t.Run(fmt.Sprintf("direct=%v", direct), func(t *testing.T) {
			ctx := context.Background()
			s, url := newStore(t, Options{LockWait: 10 * time.Second})
			s.direct = direct
			second := standAt10(t, s, "d.t%d", 5)
			tx := otherTx(t, url)
			if _, err := tx.Exec(ctx, `SELECT * FROM table_finalization WHERE table_name = 'd.t1' FOR SHARE`); err != nil {
				t.Fatal(err)
			}
			for range 3 {
				cctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
				start := time.Now()
				_, err := s.AdvanceBatch(cctx, second)
				cancel()
				if !errors.Is(err, context.DeadlineExceeded) {
					t.Errorf("batch error %v, want the deadline", err)
				}
				if took := time.Since(start); took > 3*time.Second {
					t.Errorf("the group returned %v after its deadline of 300ms", took)
				}
			}
			for _, a := range second {
				if v, err := s.Get(ctx, a.Table); err != nil || !v.FinalizedUntil.Equal(at(10, 0)) {
					t.Errorf("%s stands at %v (%v) while the group failed, want 10:00", a.Table, v.FinalizedUntil, err)
				}
			}
			if err := tx.Rollback(ctx); err != nil {
				t.Fatal(err)
			}
			for range 4 {
				res, err := s.AdvanceBatch(ctx, second)
				if err != nil {
					t.Fatal(err)
				}
				for i := range res {
					if res[i].Err != nil {
						t.Errorf("%s: %v", second[i].Table, res[i].Err)
					}
				}
			}
			for _, a := range second {
				if v, err := s.Get(ctx, a.Table); err != nil || !v.FinalizedUntil.Equal(at(11, 0)) {
					t.Errorf("%s stands at %v (%v), want 11:00", a.Table, v.FinalizedUntil, err)
				}
			}
		})
	}
}
