package service

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/finalizer-dev/finalizer/finalizer"
	"github.com/finalizer-dev/finalizer/internal/embeddednats"
	"github.com/finalizer-dev/finalizer/listener"
	"github.com/finalizer-dev/finalizer/progress"
)

// TestExpiredRunStaysExpiredAcrossANATSRestart (ADR 0017): a run the
// janitor expired is tracked again by its next event, not by a rescan of
// the stream that re-reads the events it had sent before its silence. A
// NATS server restarted (real JetStream, on disk) makes the service
// reconnect and rescan the retained runs: the expired run must stay
// expired (before, it was tracked again at once, to expire again a
// silence later, its table joined again), a run first seen after the
// restart is tracked, and the expired run's next event tracks it again.
func TestExpiredRunStaysExpiredAcrossANATSRestart(t *testing.T) {
	const expire = 1500 * time.Millisecond
	spec, err := progress.ParseSpec(progress.SpecOptions{})
	if err != nil {
		t.Fatal(err)
	}
	store := t.TempDir()
	ns, err := embeddednats.Start(embeddednats.Options{Host: "127.0.0.1", Port: embeddednats.RandomPort, StoreDir: store})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { ns.Shutdown() }()
	url := ns.ClientURL()
	core, logs := observer.New(zap.InfoLevel)
	opts := Options{Logger: zap.New(core), NATS: listener.Options{URL: url, ReconnectWait: 100 * time.Millisecond},
		Registry: finalizer.RegistryConfig{ExpireAfter: expire, StaleAfter: expire / 2,
			Rules: []finalizer.Rule{{Table: "exp.{name}", Query: "exp-*", Spec: spec}}}}
	svc, _ := startTestWith(t, opts)
	pub, err := nats.Connect(url, nats.MaxReconnects(-1), nats.ReconnectWait(50*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer pub.Close()
	query := func(i int) string { return fmt.Sprintf("00000000-0000-4000-8000-%012d", i) }
	runID := func(i int) string { return fmt.Sprintf("00000000-2222-4000-8000-%012d", i) }
	send := func(kind string, i int, body string) {
		t.Helper()
		if err := pub.Publish(fmt.Sprintf("spark.%s.%s.%s", kind, query(i), runID(i)), []byte(body)); err != nil {
			t.Fatal(err)
		}
		if err := pub.Flush(); err != nil {
			t.Fatal(err)
		}
	}
	started := func(i int) string {
		return fmt.Sprintf(`{"id":%q,"runId":%q,"name":"exp-%d","timestamp":"2026-09-28T12:00:00.000Z"}`, query(i), runID(i), i)
	}
	tracked := func(i int) bool {
		for _, st := range svc.Registry().Status() {
			if st.RunID == runID(i) {
				return true
			}
		}
		return false
	}
	wait := func(what string, d time.Duration, ok func() bool) {
		t.Helper()
		deadline := time.Now().Add(d)
		for !ok() {
			if time.Now().After(deadline) {
				t.Fatalf("%s: not within %v", what, d)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}

	send("started", 1, started(1))
	wait("run 1 tracked", 5*time.Second, func() bool { return tracked(1) })
	wait("run 1 expired", 10*time.Second, func() bool {
		return !tracked(1) && logs.FilterMessageSnippet("run silent for too long").Len() > 0
	})

	// NATS restarts: the service reconnects, catches up and rescans.
	reconnects := logs.FilterMessage("caught up after reconnect").Len()
	ns.Shutdown()
	if ns, err = embeddednats.Start(embeddednats.Options{Host: "127.0.0.1", Port: portOf(t, url), StoreDir: store}); err != nil {
		t.Fatalf("restart NATS: %v", err)
	}
	wait("the reconnect handled", 20*time.Second, func() bool { return logs.FilterMessage("caught up after reconnect").Len() > reconnects })
	// A new run, seen after the restart, is found (live, and by the rescan).
	send("started", 2, started(2))
	wait("run 2 tracked", 5*time.Second, func() bool { return tracked(2) })
	// The expired run stays expired for longer than the rescans take.
	for end := time.Now().Add(2 * time.Second); time.Now().Before(end); time.Sleep(10 * time.Millisecond) {
		if tracked(1) {
			t.Fatal("the expired run 1 is tracked again after the NATS restart, by a re-read of the events it sent before its silence")
		}
	}
	// Its next event tracks it again.
	send("started", 1, started(1))
	wait("run 1 tracked again by its next event", 5*time.Second, func() bool { return tracked(1) })
	svc.Stop(context.Background())
}

// portOf returns the port of a nats:// URL.
func portOf(t *testing.T, u string) int {
	t.Helper()
	var port int
	if _, err := fmt.Sscanf(u[strings.LastIndex(u, ":")+1:], "%d", &port); err != nil {
		t.Fatalf("port of %s: %v", u, err)
	}
	return port
}
