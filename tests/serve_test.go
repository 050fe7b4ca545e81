//go:build linux

package tests

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/finalizer-dev/finalizer/internal/embeddednats"
	"github.com/finalizer-dev/finalizer/internal/pgcluster"
	"github.com/finalizer-dev/finalizer/internal/pgcluster/pgtest"
)

const (
	queryA = "8d268dc2-bc9c-4be8-97a9-b135d2943028"
	runA   = "e225d92f-2545-48f8-87a2-9c0309580f8a"
	runB   = "0f5b2b7c-6f0e-4d8e-9d42-3c1f2a7b9e11"
	queryC = "5c1a7f2e-98b3-4c1d-a8e0-7d1e4b2c3f40"
	runC   = "9a7e3d21-4b5c-4f6e-8a9b-0c1d2e3f4a5b"
)

// The reference scenario (reference test 4, ADR 0001) through the real
// service: 13:10 writes, 13:40 (same hour) does not, another run's progress
// and termination change nothing, 14:05 writes, termination ends the
// tracker; join reports done and the table got exactly two writes.
func TestReferenceScenario(t *testing.T) {
	pgURL := pgtest.URL(t)
	s := startServe(t, serveOpts{pgURL: pgURL})
	pub := connect(t, s.natsURL)
	nats := []string{"--nats-url", s.natsURL}

	code, out, errOut := cli(t, nil, append([]string{"track", "--query-id", queryA, "--run-id", runA, "--table", "bronze.orders"}, nats...)...)
	if code != 0 {
		t.Fatalf("track exit %d: %s %s", code, out, errOut)
	}
	pub.publish("started", queryA, runA, startedJSON(queryA, runA, "orders-v1"))
	pub.publish("progress", queryA, runA, cdcProgressJSON(queryA, runA, "orders-v1", "2026-09-28T13:10:00"))
	waitVerdict(t, pgURL, "bronze.orders", "2026-09-28T13:00:00Z")
	pub.publish("progress", queryA, runA, cdcProgressJSON(queryA, runA, "orders-v1", "2026-09-28T13:40:00"))
	pub.publish("progress", queryA, runB, cdcProgressJSON(queryA, runB, "orders-v1", "2026-09-28T18:00:00"))
	pub.publish("terminated", queryA, runB, terminatedJSON(queryA, runB))
	pub.publish("progress", queryA, runA, cdcProgressJSON(queryA, runA, "orders-v1", "2026-09-28T14:05:00"))
	pub.publish("terminated", queryA, runA, terminatedJSON(queryA, runA))

	code, out, errOut = cli(t, nil, append([]string{"join", "--run-id", runA, "--timeout", "20s"}, nats...)...)
	if code != 0 {
		t.Fatalf("join exit %d: %s %s", code, out, errOut)
	}
	r := waitVerdict(t, pgURL, "bronze.orders", "2026-09-28T14:00:00Z")
	if r.RunID != runA {
		t.Fatalf("provenance run_id = %s, want %s", r.RunID, runA)
	}
	if w := metric(t, s.httpURL, "finalizer_control_writes_total"); w != 2 {
		t.Fatalf("%v control-table writes, want exactly 2", w)
	}
	if a := metric(t, s.httpURL, "finalizer_advances_total"); a != 2 {
		t.Fatalf("%v advances, want 2", a)
	}
}

// Declarative tracking: a query matched by name, and one matched by a glob
// with a {name} template, are tracked from their started event.
func TestAutoTrackingByNameAndGlob(t *testing.T) {
	pgURL := pgtest.URL(t)
	s := startServe(t, serveOpts{pgURL: pgURL, config: `
tables:
  - table: bronze.orders
    query: orders-v1
  - table: "bronze.{name}"
    query: "cdc_*"
    granularity: minute
`})
	pub := connect(t, s.natsURL)
	pub.publish("started", queryA, runA, startedJSON(queryA, runA, "orders-v1"))
	pub.publish("progress", queryA, runA, cdcProgressJSON(queryA, runA, "orders-v1", "2026-09-28T13:10:00"))
	// The glob-matched query is first seen through its progress.
	pub.publish("progress", queryC, runC, cdcProgressJSON(queryC, runC, "cdc_customers", "2026-09-28T13:10:42"))
	waitVerdict(t, pgURL, "bronze.orders", "2026-09-28T13:00:00Z")
	waitVerdict(t, pgURL, "bronze.cdc_customers", "2026-09-28T13:10:00Z")

	// A query no rule matches is never tracked.
	pub.publish("progress", queryC, runB, cdcProgressJSON(queryC, runB, "unrelated", "2026-09-28T13:10:42"))
	pub.publish("progress", queryC, runC, cdcProgressJSON(queryC, runC, "cdc_customers", "2026-09-28T13:12:42"))
	waitVerdict(t, pgURL, "bronze.cdc_customers", "2026-09-28T13:12:00Z")
	if _, ok := readRow(t, pgURL, "bronze.unrelated"); ok {
		t.Fatal("an unmatched query got a verdict")
	}
}

// A run that terminated before it was tracked: its last progress and its
// termination come from JetStream; the tracker applies it once and stops.
func TestRunTerminatedBeforeTracking(t *testing.T) {
	pgURL := pgtest.URL(t)
	s := startServe(t, serveOpts{pgURL: pgURL})
	pub := connect(t, s.natsURL)
	pub.publish("progress", queryA, runA, cdcProgressJSON(queryA, runA, "x", "2026-09-28T12:30:00"))
	pub.publish("terminated", queryA, runA, terminatedJSON(queryA, runA))
	nats := []string{"--nats-url", s.natsURL}
	if code, out, e := cli(t, nil, append([]string{"track", "--query-id", queryA, "--run-id", runA, "--table", "late"}, nats...)...); code != 0 {
		t.Fatalf("track: %d %s %s", code, out, e)
	}
	if code, out, e := cli(t, nil, append([]string{"join", "--run-id", runA, "--timeout", "20s"}, nats...)...); code != 0 {
		t.Fatalf("join: %d %s %s", code, out, e)
	}
	waitVerdict(t, pgURL, "late", "2026-09-28T12:00:00Z")
}

// is-final and wait, as a scheduler task uses them.
func TestIsFinalAndWait(t *testing.T) {
	pgURL := pgtest.URL(t)
	s := startServe(t, serveOpts{pgURL: pgURL, config: "tables:\n  - {table: declared, query: declared-q}\n"})
	pub := connect(t, s.natsURL)
	pg := []string{"--postgres-url", pgURL}
	cli(t, nil, "track", "--nats-url", s.natsURL, "--query-id", queryA, "--run-id", runA, "--table", "t")
	pub.publish("progress", queryA, runA, cdcProgressJSON(queryA, runA, "x", "2026-09-28T14:37:12.345"))
	waitVerdict(t, pgURL, "t", "2026-09-28T14:00:00Z")

	cases := []struct {
		end  string
		code int
	}{
		{"2026-09-28T14:00:00Z", 0},
		{"2026-09-28T13:00:00Z", 0},
		{"2026-09-28T15:00:00Z", 1},
		{"2026-09-28T11:00:00-03:00", 0}, // 14:00 UTC
		{"2026-09-28T12:00:00-03:00", 1}, // 15:00 UTC
		{"2026-09-28T14:00:00", 0},       // naive = UTC
		{"yesterday", 2},
	}
	for _, c := range cases {
		code, out, e := cli(t, nil, append([]string{"is-final", "--table", "t", "--period-end", c.end}, pg...)...)
		if code != c.code {
			t.Errorf("is-final %s: exit %d, want %d (%s%s)", c.end, code, c.code, out, e)
		}
	}
	checkMissingTables(t, s, pgURL)

	// wait times out with 1, then returns 0 when a later progress arrives.
	if code, _, _ := cli(t, nil, append([]string{"wait", "--table", "t", "--until", "2026-09-28T15:00:00Z", "--timeout", "300ms"}, pg...)...); code != 1 {
		t.Fatalf("wait timeout: exit %d, want 1", code)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	w := exec.CommandContext(ctx, binary, append([]string{"wait", "--table", "t", "--until", "2026-09-28T15:00:00Z", "--timeout", "25s"}, pg...)...)
	w.Env = cleanEnv()
	if err := w.Start(); err != nil {
		t.Fatal(err)
	}
	waited := make(chan error, 1)
	go func() { waited <- w.Wait() }()
	select {
	case err := <-waited:
		t.Fatalf("wait returned before the verdict moved: %v", err)
	case <-time.After(500 * time.Millisecond):
	}
	pub.publish("progress", queryA, runA, cdcProgressJSON(queryA, runA, "x", "2026-09-28T15:05:00"))
	if err := <-waited; err != nil {
		t.Fatalf("wait: %v, want exit 0 once the verdict reaches 15:00", err)
	}
}

// checkMissingTables: a table nothing could write (a typo) is exit 3 at
// once for is-final and wait, naming the table; a table without a verdict
// that an explicit track, a --config rule or a tracker of the service could
// write is "not final yet" (exit 1), as is any table with --allow-missing.
func checkMissingTables(t *testing.T, s *proc, pgURL string) {
	t.Helper()
	pg := []string{"--postgres-url", pgURL, "--http-url", s.httpURL}
	end := []string{"--period-end", "2026-09-28T14:00:00Z"}
	code, out, e := cli(t, nil, append(append([]string{"is-final", "--table", "tt"}, end...), pg...)...)
	if code != 3 || !strings.Contains(e, `unknown table "tt"`) || !strings.Contains(e, `did you mean "t"?`) || strings.Count(strings.TrimSpace(e), "\n") != 0 {
		t.Errorf("is-final on a misspelled table: exit %d, want 3 with one line naming it\n%s%s", code, out, e)
	}
	began := time.Now()
	code, out, e = cli(t, nil, append([]string{"wait", "--table", "bronze.nope", "--until", "2026-09-28T14:00:00Z", "--timeout", "30s"}, pg...)...)
	if code != 3 || !strings.Contains(e, `unknown table "bronze.nope"`) || time.Since(began) > 10*time.Second {
		t.Errorf("wait on a misspelled table: exit %d after %s, want 3 at once\n%s%s", code, time.Since(began), out, e)
	}
	// The service's HTTP API not answering: exit 3 still, but the line
	// does not claim that no tracker of the service writes the table.
	code, out, e = cli(t, nil, append(append([]string{"is-final", "--table", "tt"}, end...), "--postgres-url", pgURL, "--http-url", "http://u:Hunter2SecretPw@127.0.0.1:1")...)
	if code != 3 || strings.Contains(e, "no tracker of the service writes it") || !strings.Contains(e, "trackers were not counted") || strings.Contains(e, "Hunter2SecretPw") {
		t.Errorf("is-final with the service's HTTP API unreachable: exit %d, want 3 saying its trackers were not counted, without the password\n%s%s", code, out, e)
	}
	if code, out, e := cli(t, nil, append([]string{"wait", "--allow-missing", "--table", "bronze.nope", "--until", "2026-09-28T14:00:00Z", "--timeout", "2s"}, pg...)...); code != 1 {
		t.Errorf("wait --allow-missing: exit %d, want 1 (timed out)\n%s%s", code, out, e)
	}
	if code, out, e := cli(t, nil, append(append([]string{"is-final", "--allow-missing", "--table", "bronze.nope"}, end...), pg...)...); code != 1 {
		t.Errorf("is-final --allow-missing: exit %d, want 1\n%s%s", code, out, e)
	}
	// An explicit track with no verdict yet.
	if code, out, e := cli(t, nil, "track", "--nats-url", s.natsURL, "--query-id", queryC, "--run-id", runC, "--table", "t-tracked"); code != 0 {
		t.Fatalf("track: %d %s%s", code, out, e)
	}
	if code, out, e := cli(t, nil, append(append([]string{"is-final", "--table", "t-tracked"}, end...), pg...)...); code != 1 {
		t.Errorf("is-final on a tracked table without a verdict: exit %d, want 1\n%s%s", code, out, e)
	}
	// status tells the two apart the same way: a typo is exit 3 with the
	// nearest name (it was exit 2, "not found"), a tracked table without a
	// verdict yet is shown.
	if code, out, e := cli(t, nil, append([]string{"status", "--table", "tt"}, pg...)...); code != 3 || !strings.Contains(e, `did you mean "t"?`) {
		t.Errorf("status on a misspelled table: exit %d, want 3 with the nearest name\n%s%s", code, out, e)
	}
	if code, out, e := cli(t, nil, append([]string{"status", "--table", "t-tracked"}, pg...)...); code != 0 || !strings.Contains(out, "t-tracked") {
		t.Errorf("status on a tracked table without a verdict: exit %d, want 0 showing it\n%s%s", code, out, e)
	}
	// A rule of the --config file, which also gives the control table and
	// the PostgreSQL URL: no other flag is needed.
	cfg := writeFile(t, t.TempDir(), "finalizer.yaml", fmt.Sprintf("postgres: {url: %q}\ncontrol_table: public.table_finalization\ntables:\n  - {table: \"bronze.{name}\", query: \"cdc_*\"}\n", pgURL), 0o644)
	if code, out, e := cli(t, nil, append([]string{"is-final", "--config", cfg, "--http-url", "", "--table", "bronze.cdc_x"}, end...)...); code != 1 {
		t.Errorf("is-final --config on a table a rule could write: exit %d, want 1\n%s%s", code, out, e)
	}
	if code, out, e := cli(t, nil, append([]string{"is-final", "--config", cfg, "--http-url", "", "--table", "t"}, end...)...); code != 0 {
		t.Errorf("is-final --config: exit %d, want 0\n%s%s", code, out, e)
	}
	// A tracker of the running service (a declarative rule of serve's
	// config, its run seen but no verdict yet), found through its HTTP API.
	q, r := id(901), id(902)
	pub := connect(t, s.natsURL)
	pub.publish("started", q, r, startedJSON(q, r, "declared-q"))
	eventually(t, "the declared run is tracked", func() bool { return tracked(t, s.httpURL, r) })
	if code, out, e := cli(t, nil, append(append([]string{"is-final", "--table", "declared"}, end...), pg...)...); code != 1 {
		t.Errorf("is-final on a table a tracker of the service writes: exit %d, want 1\n%s%s", code, out, e)
	}
	// Without the service's API or the config, the control table still
	// knows it: the tracked run joined it as a feeder (a feeder's row, no
	// verdict yet). Not final, not unknown.
	if code, out, e := cli(t, nil, "is-final", "--postgres-url", pgURL, "--http-url", "", "--table", "declared", "--period-end", "2026-09-28T14:00:00Z"); code != 1 || !strings.Contains(out+e, "no verdict yet") {
		t.Errorf("is-final without the service's API or config, the table's feeder joined: exit %d, want 1 (no verdict yet)\n%s%s", code, out, e)
	}
	// A table neither the rows nor the service know is unknown (exit 3).
	if code, out, e := cli(t, nil, "is-final", "--postgres-url", pgURL, "--http-url", "", "--table", "declared-typo", "--period-end", "2026-09-28T14:00:00Z"); code != 3 {
		t.Errorf("is-final on a table nothing knows, without the service's API or config: exit %d, want 3\n%s%s", code, out, e)
	}
}

// The HTTP API and the metrics.
func TestHTTPAPIAndMetrics(t *testing.T) {
	pgURL := pgtest.URL(t)
	s := startServe(t, serveOpts{pgURL: pgURL})
	pub := connect(t, s.natsURL)
	cli(t, nil, "track", "--nats-url", s.natsURL, "--query-id", queryA, "--run-id", runA, "--table", "bronze.orders")
	pub.publish("progress", queryA, runA, cdcProgressJSON(queryA, runA, "x", "2026-09-28T14:37:12.345"))
	pub.publish("progress", queryA, runA, `{"not json`)
	waitVerdict(t, pgURL, "bronze.orders", "2026-09-28T14:00:00Z")

	if code := getJSON(t, s.httpURL+"/healthz", nil); code != 200 {
		t.Fatalf("/healthz %d", code)
	}
	if code := getJSON(t, s.httpURL+"/readyz", nil); code != 200 {
		t.Fatalf("/readyz %d", code)
	}
	var list struct {
		Tables []struct {
			Table          string    `json:"table"`
			FinalizedUntil time.Time `json:"finalized_until"`
			Runs           []struct {
				RunID string `json:"run_id"`
			} `json:"runs"`
		} `json:"tables"`
	}
	getJSON(t, s.httpURL+"/v1/tables", &list)
	if len(list.Tables) != 1 || list.Tables[0].Table != "bronze.orders" || len(list.Tables[0].Runs) != 1 || list.Tables[0].Runs[0].RunID != runA {
		t.Fatalf("/v1/tables = %+v", list)
	}
	if code := getJSON(t, s.httpURL+"/v1/tables/nope", nil); code != 404 {
		t.Fatalf("/v1/tables/nope = %d, want 404", code)
	}
	var fin struct {
		Final bool `json:"final"`
	}
	getJSON(t, s.httpURL+"/v1/tables/bronze.orders/final?period_end=2026-09-28T14:00:00Z", &fin)
	if !fin.Final {
		t.Fatal("period ending 14:00 not final")
	}
	getJSON(t, s.httpURL+"/v1/tables/bronze.orders/final?period_end=2026-09-28T15:00:00Z&wait=100ms", &fin)
	if fin.Final {
		t.Fatal("period ending 15:00 final")
	}
	if code := getJSON(t, s.httpURL+"/v1/tables/bronze.orders/final?period_end=bad", nil); code != 400 {
		t.Fatalf("bad period_end = %d, want 400", code)
	}
	// A "+" offset written as is in a URL arrives as a space: 16:00+02:00
	// is 14:00 UTC, final.
	if code := getJSON(t, s.httpURL+"/v1/tables/bronze.orders/final?period_end=2026-09-28T16:00:00+02:00", &fin); code != 200 || !fin.Final {
		t.Fatalf("period_end with a raw + = %d, final %v; want 200, true", code, fin.Final)
	}
	// A client that hangs up its long poll is not an error of the service.
	hctx, hangUp := context.WithTimeout(context.Background(), 300*time.Millisecond)
	req, _ := http.NewRequestWithContext(hctx, http.MethodGet, s.httpURL+"/v1/tables/bronze.orders/final?period_end=2026-09-28T15:00:00Z&wait=30s", nil)
	if resp, err := http.DefaultClient.Do(req); err == nil {
		resp.Body.Close()
		t.Fatalf("the long poll answered %s before the client hung up", resp.Status)
	}
	hangUp()
	eventually(t, "the hang-up logged at debug", func() bool { return strings.Contains(s.stderr.String(), "http client closed a long poll") })
	for _, line := range errorLines(s.stderr.String()) {
		if strings.Contains(line, "http") {
			t.Errorf("a client hanging up is logged as an error: %s", line)
		}
	}
	// A long poll returns when the verdict moves.
	got := make(chan bool, 1)
	go func() {
		var f struct {
			Final bool `json:"final"`
		}
		getJSON(t, s.httpURL+"/v1/tables/bronze.orders/final?period_end=2026-09-28T15:00:00Z&wait=20s", &f)
		got <- f.Final
	}()
	time.Sleep(200 * time.Millisecond) // let the long poll start; the assertion does not depend on it
	pub.publish("progress", queryA, runA, cdcProgressJSON(queryA, runA, "x", "2026-09-28T15:00:01"))
	if !<-got {
		t.Fatal("long poll did not report final")
	}

	for _, name := range []string{"finalizer_verdict_lag_seconds", "finalizer_events_total", "finalizer_advances_total",
		"finalizer_advance_failures_total", "finalizer_advance_retries_total", "finalizer_tracked_runs"} {
		eventually(t, "metric "+name, func() bool {
			resp := metricText(t, s.httpURL)
			return strings.Contains(resp, name)
		})
	}
	if m := metricText(t, s.httpURL); !strings.Contains(m, `finalizer_events_total{kind="progress",outcome="malformed"} 1`) {
		t.Fatalf("malformed event not counted:\n%s", grep(m, "finalizer_events_total"))
	}
}

// status shows the verdict and the tracked run.
func TestStatusCommand(t *testing.T) {
	pgURL := pgtest.URL(t)
	s := startServe(t, serveOpts{pgURL: pgURL})
	pub := connect(t, s.natsURL)
	cli(t, nil, "track", "--nats-url", s.natsURL, "--query-id", queryA, "--run-id", runA, "--table", "bronze.orders")
	pub.publish("progress", queryA, runA, cdcProgressJSON(queryA, runA, "x", "2026-09-28T14:37:12.345"))
	waitVerdict(t, pgURL, "bronze.orders", "2026-09-28T14:00:00Z")
	code, out, e := cli(t, nil, "status", "--postgres-url", pgURL, "--http-url", s.httpURL)
	if code != 0 || !strings.Contains(out, "bronze.orders") || !strings.Contains(out, "2026-09-28T14:00:00Z") || !strings.Contains(out, runA) {
		t.Fatalf("status exit %d:\n%s%s", code, out, e)
	}
	code, out, _ = cli(t, nil, "status", "--postgres-url", pgURL, "--http-url", s.httpURL, "--json", "--table", "bronze.orders")
	if code != 0 || !strings.Contains(out, `"finalized_until": "2026-09-28T14:00:00Z"`) {
		t.Fatalf("status --json exit %d:\n%s", code, out)
	}
}

// A restart after kill -9 resumes every tracked run and applies the
// progress retained while the service was down, without a new event.
func TestRestartAfterKill9(t *testing.T) {
	pgURL := pgtest.URL(t)
	ns, err := embeddednats.Start(embeddednats.Options{Port: -1, StoreDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(ns.Shutdown)
	dataDir := t.TempDir()
	config := `
tables:
  - table: "auto.{name}"
    query: "cdc_*"
`
	s := startServe(t, serveOpts{pgURL: pgURL, natsURL: ns.ClientURL(), dataDir: dataDir, config: config})
	pub := connect(t, ns.ClientURL())
	cli(t, nil, "track", "--nats-url", ns.ClientURL(), "--query-id", queryA, "--run-id", runA, "--table", "explicit")
	pub.publish("progress", queryA, runA, cdcProgressJSON(queryA, runA, "x", "2026-09-28T13:10:00"))
	pub.publish("started", queryC, runC, startedJSON(queryC, runC, "cdc_orders"))
	pub.publish("progress", queryC, runC, cdcProgressJSON(queryC, runC, "cdc_orders", "2026-09-28T13:10:00"))
	waitVerdict(t, pgURL, "explicit", "2026-09-28T13:00:00Z")
	waitVerdict(t, pgURL, "auto.cdc_orders", "2026-09-28T13:00:00Z")

	s.kill()
	pub.publish("progress", queryA, runA, cdcProgressJSON(queryA, runA, "x", "2026-09-28T14:05:00"))
	pub.publish("progress", queryC, runC, cdcProgressJSON(queryC, runC, "cdc_orders", "2026-09-28T15:05:00"))

	s2 := startServe(t, serveOpts{pgURL: pgURL, natsURL: ns.ClientURL(), dataDir: dataDir, config: config})
	waitVerdict(t, pgURL, "explicit", "2026-09-28T14:00:00Z")
	waitVerdict(t, pgURL, "auto.cdc_orders", "2026-09-28T15:00:00Z")
	// Still tracked: a new progress moves the verdict again.
	pub.publish("progress", queryA, runA, cdcProgressJSON(queryA, runA, "x", "2026-09-28T16:05:00"))
	waitVerdict(t, pgURL, "explicit", "2026-09-28T16:00:00Z")
	_ = s2
}

// serve with no flags at all: embedded NATS on 127.0.0.1:4222, a managed
// PostgreSQL under ./finalizer-data, HTTP on 127.0.0.1:8080. It also
// measures the start-up time, first (initdb) and second start.
func TestServeWithNoFlags(t *testing.T) {
	for _, addr := range []string{"127.0.0.1:4222", "127.0.0.1:8080"} {
		if !portFree(addr) {
			t.Fatalf("%s is in use: this test needs the default ports", addr)
		}
	}
	dir := openDir(t)
	for i, what := range []string{"first start (initdb)", "second start"} {
		began := time.Now()
		s := startServe(t, serveOpts{dataDir: dir, noFlags: true})
		t.Logf("serve with no flags: %s ready in %s", what, time.Since(began).Round(time.Millisecond))
		if s.natsBare != "nats://127.0.0.1:4222" || s.httpURL != "http://127.0.0.1:8080" || s.pgURL == "" {
			t.Fatalf("defaults: nats %q http %q postgres %q", s.natsBare, s.httpURL, s.pgURL)
		}
		pub := connect(t, s.natsURL)
		// From the same directory: track reads ./finalizer-data's login.
		code, out, e := cli(t, []string{"FINALIZER_DATA_DIR=" + filepath.Join(dir, "finalizer-data")}, "track", "--query-id", queryA, "--run-id", fmt.Sprintf("e225d92f-2545-48f8-87a2-9c030958000%d", i), "--table", "t")
		if code != 0 {
			t.Fatalf("track with defaults: %d %s %s", code, out, e)
		}
		pub.publish("progress", queryA, fmt.Sprintf("e225d92f-2545-48f8-87a2-9c030958000%d", i),
			cdcProgressJSON(queryA, fmt.Sprintf("e225d92f-2545-48f8-87a2-9c030958000%d", i), "x", fmt.Sprintf("2026-09-28T1%d:10:00", 3+i)))
		waitVerdict(t, s.pgURL, "t", fmt.Sprintf("2026-09-28T1%d:00:00Z", 3+i))
		checkFirstStartOutput(t, s)
		st := exec.Command(binary, "status")
		st.Dir = dir
		st.Env = cleanEnv()
		if out, err := st.CombinedOutput(); err != nil || !strings.Contains(string(out), "2026-09-28T1") {
			t.Fatalf("status with defaults: %v\n%s", err, out)
		}
		s.stop()
		if e := s.stderr.String(); !strings.Contains(e, `"signal":"SIGTERM"`) {
			t.Errorf("the shutdown log does not name the signal:\n%s", grep(e, "shutting down"))
		}
	}
	// With serve stopped, its managed PostgreSQL is stopped too: the client
	// commands say so, and how to start it, instead of "connection refused".
	for _, args := range [][]string{{"status"}, {"is-final", "--table", "t", "--period-end", "2026-09-28T14:00:00Z"}} {
		c := exec.Command(binary, args...)
		c.Dir = dir
		c.Env = cleanEnv()
		out, err := c.CombinedOutput()
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.ExitCode() != 2 || !strings.Contains(string(out), "managed PostgreSQL of data dir") ||
			!strings.Contains(string(out), "is not running") || !strings.Contains(string(out), "finalizer serve --data-dir") {
			t.Errorf("%s with serve stopped: %v\n%s", args[0], err, out)
		}
	}
}

// A second serve on the same data dir fails with a clear message and
// leaves the first one working.
func TestSecondServeOnSameDataDirRefused(t *testing.T) {
	pgURL := pgtest.URL(t)
	dir := t.TempDir()
	s := startServe(t, serveOpts{pgURL: pgURL, dataDir: dir})
	code, out, errOut := cli(t, nil, "serve", "--data-dir", dir, "--postgres-url", pgURL,
		"--nats-listen", "127.0.0.1:0", "--http-listen", "127.0.0.1:0")
	if code != 2 || !strings.Contains(errOut, "in use by another finalizer serve") {
		t.Fatalf("second serve: exit %d, stderr %q (stdout %q); want exit 2 naming the first", code, tail(errOut, 3), out)
	}
	pub := connect(t, s.natsURL)
	cli(t, nil, "track", "--nats-url", s.natsURL, "--query-id", queryA, "--run-id", runA, "--table", "t")
	pub.publish("progress", queryA, runA, cdcProgressJSON(queryA, runA, "x", "2026-09-28T13:10:00"))
	waitVerdict(t, pgURL, "t", "2026-09-28T13:00:00Z")
}

// Run as root from a directory the postgres OS user cannot traverse (a
// checkout under root's 0700 home), serve puts its managed cluster in the
// fallback directory and works as usual.
func TestServeManagedClusterFallsBackWhenDataDirUnreachable(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("only root runs the managed cluster as another OS user")
	}
	dir := t.TempDir() // 0700, root's
	s := startServe(t, serveOpts{dataDir: dir})
	out := s.stdout.String()
	i := strings.Index(out, "(managed cluster under /var/lib/finalizer/clusters/")
	if i < 0 {
		t.Fatalf("serve did not use the fallback cluster dir:\n%s", out)
	}
	clusterDir := strings.TrimSuffix(strings.Fields(out[i:])[3], ")")
	t.Cleanup(func() {
		s.stop() // before the cluster goes (cleanups run last-in first-out)
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := pgcluster.Remove(ctx, clusterDir); err != nil {
			t.Errorf("remove %s: %v", clusterDir, err)
		}
	})
	pub := connect(t, s.natsURL)
	cli(t, nil, "track", "--nats-url", s.natsURL, "--query-id", queryA, "--run-id", runA, "--table", "t")
	pub.publish("progress", queryA, runA, cdcProgressJSON(queryA, runA, "x", "2026-09-28T13:10:00"))
	waitVerdict(t, s.pgURL, "t", "2026-09-28T13:00:00Z")
	code, status, e := cli(t, nil, "status", "--data-dir", dir, "--http-url", "")
	if code != 0 || !strings.Contains(status, "2026-09-28T13:00:00Z") {
		t.Fatalf("status through the data dir: %d\n%s%s", code, status, e)
	}
	s.stop()
}

// checkFirstStartOutput: stdout says where everything is without the
// managed cluster's password, and points at postgres.url; the embedded
// nats-server's banner is not in the INFO log.
func checkFirstStartOutput(t *testing.T, s *proc) {
	t.Helper()
	u, err := url.Parse(s.pgURL)
	if err != nil {
		t.Fatal(err)
	}
	pw, ok := u.User.Password()
	if !ok || pw == "" {
		t.Fatalf("managed URL without a password: %s", u.Redacted())
	}
	out, e := s.stdout.String(), s.stderr.String()
	if strings.Contains(out, pw) || strings.Contains(e, pw) {
		t.Errorf("the managed cluster's password is printed:\n%s", out)
	}
	if !strings.Contains(out, "postgres://finalizer:xxxxx@127.0.0.1:") || !strings.Contains(out, "postgres.url, mode 0600") {
		t.Errorf("stdout does not show the masked URL and where the full one is:\n%s", out)
	}
	for _, line := range strings.Split(e, "\n") {
		if strings.Contains(line, `"logger":"nats-server"`) && strings.Contains(line, `"level":"info"`) && !strings.Contains(line, `"msg":"embedded nats-server `) {
			t.Errorf("nats-server logs at INFO: %s", line)
		}
	}
}

// TestFailedFirstStartLeavesNothing: a first start that fails (the NATS
// port is taken) says so once, with the flag to use, exits 2, and leaves no
// data dir (no finalizer.lock) behind.
func TestFailedFirstStartLeavesNothing(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	dir := filepath.Join(t.TempDir(), "new-data-dir")
	code, out, e := cli(t, nil, "serve", "--data-dir", dir, "--nats-listen", ln.Addr().String(), "--http-listen", "127.0.0.1:0",
		"--postgres-url", pgtest.URL(t))
	if code != 2 {
		t.Fatalf("exit %d, want 2\n%s%s", code, out, e)
	}
	last := strings.TrimSpace(e[strings.LastIndex(strings.TrimSpace(e), "\n")+1:])
	if !strings.HasPrefix(last, "finalizer: embedded nats: cannot listen") || strings.Count(last, "embedded nats") != 1 ||
		!strings.Contains(last, "--nats-listen") {
		t.Errorf("last stderr line = %q, want one 'embedded nats' and the --nats-listen hint", last)
	}
	if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
		entries, _ := os.ReadDir(dir)
		t.Errorf("the failed first start left %s behind: %v %v", dir, err, entries)
	}
}

// TestTakenPortFailsBeforeAnythingSlow: serve on the managed cluster with
// its HTTP port (or its embedded NATS port) taken fails within about a
// second, before the managed PostgreSQL is created or started: exit 2, one
// error line naming the address, the flag that sets it and how to find
// what holds it, and nothing left behind (no data dir, no lock, no
// postgres process).
func TestTakenPortFailsBeforeAnythingSlow(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	taken := ln.Addr().String()
	_, port, _ := net.SplitHostPort(taken)
	for _, c := range []struct{ name, flag, other string }{
		{"http", "--http-listen", "--nats-listen"},
		{"nats", "--nats-listen", "--http-listen"},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "new-data-dir")
			began := time.Now()
			code, out, e := cli(t, nil, "serve", "--data-dir", dir, c.flag, taken, c.other, "127.0.0.1:0")
			took := time.Since(began)
			if code != 2 {
				t.Fatalf("exit %d, want 2\n%s%s", code, out, e)
			}
			if took > 2*time.Second {
				t.Errorf("failed after %s, want about a second at most", took)
			}
			last := strings.TrimSpace(e[strings.LastIndex(strings.TrimSpace(e), "\n")+1:])
			for _, want := range []string{taken, "address already in use", c.flag, "ss -ltnp 'sport = :" + port + "'"} {
				if !strings.Contains(last, want) {
					t.Errorf("last stderr line %q does not say %q", last, want)
				}
			}
			if strings.Contains(out, "PostgreSQL") || strings.Contains(e, "initdb") {
				t.Errorf("the managed cluster was started:\n%s%s", out, e)
			}
			if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
				entries, _ := os.ReadDir(dir)
				t.Errorf("the failed start left %s behind: %v %v", dir, err, entries)
			}
			if pids := processesNaming(t, dir); len(pids) > 0 {
				t.Errorf("processes still run on %s: %v", dir, pids)
			}
		})
	}
}

// processesNaming returns the pids whose command line names s.
func processesNaming(t *testing.T, s string) []string {
	t.Helper()
	entries, err := os.ReadDir("/proc")
	if err != nil {
		t.Fatal(err)
	}
	var pids []string
	for _, en := range entries {
		cmdline, err := os.ReadFile(filepath.Join("/proc", en.Name(), "cmdline"))
		if err == nil && strings.Contains(string(cmdline), s) {
			pids = append(pids, en.Name())
		}
	}
	return pids
}

// TestBadFileFailsBeforeAnythingSlow: a NATS client file that cannot be
// read fails serve on the managed cluster at once, naming its config key,
// before the managed PostgreSQL is created (the dial found it after).
func TestBadFileFailsBeforeAnythingSlow(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "no-such-ca.pem")
	dir := filepath.Join(t.TempDir(), "new-data-dir")
	began := time.Now()
	code, out, e := cli(t, nil, "serve", "--data-dir", dir, "--nats-listen", "127.0.0.1:0", "--http-listen", "127.0.0.1:0",
		"--nats-tls-ca", missing)
	took := time.Since(began)
	if code != 2 {
		t.Fatalf("exit %d, want 2\n%s%s", code, out, e)
	}
	if took > 2*time.Second {
		t.Errorf("failed after %s, want about a second at most", took)
	}
	if !strings.Contains(e, "nats.tls_ca_file "+missing) {
		t.Errorf("stderr does not name nats.tls_ca_file and the file:\n%s", e)
	}
	if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the failed start left %s behind: %v", dir, err)
	}
}
