//go:build linux

package tests

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// Helpers of the fault, bad-input and security tests.

// progressAt is a listener-form progress of batch whose CDC source ends at
// commitTS (naive UTC), with an explicit batch id.
func progressAt(queryID, runID, name string, batch int64, commitTS string) string {
	n := "null"
	if name != "" {
		n = fmt.Sprintf("%q", name)
	}
	return fmt.Sprintf(`{"id":%q,"runId":%q,"name":%s,"timestamp":"2026-09-28T15:00:00.000Z","batchId":%d,"numInputRows":10,"sources":[{"description":"SqlServerCdc[dbo.orders]","startOffset":null,"endOffset":{"lsn":"0x27","commit_ts":%q},"latestOffset":null,"numInputRows":10,"metrics":{}}],"sink":{"description":"DeltaSink[bronze.orders]","numOutputRows":10,"metrics":{}}}`,
		queryID, runID, n, batch, commitTS)
}

// progressWithOffset is a listener-form progress whose source's endOffset
// is the JSON endOffset, as given.
func progressWithOffset(queryID, runID string, batch int64, endOffset string) string {
	return fmt.Sprintf(`{"id":%q,"runId":%q,"name":null,"timestamp":"2026-09-28T15:00:00.000Z","batchId":%d,"sources":[{"description":"x","startOffset":null,"endOffset":%s,"latestOffset":null}]}`,
		queryID, runID, batch, endOffset)
}

// terminatedWithException is a listener-form termination after a failure.
func terminatedWithException(queryID, runID string) string {
	trace := "org.apache.spark.sql.streaming.StreamingQueryException: [STREAM_FAILED] Query [id = " + queryID + ", runId = " + runID +
		"] terminated with exception: Connection reset\n\tat org.apache.spark.sql.execution.streaming.StreamExecution.org$apache$spark$sql$execution$streaming$StreamExecution$$runStream(StreamExecution.scala:332)\n\tat \"quoted\" \\ backslash"
	b, _ := json.Marshal(map[string]any{"id": queryID, "runId": runID, "exception": trace, "errorClassOnException": "STREAM_FAILED"})
	return string(b)
}

// verdictWatch polls a table's verdict in the background, tolerating a
// database that is down, and remembers every distinct value it saw.
type verdictWatch struct {
	table string
	stop  chan struct{}
	wg    sync.WaitGroup

	mu   sync.Mutex
	seen []time.Time
}

// watchVerdict starts a verdictWatch on pgURL, stopped at cleanup.
func watchVerdict(t *testing.T, pgURL, table string) *verdictWatch {
	t.Helper()
	w := &verdictWatch{table: table, stop: make(chan struct{})}
	w.wg.Add(1)
	go func() {
		defer w.wg.Done()
		pollPostgres(pgURL, 10*time.Millisecond, w.stop, func(ctx context.Context, conn *pgx.Conn) error {
			var until time.Time
			err := conn.QueryRow(ctx, `SELECT finalized_until FROM public.table_finalization WHERE table_name = $1`, table).Scan(&until)
			switch {
			case err == nil:
				w.note(until.UTC())
			case err == pgx.ErrNoRows:
				return nil
			}
			return err
		})
	}()
	t.Cleanup(w.close)
	return w
}

func (w *verdictWatch) note(v time.Time) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if n := len(w.seen); n == 0 || !w.seen[n-1].Equal(v) {
		w.seen = append(w.seen, v)
	}
}

func (w *verdictWatch) close() {
	select {
	case <-w.stop:
	default:
		close(w.stop)
	}
	w.wg.Wait()
}

// wentOnlyThrough fails the test unless every value the watch saw is one
// of want, in want's order, ending at want's last. A poll every 10 ms
// can miss a value the table held for less than that (two moves 8 ms
// apart in CI): a test that needs a value reached waits for it itself
// (waitVerdict); the watch says that nothing else was ever seen.
func wentOnlyThrough(t *testing.T, seen []time.Time, want ...string) {
	t.Helper()
	i := 0
	for _, v := range seen {
		for i < len(want) && !utc(want[i]).Equal(v) {
			i++
		}
		if i == len(want) {
			t.Errorf("the table went through %v, want only %v, in that order", seen, want)
			return
		}
	}
	if len(seen) == 0 || !seen[len(seen)-1].Equal(utc(want[len(want)-1])) {
		t.Errorf("the table went through %v, want it to end at %s", seen, want[len(want)-1])
	}
}

// check waits until the watch has seen final (up to 20 s), stops it, and
// fails the test when the verdict ever moved backwards or beyond final. It
// returns the values seen.
func (w *verdictWatch) check(t *testing.T, final string) []time.Time {
	t.Helper()
	limit := utc(final)
	deadline := time.Now().Add(20 * time.Second)
	for {
		w.mu.Lock()
		n := len(w.seen)
		done := n > 0 && !w.seen[n-1].Before(limit)
		w.mu.Unlock()
		if done || time.Now().After(deadline) {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	w.close()
	w.mu.Lock()
	defer w.mu.Unlock()
	if n := len(w.seen); n == 0 || !w.seen[n-1].Equal(limit) {
		t.Errorf("%s: the watch saw %v, want it to end at %v", w.table, w.seen, limit)
	}
	for i, v := range w.seen {
		if i > 0 && v.Before(w.seen[i-1]) {
			t.Errorf("%s: verdict moved backwards: %v", w.table, w.seen)
		}
		if v.After(limit) {
			t.Errorf("%s: verdict %v ran ahead of what the data justifies (%v); seen %v", w.table, v, limit, w.seen)
		}
	}
	return append([]time.Time(nil), w.seen...)
}

// httpGet GETs url with an optional bearer token; it returns the status
// and the body.
func httpGet(t *testing.T, url, token string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	client := &http.Client{Timeout: 10 * time.Second}
	resp, err := client.Do(req)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// runStatus is a tracked run as GET /v1/runs shows it.
type runStatus struct {
	RunID    string `json:"run_id"`
	Table    string `json:"table"`
	Failures int    `json:"failures"`
	LastErr  string `json:"last_error"`
	Stale    bool   `json:"stale"`
	Done     bool   `json:"done"`
}

// runs returns the service's tracked runs.
func runs(t *testing.T, httpURL string) []runStatus {
	t.Helper()
	code, body := httpGet(t, httpURL+"/v1/runs", "")
	if code != http.StatusOK {
		t.Fatalf("GET /v1/runs: %d %s", code, body)
	}
	var doc struct {
		Runs []runStatus `json:"runs"`
	}
	if err := json.Unmarshal([]byte(body), &doc); err != nil {
		t.Fatalf("GET /v1/runs: %v: %s", err, body)
	}
	return doc.Runs
}

// tracked reports whether the service tracks runID (into any table).
func tracked(t *testing.T, httpURL, runID string) bool {
	t.Helper()
	for _, r := range runs(t, httpURL) {
		if r.RunID == runID && !r.Done {
			return true
		}
	}
	return false
}

// sample returns the value of one exact sample line of the service's
// /metrics ("name" or `name{label="x",...}`), 0 when absent.
func sample(t *testing.T, httpURL, series string) float64 {
	t.Helper()
	for _, line := range strings.Split(metricText(t, httpURL), "\n") {
		if strings.HasPrefix(line, series+" ") {
			var v float64
			fmt.Sscan(strings.TrimSpace(strings.TrimPrefix(line, series)), &v)
			return v
		}
	}
	return 0
}

// errorLines returns the error-level lines of a JSON log.
func errorLines(log string) []string {
	var out []string
	for _, l := range strings.Split(log, "\n") {
		if strings.Contains(l, `"level":"error"`) {
			out = append(out, l)
		}
	}
	return out
}

// writeFile writes a file in dir and returns its path.
func writeFile(t *testing.T, dir, name, body string, mode os.FileMode) string {
	t.Helper()
	path := dir + "/" + name
	if err := os.WriteFile(path, []byte(body), mode); err != nil {
		t.Fatal(err)
	}
	return path
}

// pollPostgres calls poll with a connection to pgURL every interval until
// stop is closed. A failed poll drops the connection and the next tick
// connects again: PostgreSQL may be down, restarting or failing over.
func pollPostgres(pgURL string, interval time.Duration, stop <-chan struct{}, poll func(context.Context, *pgx.Conn) error) {
	var conn *pgx.Conn
	defer func() {
		if conn != nil {
			_ = conn.Close(context.Background())
		}
	}()
	tick := time.NewTicker(interval)
	defer tick.Stop()
	for {
		select {
		case <-stop:
			return
		case <-tick.C:
		}
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		if conn == nil || conn.IsClosed() {
			conn, _ = pgx.Connect(ctx, pgURL)
		}
		if conn != nil {
			if err := poll(ctx, conn); err != nil {
				_ = conn.Close(ctx)
				conn = nil
			}
		}
		cancel()
	}
}
