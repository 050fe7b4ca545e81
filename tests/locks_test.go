//go:build linux

package tests

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/finalizer-dev/finalizer/internal/pgcluster/pgtest"
)

// TestOpenTransactionOnOneRowStallsNoOtherTable: a session outside the
// service holds one table's control row locked in an open transaction (a
// downstream job's SELECT ... FOR SHARE, an operator's UPDATE in psql
// left uncommitted). The other tables' verdicts of the same boundary land
// within a few seconds (the group waits one lock wait, then applies them
// without the held one); the held table's verdict lands once the lock is
// gone, and the log names it. Before, the whole group waited for its
// statement deadline (10 s), failed, and failed again at every retry with
// the held table in it.
func TestOpenTransactionOnOneRowStallsNoOtherTable(t *testing.T) {
	pgURL := pgtest.URL(t)
	s := startServe(t, serveOpts{pgURL: pgURL})
	pub := connect(t, s.natsURL)
	const n = 20
	q := func(i int) string { return id(0x700 + i) }
	r := func(i int) string { return id(0x800 + i) }
	table := func(i int) string { return fmt.Sprintf("locks.t%02d", i) }
	for i := range n {
		if code, out, e := cli(t, nil, "track", "--nats-url", s.natsURL, "--query-id", q(i), "--run-id", r(i), "--table", table(i)); code != 0 {
			t.Fatalf("track: %d %s %s", code, out, e)
		}
		pub.publish("started", q(i), r(i), startedJSON(q(i), r(i), ""))
		pub.publish("progress", q(i), r(i), progressAt(q(i), r(i), "", 1, "2026-09-28T14:05:00"))
	}
	for i := range n {
		waitVerdict(t, pgURL, table(i), "2026-09-28T14:00:00Z")
	}

	ctx := context.Background()
	other, err := pgx.Connect(ctx, pgURL)
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close(ctx)
	tx, err := other.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx) //nolint:errcheck
	const held = 7
	if _, err := tx.Exec(ctx, `SELECT * FROM public.table_finalization WHERE table_name = $1 FOR SHARE`, table(held)); err != nil {
		t.Fatal(err)
	}

	start := time.Now()
	for i := range n {
		pub.publish("progress", q(i), r(i), progressAt(q(i), r(i), "", 2, "2026-09-28T15:05:00"))
	}
	for i := range n {
		if i != held {
			waitVerdict(t, pgURL, table(i), "2026-09-28T15:00:00Z")
		}
	}
	if took := time.Since(start); took > 6*time.Second {
		t.Errorf("the other tables took %v with one row held (lock wait 1 s)", took)
	}
	if row, _ := readRow(t, pgURL, table(held)); !row.FinalizedUntil.Equal(utc("2026-09-28T14:00:00Z")) {
		t.Fatalf("the held table moved under the lock: %+v", row)
	}
	s.logged(t, "the held table named", "another session holds tables of the control table locked")

	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	// Its retry (1 s, then 2 s) or, when they are spent, its next
	// progress applies it.
	pub.publish("progress", q(held), r(held), progressAt(q(held), r(held), "", 3, "2026-09-28T15:10:00"))
	waitVerdict(t, pgURL, table(held), "2026-09-28T15:00:00Z")
}
