//go:build linux

package tests

import (
	"context"
	"encoding/json"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/finalizer-dev/finalizer/internal/pgcluster/pgtest"
)

// finalExit runs is-final and returns its exit code.
func finalExit(t *testing.T, pg []string, table, end string) int {
	t.Helper()
	code, _, _ := cli(t, nil, append([]string{"is-final", "--table", table, "--period-end", end}, pg...)...)
	return code
}

// TestRewindCommand: `finalizer rewind` against the real binary and the
// real service. The verdict moves back only through it: audited (the audit
// table and `finalizer audit`), announced with "rewound": true, seen by
// is-final and wait at once, and it moves forward again from there through
// the ordinary advances.
func TestRewindCommand(t *testing.T) {
	pgURL := pgtest.URL(t)
	s := startServe(t, serveOpts{pgURL: pgURL})
	pub := connect(t, s.natsURL)
	pg := []string{"--postgres-url", pgURL}
	if code, out, e := cli(t, nil, "track", "--nats-url", s.natsURL, "--query-id", queryA, "--run-id", runA, "--table", "t"); code != 0 {
		t.Fatalf("track: %d %s %s", code, out, e)
	}
	pub.publish("progress", queryA, runA, cdcProgressJSON(queryA, runA, "x", "2026-09-28T15:07:00"))
	waitVerdict(t, pgURL, "t", "2026-09-28T15:00:00Z")

	// A progress below the verdict does not move it back.
	pub.publish("progress", queryA, runA, cdcProgressJSON(queryA, runA, "x", "2026-09-28T12:30:00"))
	time.Sleep(300 * time.Millisecond)
	if code := finalExit(t, pg, "t", "2026-09-28T15:00:00Z"); code != 0 {
		t.Fatalf("is-final 15:00 after an older progress: exit %d, want 0 (forward only)", code)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	lc, err := pgx.Connect(ctx, pgURL)
	if err != nil {
		t.Fatal(err)
	}
	defer lc.Close(context.Background())
	if _, err := lc.Exec(ctx, "LISTEN finalizer_verdict"); err != nil {
		t.Fatal(err)
	}

	// Refused: not backwards, no reason, no such table. Nothing changes.
	for _, args := range [][]string{
		{"--table", "t", "--to", "2026-09-28T16:00:00Z", "--reason", "x"},
		{"--table", "t", "--to", "2026-09-28T15:00:00Z", "--reason", "x"},
		{"--table", "t", "--to", "2026-09-28T12:00:00Z"},
		{"--table", "nope", "--to", "2026-09-28T12:00:00Z", "--reason", "x"},
		{"--table", "t", "--to", "noon", "--reason", "x"},
	} {
		if code, out, e := cli(t, nil, append(append([]string{"rewind"}, args...), pg...)...); code != 2 {
			t.Errorf("rewind %v: exit %d, want 2 (%s%s)", args, code, out, e)
		}
	}
	if code := finalExit(t, pg, "t", "2026-09-28T15:00:00Z"); code != 0 {
		t.Fatalf("a refused rewind moved the verdict: is-final 15:00 exit %d", code)
	}

	code, out, e := cli(t, nil, append([]string{"rewind", "--table", "t", "--to", "2026-09-28T12:00:00Z",
		"--reason", "orders-v1 restarted from a new checkpoint", "--by", "ops-oncall"}, pg...)...)
	if code != 0 || !strings.Contains(out, "rewound from 2026-09-28T15:00:00Z to 2026-09-28T12:00:00Z by ops-oncall") {
		t.Fatalf("rewind: exit %d\n%s%s", code, out, e)
	}
	n, err := lc.WaitForNotification(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var payload map[string]any
	if err := json.Unmarshal([]byte(n.Payload), &payload); err != nil {
		t.Fatal(err)
	}
	if payload["table"] != "t" || payload["finalized_until"] != "2026-09-28T12:00:00Z" || payload["rewound"] != true || payload["from"] != "2026-09-28T15:00:00Z" {
		t.Errorf("notification %s", n.Payload)
	}

	// is-final and wait see the new verdict at once.
	if code := finalExit(t, pg, "t", "2026-09-28T13:00:00Z"); code != 1 {
		t.Errorf("is-final 13:00 after the rewind to 12:00: exit %d, want 1", code)
	}
	if code := finalExit(t, pg, "t", "2026-09-28T12:00:00Z"); code != 0 {
		t.Errorf("is-final 12:00 after the rewind to 12:00: exit %d, want 0", code)
	}
	if code, _, _ := cli(t, nil, append([]string{"wait", "--table", "t", "--until", "2026-09-28T13:00:00Z", "--timeout", "300ms"}, pg...)...); code != 1 {
		t.Errorf("wait 13:00 after the rewind: exit %d, want 1 (timed out)", code)
	}

	// The audit trail.
	code, out, e = cli(t, nil, append([]string{"audit", "--table", "t", "--json"}, pg...)...)
	if code != 0 {
		t.Fatalf("audit: %d %s %s", code, out, e)
	}
	var audit struct {
		Audit []struct { // the audit table's column names (ADR 0013, addendum of 2026-12-06)
			Table       string    `json:"table_name"`
			Action      string    `json:"action"`
			By          string    `json:"by_operator"`
			DBUser      string    `json:"db_user"`
			Reason      string    `json:"reason"`
			From        time.Time `json:"from_until"`
			To          time.Time `json:"to_until"`
			FromRunID   string    `json:"from_run_id"`
			FromBatchID int64     `json:"from_batch_id"`
		}
	}
	if err := json.Unmarshal([]byte(out), &audit); err != nil {
		t.Fatal(err)
	}
	if len(audit.Audit) != 1 {
		t.Fatalf("audit: %s", out)
	}
	a := audit.Audit[0]
	if a.Table != "t" || a.Action != "rewind" || a.By != "ops-oncall" || a.DBUser == "" || a.Reason != "orders-v1 restarted from a new checkpoint" ||
		!a.From.Equal(utc("2026-09-28T15:00:00Z")) || !a.To.Equal(utc("2026-09-28T12:00:00Z")) || a.FromRunID != runA {
		t.Errorf("audit entry %+v", a)
	}

	// The service shows when the table was rewound.
	var tbl struct {
		FinalizedUntil time.Time `json:"finalized_until"`
		RewoundAt      time.Time `json:"rewound_at"`
	}
	if code := getJSON(t, s.httpURL+"/v1/tables/t", &tbl); code != 200 || !tbl.FinalizedUntil.Equal(utc("2026-09-28T12:00:00Z")) || tbl.RewoundAt.IsZero() {
		t.Errorf("GET /v1/tables/t: %d %+v", code, tbl)
	}
	code, out, _ = cli(t, nil, append([]string{"status", "--table", "t", "--http-url", ""}, pg...)...)
	if code != 0 || !strings.Contains(out, "t was last rewound at") {
		t.Errorf("status: %d\n%s", code, out)
	}

	// Forward again from 12:00: a new run of the query reprocesses; a
	// waiter for 13:00 returns when its progress crosses 13:00.
	wctx, wcancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer wcancel()
	w := exec.CommandContext(wctx, binary, append([]string{"wait", "--table", "t", "--until", "2026-09-28T13:00:00Z", "--timeout", "25s"}, pg...)...)
	w.Env = cleanEnv()
	if err := w.Start(); err != nil {
		t.Fatal(err)
	}
	waited := make(chan error, 1)
	go func() { waited <- w.Wait() }()
	if code, out, e := cli(t, nil, "track", "--nats-url", s.natsURL, "--query-id", queryA, "--run-id", runB, "--table", "t"); code != 0 {
		t.Fatalf("track: %d %s %s", code, out, e)
	}
	pub.publish("progress", queryA, runB, cdcProgressJSON(queryA, runB, "x", "2026-09-28T13:20:00"))
	if err := <-waited; err != nil {
		t.Fatalf("wait 13:00: %v, want exit 0 once the new run's progress moved the verdict", err)
	}
	waitVerdict(t, pgURL, "t", "2026-09-28T13:00:00Z")
}

// TestRestartKeepsARewind: the run's last progress (18:10) and its
// termination, then the operator's rewind to 14:00. A restart's recovery
// applied that progress again from the stream and the verdict was 18:00
// again (found in review). It stays at 14:00 across the restart, until a
// progress posted after the rewind moves it (ADR 0019's last addendum).
func TestRestartKeepsARewind(t *testing.T) {
	dataDir := t.TempDir()
	s, pgURL := serveATerminatedRunIn(t, dataDir)
	pg := []string{"--postgres-url", pgURL}
	rewindOrdersTo14(t, s, pg, "", "")
	s.stop()
	s = startServe(t, serveOpts{pgURL: pgURL, dataDir: dataDir, config: ordersConfig})
	s.logged(t, "the recovery", "recovered tracked runs")
	s.logged(t, "the old progress refused", "posted before the table's last rewind")
	if code := finalExit(t, pg, "bronze.orders", "2026-09-28T15:00:00Z"); code != 1 {
		t.Fatalf("after the restart, is-final 15:00 exits %d, want 1: the rewind was undone", code)
	}
	// A new run reprocessing, posted now: it moves the verdict as before.
	newRunMoves(t, s, pgURL)
}

// newRunMoves has a new run of the query (runB) start and, once its
// tracker runs, post a progress to 15:10, and waits for bronze.orders at
// 15:00. The progress is posted once the tracker runs so that it is heard
// live: one its tracker's start reads from the stream, stored within a
// minute after the table's rewind, waits for the run's next progress
// (ADR 0019, addendum of 2026-12-06).
func newRunMoves(t *testing.T, s *proc, pgURL string) {
	t.Helper()
	pub := connect(t, s.natsURL)
	pub.publish("started", queryA, runB, startedJSON(queryA, runB, "orders-v1"))
	eventually(t, "the new run tracked", func() bool {
		for _, line := range strings.Split(s.stderr.String(), "\n") {
			if strings.Contains(line, `"tracking run"`) && strings.Contains(line, runB) {
				return true
			}
		}
		return false
	})
	pub.publish("progress", queryA, runB, progressPosted(queryA, runB, "orders-v1", 1, time.Now().UTC(), "2026-09-28T15:10:00"))
	waitVerdict(t, pgURL, "bronze.orders", "2026-09-28T15:00:00Z")
}

// TestTrackAfterARewindKeepsIt: a run posted its last progress (18:10) and
// terminated, the operator rewound its table to 14:00, and then someone
// tracked that run again, live (`finalizer track`, no restart): its
// catch-up applied the run's last progress, kept in the stream, and the
// verdict was 18:00 again with no new data (found in review after the
// recovery's fix of f325569). A tracker started at any time judges its run
// by the recovery's rule: terminated, or nothing stored since the rewind,
// it applies no progress posted before the rewind.
func TestTrackAfterARewindKeepsIt(t *testing.T) {
	s, pgURL := serveATerminatedRun(t)
	pg := []string{"--postgres-url", pgURL}
	rewindOrdersTo14(t, s, pg, "the rewind heard", "verdict rewound by an operator")
	if code, out, e := cli(t, nil, "track", "--nats-url", s.natsURL, "--query-id", queryA, "--run-id", runA, "--table", "bronze.orders"); code != 0 {
		t.Fatalf("track: exit %d\n%s%s", code, out, e)
	}
	heldBeforeRewind(t, s, pg, "the old progress taken", "after the track,", "the rewind was undone")
}

// TestARewindNotHeardIsReadAgain: a rewind committed while the service's
// LISTEN connection was down (here: the row set back without its
// announcement, then the connection cut) was never recorded; the service
// heard only that some verdict may have changed, and a track of the old
// run afterwards applied its last progress, from before the rewind. Every
// notification without a table has the service read the rewinds again.
func TestARewindNotHeardIsReadAgain(t *testing.T) {
	s, pgURL := serveATerminatedRun(t)
	pg := []string{"--postgres-url", pgURL}
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, pgURL)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	// The rewind's writes, as finalizer rewind makes them, with no
	// announcement: what a service whose LISTEN connection was down sees.
	for _, q := range []string{
		`UPDATE table_finalization SET finalized_until = '2026-09-28T14:00:00Z', run_id = NULL, batch_id = NULL, rewound_at = now() WHERE table_name = 'bronze.orders'`,
		`UPDATE table_finalization_feeds SET finalized_until = '2026-09-28T14:00:00Z' WHERE table_name = 'bronze.orders' AND finalized_until > '2026-09-28T14:00:00Z'`,
	} {
		if _, err := conn.Exec(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	var killed int
	if err := conn.QueryRow(ctx, `SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE pid <> pg_backend_pid() AND query ILIKE 'listen%'`).Scan(&killed); err != nil || killed == 0 {
		t.Fatalf("cut the LISTEN connection: %d cut, %v", killed, err)
	}
	s.logged(t, "the reconnect", "control database connection re-established")
	if code, out, e := cli(t, nil, "track", "--nats-url", s.natsURL, "--query-id", queryA, "--run-id", runA, "--table", "bronze.orders"); code != 0 {
		t.Fatalf("track: exit %d\n%s%s", code, out, e)
	}
	heldBeforeRewind(t, s, pg, "the old progress taken", "after the track,", "the rewind not heard was undone")
}

// ordersConfig is the config of the rewind tests' service: one rule,
// bronze.orders fed by orders-v1.
const ordersConfig = "tables:\n  - table: bronze.orders\n    query: orders-v1\n"

// serveATerminatedRun starts serve on a fresh PostgreSQL with one rule
// (ordersConfig) and has one run of the query post a progress to 18:10
// and terminate: the table is final until 18:00, and the stream keeps the
// run's last progress.
func serveATerminatedRun(t *testing.T) (*proc, string) {
	t.Helper()
	return serveATerminatedRunIn(t, t.TempDir())
}

// serveATerminatedRunIn is serveATerminatedRun with the service's data
// dir in dataDir, for a test that restarts it.
func serveATerminatedRunIn(t *testing.T, dataDir string) (*proc, string) {
	t.Helper()
	pgURL := pgtest.URL(t)
	s := startServe(t, serveOpts{pgURL: pgURL, dataDir: dataDir, config: ordersConfig})
	runAEnds(t, s, pgURL, cdcProgressJSON(queryA, runA, "orders-v1", "2026-09-28T18:10:00"))
	return s, pgURL
}

// runAEnds publishes run A of orders-v1 to s: its start, progress (its
// source at 18:10), and once bronze.orders is at 18:00, its end, which s
// logs.
func runAEnds(t *testing.T, s *proc, pgURL, progress string) {
	t.Helper()
	pub := connect(t, s.natsURL)
	pub.publish("started", queryA, runA, startedJSON(queryA, runA, "orders-v1"))
	pub.publish("progress", queryA, runA, progress)
	waitVerdict(t, pgURL, "bronze.orders", "2026-09-28T18:00:00Z")
	pub.publish("terminated", queryA, runA, terminatedJSON(queryA, runA))
	s.logged(t, "the run's end", "run terminated")
}

// runAheadEnds is runAEnds with a progress whose driver's clock, ten
// minutes ahead, posts it after any rewind soon to come.
func runAheadEnds(t *testing.T, s *proc, pgURL string) {
	t.Helper()
	ahead := time.Now().Add(10 * time.Minute).UTC()
	runAEnds(t, s, pgURL, progressPosted(queryA, runA, "orders-v1", 7, ahead, "2026-09-28T18:10:00"))
}

// TestARewindHoldsAgainstADriverClockAhead: a run whose driver's clock is
// ten minutes ahead posted its last progress (18:10) and terminated; the
// operator rewound its table to 14:00 shortly after. The progress carries
// a timestamp after the rewind, and a track of the old run, then a
// restart's recovery, applied it again from the stream (18:00 with no new
// data; ADR 0019, open until the addendum of 2026-12-06). A retained
// progress is judged by when the stream stored it: before the rewind, so
// the verdict stays at 14:00 through both.
func TestARewindHoldsAgainstADriverClockAhead(t *testing.T) {
	pgURL := pgtest.URL(t)
	pg := []string{"--postgres-url", pgURL}
	dataDir := t.TempDir()
	cfg := ordersConfig
	s := startServe(t, serveOpts{pgURL: pgURL, dataDir: dataDir, config: cfg})
	runAheadEnds(t, s, pgURL)
	rewindOrdersTo14(t, s, pg, "the rewind heard", "verdict rewound by an operator")

	// A new track of the old run: its catch-up reads the last progress.
	if code, out, e := cli(t, nil, "track", "--nats-url", s.natsURL, "--query-id", queryA, "--run-id", runA, "--table", "bronze.orders"); code != 0 {
		t.Fatalf("track: exit %d\n%s%s", code, out, e)
	}
	heldBeforeRewind(t, s, pg, "the old progress taken by the track", "after the track,", "a progress stamped after the rewind by a clock ahead undid it")

	// A restart: its recovery reads it again.
	s.stop()
	s = startServe(t, serveOpts{pgURL: pgURL, dataDir: dataDir, config: cfg})
	s.logged(t, "the recovery", "recovered tracked runs")
	eventually(t, "the old progress taken by the recovery", func() bool { return oldProgressTaken(t, s, pg) })
	if !strings.Contains(s.stderr.String(), `"stored"`) {
		t.Errorf("the hold's log line does not say when the stream stored the progress:\n%s", s.stderr.String())
	}
	staysRewound(t, pg, "after the restart,", "a progress stamped after the rewind by a clock ahead undid it")
	// A new run reprocessing moves the verdict as before.
	newRunMoves(t, s, pgURL)
}

// TestAResetRunsOnlyProgressMovesTheRewoundTable: the usual reset, as a
// script: the old query stopped, `finalizer rewind`, the new query
// started at once, an AvailableNow run that posts one progress and
// terminates. Its progress reaches the stream before discovery's tracker
// subscribes, so its catch-up reads it from the stream, stored seconds
// after the rewind: within the minute's margin across the NATS and
// PostgreSQL servers' clocks, it was held as before_rewind until the
// run's next progress, which never comes (the table stayed at the rewind
// for good). The rewind heard live is judged on the NATS server's own
// clock now: the stream's state when the service heard it (ADR 0019,
// addendum of 2026-12-06).
func TestAResetRunsOnlyProgressMovesTheRewoundTable(t *testing.T) {
	s, pgURL := serveATerminatedRun(t)
	pg := []string{"--postgres-url", pgURL}
	rewindOrdersTo14(t, s, pg, "the stream's state at the rewind", "the event stream's state when the rewind was heard")
	pub := connect(t, s.natsURL)
	// The new query, started by the script: one progress, then its end,
	// published at once (its tracker reads them from the stream).
	pub.publish("started", queryA, runB, startedJSON(queryA, runB, "orders-v1"))
	pub.publish("progress", queryA, runB, progressPosted(queryA, runB, "orders-v1", 0, time.Now().UTC(), "2026-09-28T15:10:00"))
	pub.publish("terminated", queryA, runB, terminatedJSON(queryA, runB))
	waitVerdict(t, pgURL, "bronze.orders", "2026-09-28T15:00:00Z")
}

// rewindOrdersTo14 rewinds bronze.orders to 14:00 as an operator does and
// waits until the service s has logged line after it (what names it in a
// failure; "the rewind heard", "verdict rewound by an operator" says it
// heard the rewind). With line "" it waits for nothing: the service may
// not have heard the rewind yet.
func rewindOrdersTo14(t *testing.T, s *proc, pg []string, what, line string) {
	t.Helper()
	if code, out, e := cli(t, nil, append([]string{"rewind", "--table", "bronze.orders", "--to", "2026-09-28T14:00:00Z",
		"--reason", "reprocessing from 14:00", "--by", "ops"}, pg...)...); code != 0 {
		t.Fatalf("rewind: exit %d\n%s%s", code, out, e)
	}
	if line != "" {
		s.logged(t, what, line)
	}
}

// oldProgressTaken is true once the service s has said it held a progress
// posted before the rewind, or bronze.orders is final for 15:00 again (the
// rewind undone: staysRewound then fails).
func oldProgressTaken(t *testing.T, s *proc, pg []string) bool {
	return strings.Contains(s.stderr.String(), "posted before the table's last rewind") ||
		finalExit(t, pg, "bronze.orders", "2026-09-28T15:00:00Z") == 0
}

// staysRewound fails the test when bronze.orders is final for 15:00 (the
// rewind to 14:00 undone) after when, saying why that is wrong.
func staysRewound(t *testing.T, pg []string, when, why string) {
	t.Helper()
	if code := finalExit(t, pg, "bronze.orders", "2026-09-28T15:00:00Z"); code != 1 {
		t.Fatalf("%s is-final 15:00 exits %d, want 1: %s", when, code, why)
	}
}

// heldBeforeRewind waits until the old progress is taken (what), then
// checks that the rewind held (staysRewound).
func heldBeforeRewind(t *testing.T, s *proc, pg []string, what, when, why string) {
	t.Helper()
	eventually(t, what, func() bool { return oldProgressTaken(t, s, pg) })
	staysRewound(t, pg, when, why)
}
