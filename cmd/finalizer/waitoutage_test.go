package main

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/finalizer-dev/finalizer/control"
)

// TestWaitOutlivesItsConnections: `finalizer wait` blocked on a table
// outlives the loss of every connection it has (a failover, a restart;
// here its database's backends terminated). Its LISTEN connection
// reconnects and it looks at the table again; that look meets a pooled
// connection to a backend that is gone (pgxpool checks only those idle
// for more than a second), and the wait goes on once the database
// answers; the next move releases it (exit 0). Before, that look's error
// ended the wait with exit 2: TestPostgresFailover failed on it when the
// failover came within a second of the wait's last look, which a loaded
// machine's slow start of the wait made likely.
func TestWaitOutlivesItsConnections(t *testing.T) {
	url, s := controlDB(t)
	const table = "silver.outage"
	advanceTo(t, s, table, "q1", "outage", "r1", statusAt)
	until := statusAt.Add(time.Hour)
	type result struct {
		code        int
		out, errOut string
	}
	done := make(chan result, 1)
	go func() {
		code, out, errOut := runCLI(t, "wait", "--table", table, "--until", until.Format(time.RFC3339), "--timeout", "60s",
			"--postgres-url", url, "--http-url", "")
		done <- result{code, out, errOut}
	}()

	ctx := context.Background()
	admin, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close(ctx)
	// The wait is blocked once a backend of its LISTENs.
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		var n int
		if err := admin.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity
			WHERE datname = current_database() AND pid <> pg_backend_pid() AND query LIKE 'LISTEN %'`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		if n > 0 {
			break
		}
		select {
		case r := <-done:
			t.Fatalf("wait returned before the outage: exit %d, stdout %q, stderr %q", r.code, r.out, r.errOut)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatal("the wait never LISTENed")
		}
	}
	// Every other backend of the database goes: the wait's and the
	// store's that wrote the verdict.
	if _, err := admin.Exec(ctx, `SELECT pg_terminate_backend(pid) FROM pg_stat_activity
		WHERE datname = current_database() AND pid <> pg_backend_pid() AND backend_type = 'client backend'`); err != nil {
		t.Fatal(err)
	}
	select {
	case r := <-done:
		t.Fatalf("wait ended at the outage: exit %d, stdout %q, stderr %q; want it to wait on", r.code, r.out, r.errOut)
	case <-time.After(time.Second): // the reconnect (50 ms) and the look that follows
	}
	s2, err := control.Open(ctx, url, control.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s2.Close()
	advanceTo(t, s2, table, "q1", "outage", "r1", until)
	select {
	case r := <-done:
		if r.code != exitOK || !strings.Contains(r.out, "final until") {
			t.Fatalf("wait: exit %d, stdout %q, stderr %q; want final (0)", r.code, r.out, r.errOut)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("wait still blocked after the verdict reached its time")
	}
}
