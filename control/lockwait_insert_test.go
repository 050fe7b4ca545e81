package control

import (
	"context"
	"errors"
	"testing"
	"time"
)

// TestUncommittedInsertIsBusy: another session inserted a table's row (or
// a feeder row) in a transaction it keeps open (an operator's INSERT in
// psql): the row is invisible to the busy probe, which finds nothing
// held, so the group finds the table by halving, a lock wait per level.
// The table's advance must then fail as ErrBusy, so that its retries are
// sent alone instead of halving every group they ride in again; the
// other tables of the group are applied.
func TestUncommittedInsertIsBusy(t *testing.T) {
	for _, tc := range []struct{ name, insert string }{
		{"a control row", `INSERT INTO table_finalization (table_name, finalized_until, solo) VALUES ('n.new', '2026-09-28 09:00Z', true)`},
		{"a feeder row", `INSERT INTO table_finalization_feeds (table_name, feeder, finalized_until) VALUES ('n.new', 'q', '2026-09-28 09:00Z')`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			const wait = 150 * time.Millisecond
			ctx := context.Background()
			s, url := newStore(t, Options{LockWait: wait})
			second := standAt10(t, s, "n.t%02d", 16)
			// Two tables' first verdicts, one of them held.
			second = append(second, Advance{Table: "n.new", QueryID: "q", FinalizedUntil: at(11, 0)}, Advance{Table: "n.zfree", QueryID: "q", FinalizedUntil: at(11, 0)})
			tx := otherTx(t, url)
			if _, err := tx.Exec(ctx, tc.insert); err != nil {
				t.Fatal(err)
			}
			start := time.Now()
			res, err := s.AdvanceBatch(ctx, second)
			t.Logf("took %v, lock wait %v", time.Since(start), wait)
			if err != nil {
				t.Fatal(err)
			}
			for i, a := range second {
				switch r := res[i]; {
				case a.Table == "n.new":
					if !errors.Is(r.Err, ErrBusy) {
						t.Errorf("n.new (inserted, uncommitted): %v, want ErrBusy", r.Err)
					}
				case r.Err != nil || !r.Verdict.FinalizedUntil.Equal(at(11, 0)):
					t.Errorf("%s: %v %v", a.Table, r.Verdict.FinalizedUntil, r.Err)
				}
			}
		})
	}
}
