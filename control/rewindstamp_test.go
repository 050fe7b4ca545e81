package control

import (
	"context"
	"testing"
	"time"
)

// TestARewindIsStampedWhenItHoldsTheRow (ADR 0019, addendum of
// 2026-12-06): rewound_at, the row's updated_at and the audit entry's at
// were now(), the rewind transaction's start; a rewind queued behind a
// reader's lock (FOR SHARE in an open transaction) was stamped before it
// became visible, by as long as it waited, and a progress posted in that
// wait read as posted before the rewind. They are stamped with
// clock_timestamp() once the row is locked: no earlier than the reader's
// release, and all three the same value.
func TestARewindIsStampedWhenItHoldsTheRow(t *testing.T) {
	s, url := newStore(t, Options{LockWait: 30 * time.Second})
	ctx := context.Background()
	advance(t, s, "t", at(15, 0))
	reader := connect(t, url)
	tx, err := reader.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	if _, err := tx.Exec(ctx, `SELECT * FROM table_finalization WHERE table_name = 't' FOR SHARE`); err != nil {
		t.Fatal(err)
	}
	type result struct {
		e   AuditEntry
		err error
	}
	rewound := make(chan result, 1)
	go func() {
		e, err := s.Rewind(ctx, Rewind{Table: "t", To: at(12, 0), Reason: "reset", By: "test"})
		rewound <- result{e, err}
	}()
	eventually(t, "the rewind to wait for the reader", func() bool { return lockWaiters(t, s) == 1 })
	time.Sleep(1500 * time.Millisecond) // the wait the stamp must not include
	var released time.Time
	if err := tx.QueryRow(ctx, `SELECT clock_timestamp()`).Scan(&released); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	res := <-rewound
	if res.err != nil {
		t.Fatalf("rewind: %v", res.err)
	}
	v, err := s.Get(ctx, "t")
	if err != nil {
		t.Fatal(err)
	}
	if v.RewoundAt.Before(released) {
		t.Fatalf("rewound_at %s is before the reader released the row at %s: stamped at the transaction's start, %s before it became visible",
			v.RewoundAt.Format(time.RFC3339Nano), released.Format(time.RFC3339Nano), released.Sub(v.RewoundAt))
	}
	if !v.UpdatedAt.Equal(v.RewoundAt) || !res.e.At.Equal(v.RewoundAt) {
		t.Errorf("updated_at %s, the audit's at %s, rewound_at %s: want one stamp", v.UpdatedAt, res.e.At, v.RewoundAt)
	}
	entries, err := s.Audit(ctx, "t", 1)
	if err != nil || len(entries) != 1 || !entries[0].At.Equal(v.RewoundAt) {
		t.Errorf("the audit table's at: %+v %v, want %s", entries, err, v.RewoundAt)
	}
}
