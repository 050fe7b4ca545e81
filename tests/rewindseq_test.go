//go:build linux

package tests

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/finalizer-dev/finalizer/internal/embeddednats"
	"github.com/finalizer-dev/finalizer/internal/natstest"
	"github.com/finalizer-dev/finalizer/internal/pgcluster/pgtest"
	"github.com/finalizer-dev/finalizer/listener"
)

// rewindWhileDown runs the usual reset with the service down (ADR 0019,
// addendum of 2026-12-06, "judged by sequence"), on a NATS server of its
// own: a run of orders-v1 whose driver's clock is ten minutes ahead posts
// its last progress (18:10) and terminates, the service stops, the
// operator rewinds bronze.orders to 14:00 (finalizer rewind reads the
// stream's sequence from that server after its commit), between (the
// stream deleted and created again, when recreate), and the reprocessing
// run (AvailableNow: started, one progress to 15:10, terminated) is
// stored seconds after the rewind, before the service starts again. It
// returns the service started again, the rewind's stdout and the
// PostgreSQL URL.
func rewindWhileDown(t *testing.T, recreate bool) (*proc, string, string) {
	t.Helper()
	ns, err := embeddednats.Start(embeddednats.Options{Port: embeddednats.RandomPort, StoreDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(ns.Shutdown)
	pgURL := pgtest.URL(t)
	pg := []string{"--postgres-url", pgURL}
	s := startServe(t, serveOpts{pgURL: pgURL, natsURL: ns.ClientURL(), config: ordersConfig})
	runAheadEnds(t, s, pgURL)
	s.stop()

	code, out, e := cli(t, nil, append([]string{"rewind", "--table", "bronze.orders", "--to", "2026-09-28T14:00:00Z",
		"--reason", "reprocessing from 14:00", "--by", "ops", "--http-url", "", "--nats-url", ns.ClientURL()}, pg...)...)
	if code != 0 || e != "" || !strings.Contains(out, "recorded the event stream's position with the rewind") {
		t.Fatalf("rewind: exit %d\nstdout: %s\nstderr: %s", code, out, e)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, js := natstest.Connect(t, ns.ClientURL())
	if recreate {
		st, err := js.Stream(ctx, listener.DefaultStream)
		if err != nil {
			t.Fatal(err)
		}
		info, err := st.Info(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if err := js.DeleteStream(ctx, listener.DefaultStream); err != nil {
			t.Fatal(err)
		}
		time.Sleep(10 * time.Millisecond) // another creation time
		if _, err := js.CreateStream(ctx, info.Config); err != nil {
			t.Fatal(err)
		}
	}
	// The reprocessing run, stored seconds after the rewind (acknowledged
	// by the stream before the service starts).
	for _, m := range []struct{ kind, payload string }{
		{"started", startedJSON(queryA, runB, "orders-v1")},
		{"progress", progressPosted(queryA, runB, "orders-v1", 0, time.Now().UTC(), "2026-09-28T15:10:00")},
		{"terminated", terminatedJSON(queryA, runB)},
	} {
		if _, err := js.Publish(ctx, "spark."+m.kind+"."+queryA+"."+runB, []byte(m.payload)); err != nil {
			t.Fatal(err)
		}
	}
	s = startServe(t, serveOpts{pgURL: pgURL, natsURL: ns.ClientURL(), config: ordersConfig})
	s.logged(t, "the recovery", "recovered tracked runs")
	return s, out, pgURL
}

// TestARewindMadeWithTheServiceDownIsJudgedByItsSequence (ADR 0019,
// addendum of 2026-12-06, "judged by sequence"): with the service down
// during the rewind, a retained progress was judged by a minute's margin
// across the NATS and PostgreSQL servers' clocks, and the reprocessing
// run's only progress, stored seconds after the rewind, was held for good
// (the table stayed at 14:00). finalizer rewind records the stream's
// sequence after its commit; the restarted service applies that progress
// at once (15:00), and still holds the old run's, stored before the
// rewind, whose driver's clock says after it.
func TestARewindMadeWithTheServiceDownIsJudgedByItsSequence(t *testing.T) {
	s, _, pgURL := rewindWhileDown(t, false)
	waitVerdict(t, pgURL, "bronze.orders", "2026-09-28T15:00:00Z")
	s.logged(t, "the old run's progress held", "posted before the table's last rewind")
	s.logged(t, "the recorded position used", "judged by the event stream's sequence recorded with them")
	if code := finalExit(t, []string{"--postgres-url", pgURL}, "bronze.orders", "2026-09-28T16:00:00Z"); code != 1 {
		t.Fatalf("is-final 16:00 exits %d, want 1: the old run's progress, stored before the rewind, undid it", code)
	}
}

// TestARewindsPositionOfAStreamCreatedAgainIsNotUsed: the stream deleted
// and created again after the rewind restarts its sequences; the position
// the rewind recorded is of the old stream and is not used (a warning
// says so): the margin holds the reprocessing run's progress stored
// seconds after the rewind (late, never wrong), and the table stays at
// 14:00.
func TestARewindsPositionOfAStreamCreatedAgainIsNotUsed(t *testing.T) {
	s, _, pgURL := rewindWhileDown(t, true)
	s.logged(t, "the position of another stream refused", "of a stream of another creation time")
	s.logged(t, "the new run's progress held by the margin", "posted before the table's last rewind")
	staysRewound(t, []string{"--postgres-url", pgURL}, "after the restart,", "a position recorded for another stream was used")
	if code := finalExit(t, []string{"--postgres-url", pgURL}, "bronze.orders", "2026-09-28T14:00:00Z"); code != 0 {
		t.Fatalf("is-final 14:00 exits %d, want 0: the rewind's verdict", code)
	}
}
