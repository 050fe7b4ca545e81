//go:build linux

package tests

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/finalizer-dev/finalizer/internal/embeddednats"
	"github.com/finalizer-dev/finalizer/internal/pgcluster/pgtest"
)

// TestOwnerHeldAdvanceAfterARewindSurvivesABlip is the review's repro of
// ADR 0020's addendum of 2026-12-06, with two replicas of the built
// binary: the owner of every bucket does not track the table's runs (its
// rules name other tables), the other tracks them and holds their
// advances. A rewind is heard live; the new run's progress and its
// termination are held; the control database's LISTEN connections are
// cut before the grace (a blip), which puts the held advance in doubt.
// The non-owner writes it after the grace: it was decided after the
// rewind, knowing it, and the statement's guard lets it move the table.
// On the previous code it was dropped as "older than the table's rewind"
// and the table stayed at the rewound verdict for good.
func TestOwnerHeldAdvanceAfterARewindSurvivesABlip(t *testing.T) {
	pgURL := pgtest.URL(t)
	ns, err := embeddednats.Start(embeddednats.Options{Port: embeddednats.RandomPort, StoreDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer ns.Shutdown()
	const grace = 6 * time.Second
	// A replica with the ownership's grace and one rule, table by query.
	replica := func(table, query string) *proc {
		return startServe(t, serveOpts{pgURL: pgURL, natsURL: ns.ClientURL(), config: `
ownership: {grace: 6s}
tables:
  - table: "` + table + `"
    query: "` + query + `"
    granularity: hour
`})
	}
	owner := replica("other.{name}", "other_*")
	eventually(t, "the first replica owns every bucket", func() bool {
		return metric(t, owner.httpURL, "finalizer_ownership_buckets_owned") == 64
	})
	holder := replica("rw.{name}", "rwq_*")
	if n := metric(t, holder.httpURL, "finalizer_ownership_buckets_owned"); n != 0 {
		t.Fatalf("the second replica owns %v buckets", n)
	}
	pub := connect(t, ns.ClientURL())
	q, run1, run2 := id(0x9a0), id(0x9a1), id(0x9a2)
	const name, table = "rwq_orders", "rw.rwq_orders"
	held := func() float64 { return metric(t, holder.httpURL, "finalizer_ownership_advances_held_total") }

	pub.publish("started", q, run1, startedJSON(q, run1, name))
	eventually(t, "the holder tracks the first run", func() bool { return tracked(t, holder.httpURL, run1) })
	pub.publish("progress", q, run1, cdcProgressJSON(q, run1, name, "2026-09-28T14:10:00"))
	waitVerdictWithin(t, pgURL, table, "2026-09-28T14:00:00Z", grace+20*time.Second) // the holder's fallback

	pg := []string{"--postgres-url", pgURL}
	if code, out, e := cli(t, nil, append([]string{"rewind", "--table", table, "--to", "2026-09-28T13:00:00Z", "--reason", "reprocessing"}, pg...)...); code != 0 {
		t.Fatalf("rewind: exit %d\n%s%s", code, out, e)
	}
	holder.logged(t, "the rewind heard live", "verdict rewound by an operator")

	// The new run, started and posting after the rewind; its tracker
	// knows the rewind. Held by the replica that does not own the table.
	now := time.Now().UTC()
	before := held()
	pub.publish("started", q, run2, startedAtJSON(q, run2, name, now.Format("2006-01-02T15:04:05")))
	eventually(t, "the holder tracks the new run", func() bool { return tracked(t, holder.httpURL, run2) })
	progress := strings.Replace(cdcProgressJSON(q, run2, name, "2026-09-28T15:10:00"),
		`"timestamp":"2026-09-28T15:00:00.000Z"`, `"timestamp":"`+time.Now().UTC().Format("2006-01-02T15:04:05.000Z")+`"`, 1)
	pub.publish("progress", q, run2, progress)
	eventually(t, "the new run's advance held", func() bool { return held() > before })
	heldAt := time.Now()
	pub.publish("terminated", q, run2, terminatedJSON(q, run2))

	// The blip: the LISTEN connections cut, before the grace.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, pgURL)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	var killed int
	if err := conn.QueryRow(ctx, `SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE pid <> pg_backend_pid() AND query ILIKE 'listen%'`).Scan(&killed); err != nil || killed == 0 {
		t.Fatalf("cut the LISTEN connections: %d, %v", killed, err)
	}
	if r, _ := readRow(t, pgURL, table); !r.FinalizedUntil.Equal(utc("2026-09-28T13:00:00Z")) || time.Since(heldAt) >= grace {
		t.Fatalf("the blip came too late to test the doubt (verdict %v, %v after the hold)", r.FinalizedUntil, time.Since(heldAt))
	}
	holder.logged(t, "the reconnect", "control database connection re-established")

	// Written by the holder after the grace (from the reconnect).
	waitVerdictWithin(t, pgURL, table, "2026-09-28T15:00:00Z", grace+20*time.Second)
}

// waitVerdictWithin is waitVerdict with a deadline of its own.
func waitVerdictWithin(t *testing.T, pgURL, table, want string, within time.Duration) {
	t.Helper()
	w := utc(want)
	deadline := time.Now().Add(within)
	var last row
	for time.Now().Before(deadline) {
		r, ok := readRow(t, pgURL, table)
		if ok && r.FinalizedUntil.Equal(w) {
			return
		}
		last = r
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("%s: verdict %v after %v, want %v", table, last.FinalizedUntil, within, w)
}
