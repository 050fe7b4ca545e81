package main

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/finalizer-dev/finalizer/finalizer"
)

// runsServer is a service's HTTP API that serves runs on /v1/runs.
func runsServer(t *testing.T, runs []finalizer.TrackerStatus) *httptest.Server {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/v1/runs" {
			http.NotFound(w, r)
			return
		}
		_ = json.NewEncoder(w).Encode(map[string]any{"runs": runs})
	}))
	t.Cleanup(srv.Close)
	return srv
}

// TestRewindWarnsOfLiveRuns: a rewind holds only until a tracked run
// reports beyond it, and rewind said nothing of the table's live runs. It
// warns on stderr, naming each (run id, query), but not a run of a feeder
// it retired, nor an ended one; it says in one line when it could not ask,
// and nothing with --http-url "".
func TestRewindWarnsOfLiveRuns(t *testing.T) {
	url, s := controlDB(t)
	advanceTo(t, s, "bronze.orders", "q-old", "orders-v1", "r-old", statusAt)
	advanceTo(t, s, "bronze.orders", "q-new", "orders-v2", "r-new", statusAt)
	srv := runsServer(t, []finalizer.TrackerStatus{
		{RunID: "r-old", QueryID: "q-old", Table: "bronze.orders"},
		{RunID: "r-new", QueryID: "q-new", Table: "bronze.orders"},
		{RunID: "r-ended", QueryID: "q-new", Table: "bronze.orders", Terminated: true},
		{RunID: "r-other", QueryID: "q-o", Table: "bronze.other"},
	})
	rewind := func(to string, extra ...string) (int, string, string) {
		return runCLI(t, append([]string{"rewind", "--table", "bronze.orders", "--to", to, "--reason", "r", "--postgres-url", url, "--no-stream-position"}, extra...)...)
	}
	code, _, errOut := rewind("2026-09-28T14:00:00Z", "--http-url", srv.URL)
	if code != 0 || !strings.Contains(errOut, "warning: the service tracks 2 live run(s) of bronze.orders") ||
		!strings.Contains(errOut, "run r-old of query orders-v1 (q-old)") || !strings.Contains(errOut, "run r-new of query orders-v2 (q-new)") ||
		strings.Contains(errOut, "r-ended") || strings.Contains(errOut, "r-other") {
		t.Errorf("rewind with live runs: exit %d, stderr %q", code, errOut)
	}
	code, _, errOut = rewind("2026-09-28T13:00:00Z", "--http-url", srv.URL, "--retire-feeder", "q-old")
	if code != 0 || !strings.Contains(errOut, "1 live run(s)") || strings.Contains(errOut, "r-old") {
		t.Errorf("rewind retiring the old query: exit %d, stderr %q", code, errOut)
	}
	code, _, errOut = rewind("2026-09-28T12:00:00Z", "--http-url", "http://127.0.0.1:1")
	if code != 0 || strings.Count(errOut, "\n") != 1 || !strings.Contains(errOut, "could not check the service's live runs") {
		t.Errorf("rewind, service down: exit %d, stderr %q", code, errOut)
	}
	code, _, errOut = rewind("2026-09-28T11:00:00Z", "--http-url", "")
	if code != 0 || errOut != "" {
		t.Errorf("rewind, no --http-url: exit %d, stderr %q", code, errOut)
	}
}

// TestRewindSaysItWaitsForALock: a rewind behind a reader's FOR SHARE of
// the table's row blocked silently (39 s were seen). After 2 s it says on
// stderr that it waits for that lock, naming the session, and goes on
// when the reader ends.
func TestRewindSaysItWaitsForALock(t *testing.T) {
	url, s := controlDB(t)
	advanceTo(t, s, "bronze.orders", "q1", "orders", "r1", statusAt)
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	tx, err := conn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, `SELECT * FROM public.table_finalization WHERE table_name = 'bronze.orders' FOR SHARE`); err != nil {
		t.Fatal(err)
	}
	pid := conn.PgConn().PID()
	var out, errOut syncBuf
	done := make(chan int)
	go func() {
		done <- run(context.Background(), []string{"rewind", "--table", "bronze.orders", "--to", "2026-09-28T12:00:00Z", "--reason", "r",
			"--postgres-url", url, "--http-url", ""}, strings.NewReader(""), &out, &errOut)
	}()
	// The note comes lockNoteAfter into the wait, which begins once the
	// command has connected: it is waited for, not assumed after a fixed
	// time (a second of slack for the connect was a guess about the
	// machine's load).
	const note = "waiting for a lock on bronze.orders's row held by another session (pid "
	for deadline := time.Now().Add(lockNoteAfter + 20*time.Second); !strings.Contains(errOut.String(), note); time.Sleep(20 * time.Millisecond) {
		select {
		case code := <-done:
			t.Fatalf("the rewind did not wait for the reader: exit %d, stdout %q, stderr %q", code, out.String(), errOut.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("no note that the rewind waits for a lock: stderr %q", errOut.String())
		}
	}
	select {
	case code := <-done:
		t.Fatalf("the rewind ended while the reader held the row: exit %d, stderr %q", code, errOut.String())
	default:
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if code := <-done; code != 0 || !strings.Contains(errOut.String(), strings.TrimSpace(strconvItoa(pid))) {
		t.Errorf("rewind behind a reader: exit %d, stderr %q (reader pid %d)", code, errOut.String(), pid)
	}
}

func strconvItoa(n uint32) string { return strconv.FormatUint(uint64(n), 10) }
