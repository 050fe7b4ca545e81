//go:build linux

package tests

import (
	"context"
	"encoding/json"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/nats-io/nats.go"

	"github.com/finalizer-dev/finalizer/internal/embeddednats"
	"github.com/finalizer-dev/finalizer/internal/natstest"
	"github.com/finalizer-dev/finalizer/internal/pgcluster"
	"github.com/finalizer-dev/finalizer/internal/pgcluster/pgtest"
)

// The fault tests: each runs the real service, injects a fault, and
// checks the control table afterwards, including every value a watcher saw
// on the way (never backwards, never ahead of the data).

// id returns a distinct lowercase UUID for test n.
func id(n int) string { return fmt.Sprintf("%08x-abcd-4ef0-8abc-%012x", n, n) }

// fastPG are the settings of throwaway clusters: nothing has to survive a
// crash of the machine.
var fastPG = map[string]string{"fsync": "off", "synchronous_commit": "off", "full_page_writes": "off"}

// startCluster starts a dedicated PostgreSQL cluster in dir (on port, 0 =
// a free one), stopped at cleanup if still running. It skips without a
// PostgreSQL installation, unless FINALIZER_REQUIRE_POSTGRES=1.
func startCluster(t *testing.T, dir string, port int, settings map[string]string) *pgcluster.Cluster {
	t.Helper()
	if _, err := pgcluster.FindBinDir(); err != nil {
		if os.Getenv(pgtest.EnvRequire) == "1" {
			t.Fatalf("%s=1: %v", pgtest.EnvRequire, err)
		}
		t.Skip(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c, err := pgcluster.Start(ctx, pgcluster.Options{Dir: dir, Port: port, Settings: settings})
	if err != nil {
		t.Fatalf("start cluster: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := c.Stop(ctx); err != nil {
			t.Error(err)
		}
	})
	return c
}

// PostgreSQL stopped in the middle of a stream and started again: serve
// keeps running, /readyz says 503 meanwhile, failed advances are retried
// (1 s, 2 s) and counted, the next event retries again, and once the
// database is back an idle event brings the verdict to exactly what the
// newest progress implies. Nothing ever moves backwards.
func TestPostgresStoppedMidStream(t *testing.T) {
	dir := filepath.Join(openDir(t), "pg")
	pg := startCluster(t, dir, 0, fastPG)
	pgURL, port := pg.URL(), pg.Port()
	// Without the ownership of tables: its lock connection would write the
	// held 15:00 as soon as the database is back (TestRewrittenAfterLost-
	// Connection), and this test is about the trackers' own retries.
	s := startServe(t, serveOpts{pgURL: pgURL, config: "ownership: {enabled: false}\n"})
	pub := connect(t, s.natsURL)
	q, r := id(0x100), id(0x101)
	if code, out, e := cli(t, nil, "track", "--nats-url", s.natsURL, "--query-id", q, "--run-id", r, "--table", "pgdown"); code != 0 {
		t.Fatalf("track: %d %s %s", code, out, e)
	}
	watch := watchVerdict(t, pgURL, "pgdown")
	pub.publish("progress", q, r, progressAt(q, r, "x", 1, "2026-09-28T13:10:00"))
	waitVerdict(t, pgURL, "pgdown", "2026-09-28T13:00:00Z")

	stopCtx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := pg.Stop(stopCtx); err != nil {
		t.Fatal(err)
	}
	var body string
	eventually(t, "/readyz 503 while PostgreSQL is down", func() bool {
		var code int
		code, body = httpGet(t, s.httpURL+"/readyz", "")
		return code == 503
	})
	// Up or down, nothing more (issue 9, item 9): before, the body held the
	// driver's error, with the database's user, name, host and port.
	var parts map[string]string
	if err := json.Unmarshal([]byte(body), &parts); err != nil || parts["postgres"] != "down" || parts["nats"] != "up" || parts["stream"] != "up" || len(parts) != 3 {
		t.Errorf("/readyz body while PostgreSQL is down: %s", body)
	}
	// The log line may reach serve's stderr (copied through a pipe) after
	// the 503 reached the probe: wait for it rather than read it once.
	s.logged(t, "the reason /readyz is down", `"msg":"not ready"`)
	pub.publish("progress", q, r, progressAt(q, r, "x", 2, "2026-09-28T14:05:00"))
	eventually(t, "a failed advance after its 1 s and 2 s retries", func() bool {
		return sample(t, s.httpURL, "finalizer_advance_failures_total") == 1
	})
	if got := sample(t, s.httpURL, "finalizer_advance_retries_total"); got != 2 {
		t.Errorf("finalizer_advance_retries_total = %v after one failed advance, want 2 (1 s and 2 s)", got)
	}
	if rs := runs(t, s.httpURL); len(rs) != 1 || rs[0].Failures != 1 || rs[0].LastErr == "" {
		t.Errorf("/v1/runs = %+v, want the run failing once with its error", rs)
	}
	// The next event retries (and fails again, with its own retries).
	pub.publish("progress", q, r, progressAt(q, r, "x", 3, "2026-09-28T15:20:00"))
	eventually(t, "the next event's advance failed too", func() bool {
		return sample(t, s.httpURL, "finalizer_advance_failures_total") == 2
	})

	pg2 := startCluster(t, dir, port, fastPG)
	if pg2.URL() != pgURL {
		t.Fatalf("cluster URL changed across the restart: %s", pg2.URL())
	}
	eventually(t, "/readyz 200 once PostgreSQL is back", func() bool {
		code, _ := httpGet(t, s.httpURL+"/readyz", "")
		return code == 200
	})
	if r, _ := readRow(t, pgURL, "pgdown"); !r.FinalizedUntil.Equal(utc("2026-09-28T13:00:00Z")) {
		t.Fatalf("verdict %v before any event retried, want still 13:00", r.FinalizedUntil)
	}
	// Spark's next idle event is the run's chance to retry.
	pub.publish("idle", q, r, idleJSON(q, r))
	row := waitVerdict(t, pgURL, "pgdown", "2026-09-28T15:00:00Z")
	if row.BatchID != 3 {
		t.Errorf("provenance batch %d, want 3 (the newest progress)", row.BatchID)
	}
	select {
	case <-s.done:
		t.Fatalf("serve exited: %v", s.exit)
	default:
	}
	seen := watch.check(t, "2026-09-28T15:00:00Z")
	t.Logf("verdicts seen: %v", seen)
	if a := sample(t, s.httpURL, "finalizer_advances_total"); a != 2 {
		t.Errorf("%v advances, want 2 (13:00, then 15:00)", a)
	}
	if rs := runs(t, s.httpURL); len(rs) != 1 || rs[0].Failures != 0 || rs[0].LastErr != "" {
		t.Errorf("/v1/runs = %+v, want the failure streak cleared", rs)
	}
}

// The NATS server restarted on the same port and store: the service
// reconnects and resubscribes, no tracked run is lost, progress published
// while it was reconnecting is caught up from the stream, and a run that
// starts afterwards is discovered.
func TestNATSRestarted(t *testing.T) {
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
  - table: "auto.{name}"
    query: "cdc_*"
`})
	qA, rA, qC, rC, qD, rD := id(0x200), id(0x201), id(0x202), id(0x203), id(0x204), id(0x205)
	pub := connect(t, natsURL)
	if code, out, e := cli(t, nil, "track", "--nats-url", natsURL, "--query-id", qA, "--run-id", rA, "--table", "nats.explicit"); code != 0 {
		t.Fatalf("track: %d %s %s", code, out, e)
	}
	pub.publish("started", qC, rC, startedJSON(qC, rC, "cdc_orders"))
	eventually(t, "the started run tracked", func() bool { return tracked(t, s.httpURL, rC) })
	pub.publish("progress", qA, rA, progressAt(qA, rA, "x", 1, "2026-09-28T13:10:00"))
	pub.publish("progress", qC, rC, progressAt(qC, rC, "cdc_orders", 1, "2026-09-28T13:10:00"))
	waitVerdict(t, pgURL, "nats.explicit", "2026-09-28T13:00:00Z")
	waitVerdict(t, pgURL, "auto.cdc_orders", "2026-09-28T13:00:00Z")
	watchA, watchC := watchVerdict(t, pgURL, "nats.explicit"), watchVerdict(t, pgURL, "auto.cdc_orders")
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
	// Published at once: the service may not have reconnected yet, so these
	// reach it live or through the catch-up after its reconnect.
	pub2 := connect(t, natsURL)
	pub2.publish("progress", qA, rA, progressAt(qA, rA, "x", 2, "2026-09-28T14:05:00"))
	pub2.publish("progress", qC, rC, progressAt(qC, rC, "cdc_orders", 2, "2026-09-28T14:05:00"))
	waitVerdict(t, pgURL, "nats.explicit", "2026-09-28T14:00:00Z")
	waitVerdict(t, pgURL, "auto.cdc_orders", "2026-09-28T14:00:00Z")
	eventually(t, "/readyz 200 after the reconnect", func() bool {
		code, _ := httpGet(t, s.httpURL+"/readyz", "")
		return code == 200
	})
	// Live subscriptions came back: new events move both.
	pub2.publish("progress", qA, rA, progressAt(qA, rA, "x", 3, "2026-09-28T15:05:00"))
	pub2.publish("progress", qC, rC, progressAt(qC, rC, "cdc_orders", 3, "2026-09-28T15:05:00"))
	waitVerdict(t, pgURL, "nats.explicit", "2026-09-28T15:00:00Z")
	waitVerdict(t, pgURL, "auto.cdc_orders", "2026-09-28T15:00:00Z")
	// Discovery came back: a run that starts now is tracked.
	pub2.publish("started", qD, rD, startedJSON(qD, rD, "cdc_new"))
	eventually(t, "a run started after the restart tracked", func() bool { return tracked(t, s.httpURL, rD) })
	pub2.publish("progress", qD, rD, progressAt(qD, rD, "cdc_new", 1, "2026-09-28T16:05:00"))
	waitVerdict(t, pgURL, "auto.cdc_new", "2026-09-28T16:00:00Z")

	for _, run := range []string{rA, rC, rD} {
		if !tracked(t, s.httpURL, run) {
			t.Errorf("run %s no longer tracked after the NATS restart", run)
		}
	}
	watchA.check(t, "2026-09-28T15:00:00Z")
	watchC.check(t, "2026-09-28T15:00:00Z")
	if errs := errorLines(s.stderr.String()); len(errs) > 0 {
		t.Logf("error lines (allowed while NATS was down):\n%s", strings.Join(errs, "\n"))
	}
}

// kill -9 in the middle of a stream, with the embedded defaults (managed
// PostgreSQL and embedded NATS under one data dir): the next serve takes
// over the orphaned postmaster, resumes every tracked run, and applies the
// progress whose advance was in flight at the kill from the stream,
// without a new event; tables already current are not written again.
func TestKill9MidStreamEmbeddedDefaults(t *testing.T) {
	dir := openDir(t)
	config := `
tables:
  - table: "k9.{name}"
    query: "cdc_*"
`
	s := startServe(t, serveOpts{dataDir: dir, config: config})
	pgURL := s.pgURL
	qA, rA, qC, rC := id(0x300), id(0x301), id(0x302), id(0x303)
	pub := connect(t, s.natsURL)
	if code, out, e := cli(t, nil, "track", "--nats-url", s.natsURL, "--query-id", qA, "--run-id", rA, "--table", "k9.explicit"); code != 0 {
		t.Fatalf("track: %d %s %s", code, out, e)
	}
	pub.publish("started", qC, rC, startedJSON(qC, rC, "cdc_k9"))
	eventually(t, "the started run tracked", func() bool { return tracked(t, s.httpURL, rC) })
	pub.publish("progress", qA, rA, progressAt(qA, rA, "x", 1, "2026-09-28T13:10:00"))
	pub.publish("progress", qC, rC, progressAt(qC, rC, "cdc_k9", 1, "2026-09-28T13:10:00"))
	waitVerdict(t, pgURL, "k9.explicit", "2026-09-28T13:00:00Z")
	before := waitVerdict(t, pgURL, "k9.cdc_k9", "2026-09-28T13:00:00Z")
	watch := watchVerdict(t, pgURL, "k9.explicit")

	// Hold the explicit table's row so that the next advance is in flight,
	// blocked, when the service is killed.
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	lock, err := pgx.Connect(ctx, pgURL)
	if err != nil {
		t.Fatal(err)
	}
	defer lock.Close(context.Background())
	tx, err := lock.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, `SELECT 1 FROM public.table_finalization WHERE table_name = 'k9.explicit' FOR UPDATE`); err != nil {
		t.Fatal(err)
	}
	pub.publish("progress", qA, rA, progressAt(qA, rA, "x", 2, "2026-09-28T14:05:00"))
	eventually(t, "the progress retained", func() bool {
		return strings.Contains(lastRetained(t, s.natsURL, "spark.progress."+qA+"."+rA), "14:05:00")
	})
	eventually(t, "the advance blocked on the row", func() bool {
		var n int
		_ = lock.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND application_name = 'finalizer'`).Scan(&n)
		return n == 1
	})
	s.kill()

	// The stream kept the progress; the in-flight statement dies with the
	// orphaned postmaster, which the next serve restarts.
	s2 := startServe(t, serveOpts{dataDir: dir, config: config})
	if s2.pgURL != pgURL {
		t.Fatalf("PostgreSQL URL changed across the restart: %s, was %s", s2.pgURL, pgURL)
	}
	if !strings.Contains(s2.stderr.String(), "no finalizer holding it") {
		t.Errorf("no log line about the orphaned postmaster")
	}
	row := waitVerdict(t, pgURL, "k9.explicit", "2026-09-28T14:00:00Z")
	if row.BatchID != 2 {
		t.Errorf("provenance batch %d, want 2", row.BatchID)
	}
	eventually(t, "both runs resumed", func() bool { return tracked(t, s2.httpURL, rA) && tracked(t, s2.httpURL, rC) })
	after, _ := readRow(t, pgURL, "k9.cdc_k9")
	if !after.UpdatedAt.Equal(before.UpdatedAt) || !after.FinalizedUntil.Equal(before.FinalizedUntil) {
		t.Errorf("k9.cdc_k9 written again at recovery: %+v, was %+v", after, before)
	}
	// Recovery re-applies each run's retained progress once: the CDC table
	// is unchanged; the explicit one moves, unless the killed service's
	// blocked statement won the row lock during the orphaned postmaster's
	// fast shutdown and committed first (then it too is unchanged).
	eventually(t, "recovery's advances counted", func() bool {
		return sample(t, s2.httpURL, `finalizer_candidates_total{outcome="unchanged"}`)+
			sample(t, s2.httpURL, `finalizer_candidates_total{outcome="advanced"}`) == 2
	})
	if a := sample(t, s2.httpURL, "finalizer_advances_total"); a > 1 {
		t.Errorf("%v verdict moves after the restart, want at most 1 (the one in flight at the kill)", a)
	}
	// Both runs are still live.
	pub2 := connect(t, s2.natsURL)
	pub2.publish("progress", qA, rA, progressAt(qA, rA, "x", 3, "2026-09-28T16:05:00"))
	pub2.publish("progress", qC, rC, progressAt(qC, rC, "cdc_k9", 2, "2026-09-28T15:05:00"))
	waitVerdict(t, pgURL, "k9.explicit", "2026-09-28T16:00:00Z")
	waitVerdict(t, pgURL, "k9.cdc_k9", "2026-09-28T15:00:00Z")
	watch.check(t, "2026-09-28T16:00:00Z")
}

// Duplicate, replayed and out-of-order progress: the verdict is the
// maximum the committed batches justify, never more, and a duplicate or an
// older batch writes nothing.
func TestDuplicateReplayedAndOutOfOrderProgress(t *testing.T) {
	pgURL := pgtest.URL(t)
	s := startServe(t, serveOpts{pgURL: pgURL})
	pub := connect(t, s.natsURL)
	q, r1, r2 := id(0x400), id(0x401), id(0x402)
	track := func(run string) {
		t.Helper()
		if code, out, e := cli(t, nil, "track", "--nats-url", s.natsURL, "--query-id", q, "--run-id", run, "--table", "dup"); code != 0 {
			t.Fatalf("track: %d %s %s", code, out, e)
		}
	}
	track(r1)
	pub.publish("started", q, r1, startedJSON(q, r1, "x"))
	watch := watchVerdict(t, pgURL, "dup")
	b1, b2 := progressAt(q, r1, "x", 1, "2026-09-28T13:10:00"), progressAt(q, r1, "x", 2, "2026-09-28T14:05:00")
	pub.publish("progress", q, r1, b1)
	pub.publish("progress", q, r1, b2)
	first := waitVerdict(t, pgURL, "dup", "2026-09-28T14:00:00Z")

	// Every progress message is either parsed (accepted) or, made useless
	// in the slot by a newer or equal one, dropped unparsed (superseded,
	// ADR 0011).
	received := func() float64 {
		return sample(t, s.httpURL, `finalizer_events_total{kind="progress",outcome="accepted"}`) +
			sample(t, s.httpURL, `finalizer_events_total{kind="progress",outcome="superseded"}`)
	}
	n := received()
	pub.publish("progress", q, r1, b2) // the same batch twice
	pub.publish("progress", q, r1, b1) // an older batch after a newer one
	pub.publish("progress", q, r1, b2)
	eventually(t, "the replays received", func() bool { return received() == n+3 })
	// A barrier: a newer batch of the same period is applied after them.
	pub.publish("progress", q, r1, progressAt(q, r1, "x", 3, "2026-09-28T14:50:00"))
	eventually(t, "the same-period batch evaluated", func() bool {
		return sample(t, s.httpURL, `finalizer_candidates_total{outcome="same_period"}`) >= 1
	})
	if row, _ := readRow(t, pgURL, "dup"); !row.UpdatedAt.Equal(first.UpdatedAt) || row.BatchID != 2 {
		t.Fatalf("duplicates or replays wrote the row: %+v, was %+v", row, first)
	}

	// The query restarts: a new run whose first batch ends before the
	// verdict. Started later, it supersedes the old run and moves nothing
	// back.
	track(r2)
	pub.publish("started", q, r2, startedAtJSON(q, r2, "x", "2026-09-28T16:00:00"))
	pub.publish("progress", q, r2, progressAt(q, r2, "x", 3, "2026-09-28T13:20:00"))
	eventually(t, "the new run's first (older) batch evaluated", func() bool {
		return sample(t, s.httpURL, `finalizer_candidates_total{outcome="unchanged"}`) == 1
	})
	if row, _ := readRow(t, pgURL, "dup"); !row.FinalizedUntil.Equal(utc("2026-09-28T14:00:00Z")) || row.RunID != r1 {
		t.Fatalf("after the new run's older batch: %+v", row)
	}
	eventually(t, "the old run's tracker stopped", func() bool { return !tracked(t, s.httpURL, r1) })
	// A stray late progress of the superseded run is not applied.
	pub.publish("progress", q, r1, progressAt(q, r1, "x", 9, "2026-09-28T19:00:00"))
	pub.publish("progress", q, r2, progressAt(q, r2, "x", 4, "2026-09-28T15:05:00"))
	row := waitVerdict(t, pgURL, "dup", "2026-09-28T15:00:00Z")
	if row.RunID != r2 || row.BatchID != 4 {
		t.Errorf("provenance %s/%d, want the new run's batch 4", row.RunID, row.BatchID)
	}
	// b1 and b2 were published back to back: the slot may have replaced b1
	// before the worker took it (ADR 0004), so 13:00 may never have been
	// written. Either way the moves are 13:00 (maybe), 14:00, 15:00.
	seen := watch.check(t, "2026-09-28T15:00:00Z")
	if n := len(seen); n < 2 || n > 3 || !seen[n-2].Equal(utc("2026-09-28T14:00:00Z")) || !seen[n-1].Equal(utc("2026-09-28T15:00:00Z")) ||
		(n == 3 && !seen[0].Equal(utc("2026-09-28T13:00:00Z"))) {
		t.Errorf("verdicts seen %v, want [13:00] 14:00 15:00", seen)
	}
	if a := sample(t, s.httpURL, "finalizer_advances_total"); a < 2 || a > 3 {
		t.Errorf("%v verdict moves, want 2 or 3 ([13:00], 14:00, 15:00)", a)
	}
}

// Two replicas on one control table and one NATS: both track every run,
// their verdicts are identical, neither logs an error, nothing moves back.
func TestTwoReplicas(t *testing.T) {
	ns, err := embeddednats.Start(embeddednats.Options{Port: embeddednats.RandomPort, StoreDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(ns.Shutdown)
	pgURL := pgtest.URL(t)
	config := `
tables:
  - table: "rep.{name}"
    query: "cdc_*"
    granularity: minute
`
	s1 := startServe(t, serveOpts{pgURL: pgURL, natsURL: ns.ClientURL(), config: config})
	s2 := startServe(t, serveOpts{pgURL: pgURL, natsURL: ns.ClientURL(), config: config})
	pub := connect(t, ns.ClientURL())
	qs := []struct{ q, r, name string }{{id(0x500), id(0x501), "cdc_a"}, {id(0x502), id(0x503), "cdc_b"}}
	var watches []*verdictWatch
	for _, x := range qs {
		pub.publish("started", x.q, x.r, startedJSON(x.q, x.r, x.name))
		watches = append(watches, watchVerdict(t, pgURL, "rep."+x.name))
	}
	qE, rE := id(0x504), id(0x505)
	if code, out, e := cli(t, nil, "track", "--nats-url", ns.ClientURL(), "--query-id", qE, "--run-id", rE, "--table", "rep.explicit", "--granularity", "minute"); code != 0 {
		t.Fatalf("track: %d %s %s", code, out, e)
	}
	for _, x := range qs {
		eventually(t, "both replicas track "+x.name, func() bool { return tracked(t, s1.httpURL, x.r) && tracked(t, s2.httpURL, x.r) })
	}
	eventually(t, "both replicas track the explicit run", func() bool { return tracked(t, s1.httpURL, rE) && tracked(t, s2.httpURL, rE) })
	watches = append(watches, watchVerdict(t, pgURL, "rep.explicit"))
	// Many batches, some in the same minute, one duplicated.
	for b := int64(1); b <= 12; b++ {
		ts := fmt.Sprintf("2026-09-28T13:%02d:%02d", 10+b/2, (b*17)%60)
		for _, x := range qs {
			pub.publish("progress", x.q, x.r, progressAt(x.q, x.r, x.name, b, ts))
		}
		pub.publish("progress", qE, rE, progressAt(qE, rE, "x", b, ts))
		if b == 6 {
			pub.publish("progress", qE, rE, progressAt(qE, rE, "x", b, ts))
		}
	}
	final := "2026-09-28T13:16:00Z" // batch 12: 13:16:24
	for _, table := range []string{"rep.cdc_a", "rep.cdc_b", "rep.explicit"} {
		waitVerdict(t, pgURL, table, final)
	}
	for _, s := range []*proc{s1, s2} {
		var doc struct {
			Tables []struct {
				Table          string    `json:"table"`
				FinalizedUntil time.Time `json:"finalized_until"`
			} `json:"tables"`
		}
		getJSON(t, s.httpURL+"/v1/tables", &doc)
		if len(doc.Tables) != 3 {
			t.Fatalf("%s /v1/tables: %+v", s.httpURL, doc)
		}
		for _, tb := range doc.Tables {
			if !tb.FinalizedUntil.Equal(utc(final)) {
				t.Errorf("%s: %s at %v, want %s", s.httpURL, tb.Table, tb.FinalizedUntil, final)
			}
		}
	}
	for _, w := range watches {
		w.check(t, final)
	}
	for _, x := range qs {
		pub.publish("terminated", x.q, x.r, terminatedJSON(x.q, x.r))
	}
	pub.publish("terminated", qE, rE, terminatedJSON(qE, rE))
	if code, out, e := cli(t, nil, "join", "--nats-url", ns.ClientURL(), "--run-id", rE, "--timeout", "20s"); code != 0 {
		t.Fatalf("join: %d %s %s", code, out, e)
	}
	s1.stop()
	s2.stop()
	for i, s := range []*proc{s1, s2} {
		if errs := errorLines(s.stderr.String()); len(errs) > 0 {
			t.Errorf("replica %d logged errors:\n%s", i+1, strings.Join(errs, "\n"))
		}
	}
}

// A run that terminates with an exception: its last progress is applied,
// the tracker stops, join reports done, and a stray later event moves
// nothing. (A run that terminated before it was tracked is
// TestRunTerminatedBeforeTracking.)
func TestRunTerminatedWithException(t *testing.T) {
	pgURL := pgtest.URL(t)
	s := startServe(t, serveOpts{pgURL: pgURL})
	pub := connect(t, s.natsURL)
	q, r := id(0x600), id(0x601)
	if code, out, e := cli(t, nil, "track", "--nats-url", s.natsURL, "--query-id", q, "--run-id", r, "--table", "exc"); code != 0 {
		t.Fatalf("track: %d %s %s", code, out, e)
	}
	pub.publish("progress", q, r, progressAt(q, r, "x", 1, "2026-09-28T13:10:00"))
	pub.publish("progress", q, r, progressAt(q, r, "x", 2, "2026-09-28T14:05:00"))
	pub.publish("terminated", q, r, terminatedWithException(q, r))
	if code, out, e := cli(t, nil, "join", "--nats-url", s.natsURL, "--run-id", r, "--timeout", "20s"); code != 0 {
		t.Fatalf("join: %d %s %s", code, out, e)
	}
	waitVerdict(t, pgURL, "exc", "2026-09-28T14:00:00Z")
	if tracked(t, s.httpURL, r) {
		t.Fatal("the failed run is still tracked")
	}
	s.logged(t, "the termination's error class", `"error_class":"STREAM_FAILED"`)
	accepted := sample(t, s.httpURL, `finalizer_events_total{kind="progress",outcome="accepted"}`)
	pub.publish("progress", q, r, progressAt(q, r, "x", 3, "2026-09-28T18:05:00"))
	// A barrier: another run's progress, published after the stray one.
	qB, rB := id(0x602), id(0x603)
	if code, out, e := cli(t, nil, "track", "--nats-url", s.natsURL, "--query-id", qB, "--run-id", rB, "--table", "exc.barrier"); code != 0 {
		t.Fatalf("track: %d %s %s", code, out, e)
	}
	pub.publish("progress", qB, rB, progressAt(qB, rB, "x", 1, "2026-09-28T13:10:00"))
	waitVerdict(t, pgURL, "exc.barrier", "2026-09-28T13:00:00Z")
	if got := sample(t, s.httpURL, `finalizer_events_total{kind="progress",outcome="accepted"}`); got != accepted+1 {
		t.Errorf("%v progress events accepted after the termination, want only the barrier's", got-accepted)
	}
	if row, _ := readRow(t, pgURL, "exc"); !row.FinalizedUntil.Equal(utc("2026-09-28T14:00:00Z")) {
		t.Fatalf("a stray event after the termination moved the verdict to %v", row.FinalizedUntil)
	}
}

// A driver that dies without a termination: a new run of the same query
// supersedes the old run's tracker; a run silent longer than
// tracking.stale_after is shown as stale in status, /v1/runs and
// finalizer_stale_runs, and its tracker is stopped after
// tracking.expire_after, while a run that keeps posting idle events lives.
func TestDriverDiesWithoutTermination(t *testing.T) {
	pgURL := pgtest.URL(t)
	s := startServe(t, serveOpts{pgURL: pgURL, config: `
tracking:
  stale_after: 1s
  expire_after: 3s
tables:
  - table: "dead.{name}"
    query: "cdc_*"
`})
	pub := connect(t, s.natsURL)
	q, r1, r2 := id(0x700), id(0x701), id(0x702)
	qQ, rQ := id(0x703), id(0x704)

	pub.publish("started", q, r1, startedJSON(q, r1, "cdc_dead"))
	eventually(t, "first run tracked", func() bool { return tracked(t, s.httpURL, r1) })
	pub.publish("progress", q, r1, progressAt(q, r1, "cdc_dead", 1, "2026-09-28T13:10:00"))
	waitVerdict(t, pgURL, "dead.cdc_dead", "2026-09-28T13:00:00Z")
	// The driver died; the query is started again: a new run, started later.
	pub.publish("started", q, r2, startedAtJSON(q, r2, "cdc_dead", "2026-09-28T16:00:00"))
	eventually(t, "the new run supersedes the old one", func() bool { return tracked(t, s.httpURL, r2) && !tracked(t, s.httpURL, r1) })
	pub.publish("progress", q, r2, progressAt(q, r2, "cdc_dead", 2, "2026-09-28T14:05:00"))
	waitVerdict(t, pgURL, "dead.cdc_dead", "2026-09-28T14:00:00Z")

	// The new run stays alive with idle events; another query's run goes silent.
	stop := make(chan struct{})
	var wg sync.WaitGroup
	alive, err := nats.Connect(s.natsURL)
	if err != nil {
		t.Fatal(err)
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		tick := time.NewTicker(150 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-stop:
				return
			case <-tick.C:
				_ = alive.Publish("spark.idle."+q+"."+r2, []byte(idleJSON(q, r2)))
			}
		}
	}()
	defer func() { close(stop); wg.Wait(); alive.Close() }()
	pub.publish("started", qQ, rQ, startedJSON(qQ, rQ, "cdc_quiet"))
	eventually(t, "quiet run tracked", func() bool { return tracked(t, s.httpURL, rQ) })
	pub.publish("progress", qQ, rQ, progressAt(qQ, rQ, "cdc_quiet", 1, "2026-09-28T13:10:00"))
	waitVerdict(t, pgURL, "dead.cdc_quiet", "2026-09-28T13:00:00Z")

	eventually(t, "the silent run shown as stale", func() bool {
		var quiet, live *runStatus
		for _, r := range runs(t, s.httpURL) {
			switch r.RunID {
			case rQ:
				quiet = &r
			case r2:
				live = &r
			}
		}
		return quiet != nil && quiet.Stale && live != nil && !live.Stale &&
			sample(t, s.httpURL, "finalizer_stale_runs") == 1
	})
	code, out, e := cli(t, nil, "status", "--postgres-url", pgURL, "--http-url", s.httpURL)
	if code != 0 || !strings.Contains(grep(out, rQ), "STALE") || strings.Contains(grep(out, r2), "STALE") {
		t.Fatalf("status exit %d, want the quiet run STALE and the live one not:\n%s%s", code, out, e)
	}
	eventually(t, "the silent run's tracker stopped", func() bool {
		return !tracked(t, s.httpURL, rQ) && sample(t, s.httpURL, "finalizer_tracked_runs") == 1
	})
	// Expired is not done: join exits 3 and says why (ADR 0017).
	if code, out, e := cli(t, nil, "join", "--nats-url", s.natsURL, "--run-id", rQ, "--timeout", "5s"); code != 3 || !strings.Contains(e, "expired") {
		t.Errorf("join of the expired run: %d %s %s, want exit 3, expired", code, out, e)
	}
	pub.publish("progress", q, r2, progressAt(q, r2, "cdc_dead", 3, "2026-09-28T15:05:00"))
	waitVerdict(t, pgURL, "dead.cdc_dead", "2026-09-28T15:00:00Z")
}

// lastRetained returns the stream's last message on subject, or "".
func lastRetained(t *testing.T, natsURL, subject string) string {
	t.Helper()
	nc, js := natstest.Connect(t, natsURL)
	defer nc.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	st, err := js.Stream(ctx, "SPARK_EVENTS")
	if err != nil {
		t.Fatal(err)
	}
	m, err := st.GetLastMsgForSubject(ctx, subject)
	if err != nil {
		return ""
	}
	return string(m.Data)
}
