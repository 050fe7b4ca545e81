//go:build linux

package tests

import (
	"context"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/finalizer-dev/finalizer/internal/pgcluster/pgtest"
)

// TestREADMEWalkThrough follows "Five minutes with the service" and
// "Tracking explicitly" with the built binary, and checks every exit code
// the README documents there.
func TestREADMEWalkThrough(t *testing.T) {
	pgURL := pgtest.URL(t)
	s := startServe(t, serveOpts{pgURL: pgURL, args: []string{"--config", "../examples/finalizer.yaml"}})
	nats := []string{"--nats-url", s.natsURL}
	read := []string{"--postgres-url", pgURL, "--http-url", s.httpURL}
	must := func(want int, args ...string) string {
		t.Helper()
		code, out, e := cli(t, nil, args...)
		if code != want {
			t.Fatalf("%v: exit %d, want %d\n%s%s", args, code, want, out, e)
		}
		return out + e
	}

	// 2. Publish what a Spark job would send.
	must(0, append([]string{"publish", "../examples/orders-1.jsonl"}, nats...)...)
	waitVerdict(t, pgURL, "bronze.orders", "2026-09-28T14:00:00Z")
	if out := must(0, append([]string{"status"}, read...)...); !strings.Contains(out, "bronze.orders  2026-09-28T14:00:00Z") {
		t.Errorf("status:\n%s", out)
	}

	// 3. Gate a job on the next hour.
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	w := exec.CommandContext(ctx, binary, append([]string{"wait", "--table", "bronze.orders", "--until", "2026-09-28T15:00:00Z", "--timeout", "10m"}, read...)...)
	w.Env = cleanEnv()
	if err := w.Start(); err != nil {
		t.Fatal(err)
	}
	waited := make(chan error, 1)
	go func() { waited <- w.Wait() }()
	must(0, append([]string{"publish", "../examples/orders-2.jsonl"}, nats...)...)
	if err := <-waited; err != nil {
		t.Fatalf("wait: %v, want exit 0", err)
	}
	end := func(ts string) []string { return []string{"--period-end", ts} }
	must(0, append(append([]string{"is-final", "--table", "bronze.orders"}, end("2026-09-28T15:00:00Z")...), read...)...)
	if out := must(1, append(append([]string{"is-final", "--table", "bronze.orders"}, end("2026-09-28T16:00:00Z")...), read...)...); !strings.Contains(out, "(final until 2026-09-28T15:00:00Z)") {
		t.Errorf("is-final of a period not final yet does not say how far the table is final:\n%s", out)
	}
	if out := must(3, append(append([]string{"is-final", "--table", "bronze.order"}, end("2026-09-28T15:00:00Z")...), read...)...); !strings.Contains(out, `did you mean "bronze.orders"?`) {
		t.Errorf("typo: %s", out)
	}
	must(2, append([]string{"is-final", "--table", "bronze.orders"}, read...)...)
	must(3, append([]string{"wait", "--table", "bronze.nope", "--until", "2026-09-28T15:00:00Z", "--timeout", "10m"}, read...)...)
	must(1, append([]string{"wait", "--allow-missing", "--table", "bronze.nope", "--until", "2026-09-28T15:00:00Z", "--timeout", "2s"}, read...)...)

	// Tracking explicitly: the same run into a daily table.
	must(0, append([]string{"track", "--query-id", "6f1c1a1e-2b3c-4d5e-8f90-a1b2c3d4e5f6", "--run-id", "0b7e5a52-9c1d-4e2f-a3b4-c5d6e7f8a9b0",
		"--table", "silver.orders_daily", "--granularity", "day"}, nats...)...)
	if out := must(0, append([]string{"join", "--run-id", "0b7e5a52-9c1d-4e2f-a3b4-c5d6e7f8a9b0", "--timeout", "10m"}, nats...)...); !strings.Contains(out, "done") {
		t.Errorf("join: %s", out)
	}
	if out := must(0, append([]string{"status", "--table", "silver.orders_daily"}, read...)...); !strings.Contains(out, "silver.orders_daily  2026-09-28T00:00:00Z") {
		t.Errorf("status of the daily table:\n%s", out)
	}
	must(2, append([]string{"join", "--run-id", "00000000-0000-4000-8000-000000000000", "--timeout", "2s"}, nats...)...)

	// A spec that does not fit the source: held, with the reason, warned once.
	must(0, append([]string{"track", "--query-id", "8d268dc2-bc9c-4be8-97a9-b135d2943028", "--run-id", "e225d92f-2545-48f8-87a2-9c0309580f8a",
		"--table", "bronze.kafka_words"}, nats...)...)
	must(0, append([]string{"publish", sparkLog}, nats...)...)
	eventually(t, "the Kafka run held", func() bool {
		out := must(0, append([]string{"status"}, read...)...)
		return strings.Contains(out, `HELD   held by no_time: source 0: pointer "/commit_ts" finds nothing in endOffset`)
	})
	if n := strings.Count(s.stderr.String(), "progress has no usable time"); n != 1 {
		t.Errorf("%d no-time warnings for the run, want 1", n)
	}
	// A file that is not an event log.
	must(2, append([]string{"publish", "../examples/finalizer.yaml"}, nats...)...)
}
