//go:build linux

package tests

import (
	"net/url"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/finalizer-dev/finalizer/internal/embeddednats"
	"github.com/finalizer-dev/finalizer/internal/pgcluster/pgtest"
)

// Issue 18, bug 4b, with real parts (the real binary, an embedded NATS
// restarted mid-run, a real PostgreSQL): after a reconnect, live delivery
// resumed before the stream was re-ensured and the runs caught up, so a
// run that terminated in that window never got the progress it posted
// while the service was away. Here the run posts a progress crossing an
// hour while the service is disconnected (the stream stores it, nothing
// delivers it), and terminates as soon as the service is back: whichever
// comes first, the reconnect's catch-up or the live termination, the
// tracker applies that progress before it ends, and join says done.
func TestTerminationInReconnectWindow(t *testing.T) {
	store := t.TempDir()
	ns, err := embeddednats.Start(embeddednats.Options{Port: embeddednats.RandomPort, StoreDir: store})
	if err != nil {
		t.Fatal(err)
	}
	var nsMu sync.Mutex
	t.Cleanup(func() { nsMu.Lock(); ns.Shutdown(); nsMu.Unlock() })
	natsURL := ns.ClientURL()
	u, _ := url.Parse(natsURL)
	port, _ := strconv.Atoi(u.Port())

	pgURL := pgtest.URL(t)
	s := startServe(t, serveOpts{pgURL: pgURL, natsURL: natsURL, config: `
tables:
  - table: "window.{name}"
    query: "win_*"
`})
	q, r := id(0x4b0), id(0x4b1)
	pub := connect(t, natsURL)
	pub.publish("started", q, r, startedJSON(q, r, "win_orders"))
	eventually(t, "the run tracked", func() bool { return tracked(t, s.httpURL, r) })
	pub.publish("progress", q, r, progressAt(q, r, "win_orders", 1, "2026-09-28T13:10:00"))
	waitVerdict(t, pgURL, "window.win_orders", "2026-09-28T13:00:00Z")
	pub.nc.Close()

	nsMu.Lock()
	ns.Shutdown()
	nsMu.Unlock()
	eventually(t, "/readyz 503 while NATS is down", func() bool {
		code, _ := httpGet(t, s.httpURL+"/readyz", "")
		return code == 503
	})
	nsMu.Lock()
	ns, err = embeddednats.Start(embeddednats.Options{Port: port, StoreDir: store})
	nsMu.Unlock()
	if err != nil {
		t.Fatalf("restart NATS: %v", err)
	}
	// At once, before the service is back (it retries every few hundred
	// milliseconds): stored by the stream, delivered to nobody.
	pub2 := connect(t, natsURL)
	pub2.publish("progress", q, r, progressAt(q, r, "win_orders", 2, "2026-09-28T15:20:00"))
	// The termination as soon as the service is connected again: live
	// delivery is back, its catch-up may not have run yet.
	deadline := time.Now().Add(20 * time.Second)
	for {
		if code, _ := httpGet(t, s.httpURL+"/readyz", ""); code == 200 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the service did not reconnect")
		}
		time.Sleep(time.Millisecond)
	}
	pub2.publish("terminated", q, r, terminatedJSON(q, r))

	waitVerdict(t, pgURL, "window.win_orders", "2026-09-28T15:00:00Z")
	code, out, stderr := cli(t, nil, "join", "--nats-url", natsURL, "--run-id", r, "--timeout", "20s")
	if code != 0 {
		t.Fatalf("join: exit %d, stdout %q, stderr %q; want done (0)", code, out, stderr)
	}
}
