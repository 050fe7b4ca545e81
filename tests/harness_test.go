//go:build linux

// Package tests holds the end-to-end tests: the real finalizer binary,
// built once per test run, against the embedded NATS server and a real
// PostgreSQL that the tests start themselves. Events are published with a
// plain NATS client, as a Spark driver would.
//
// They run on Linux only (the build tag of every file): the children die
// with the test binary (Pdeathsig), and some tests change the file-system
// uid or run the service as another user.
package tests

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/nats-io/nats.go"

	"github.com/finalizer-dev/finalizer/internal/pgcluster/pgtest"
)

// binary is the finalizer built for this test run.
var binary string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "finalizer-e2e-bin-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	binary = filepath.Join(dir, "finalizer")
	build := exec.Command("go", "build", "-o", binary, "../cmd/finalizer")
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "build finalizer:", err)
		os.Exit(1)
	}
	code := pgtest.Run(m)
	os.RemoveAll(dir)
	os.Exit(code)
}

// proc is a running `finalizer serve`.
type proc struct {
	t        *testing.T
	cmd      *exec.Cmd
	dataDir  string
	natsURL  string // with the embedded server's login, when it has one
	natsBare string // without
	httpURL  string
	pgURL    string
	stdout   *syncBuffer
	stderr   *syncBuffer
	done     chan struct{}
	exit     error
}

// syncBuffer is a bytes.Buffer safe for a writer goroutine and readers.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// serveOpts says how to start serve.
type serveOpts struct {
	dataDir string   // "" = a new temp dir
	pgURL   string   // "" = the managed cluster (slow); tests pass pgtest.URL
	natsURL string   // "" = the embedded server on a random port
	config  string   // YAML written to a file and passed with --config
	args    []string // more flags
	env     []string
	noFlags bool // run with no flags at all, in dataDir as the working dir
}

// startServe starts serve and waits until it is ready.
func startServe(t *testing.T, o serveOpts) *proc {
	t.Helper()
	if o.dataDir == "" {
		o.dataDir = t.TempDir()
	}
	var args []string
	if !o.noFlags {
		args = []string{"serve", "--data-dir", o.dataDir, "--http-listen", "127.0.0.1:0", "--log-level", "debug"}
		if o.natsURL != "" {
			args = append(args, "--nats-url", o.natsURL)
		} else {
			args = append(args, "--nats-listen", "127.0.0.1:0")
		}
		if o.pgURL != "" {
			args = append(args, "--postgres-url", o.pgURL)
		}
		if o.config != "" {
			path := filepath.Join(o.dataDir, "finalizer.yaml")
			if err := os.WriteFile(path, []byte(o.config), 0o644); err != nil {
				t.Fatal(err)
			}
			args = append(args, "--config", path)
		}
		args = append(args, o.args...)
	} else {
		args = []string{"serve"}
	}
	p := &proc{t: t, dataDir: o.dataDir, pgURL: o.pgURL, stdout: &syncBuffer{}, stderr: &syncBuffer{}, done: make(chan struct{})}
	p.cmd = exec.Command(binary, args...)
	dieWithTest(p.cmd)
	p.cmd.Env = append(cleanEnv(), o.env...)
	if o.noFlags {
		p.cmd.Dir = o.dataDir
	}
	pr, pw := io.Pipe()
	p.cmd.Stdout = io.MultiWriter(p.stdout, pw)
	p.cmd.Stderr = p.stderr
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		p.exit = p.cmd.Wait()
		pw.Close()
		close(p.done)
	}()
	ready := make(chan struct{})
	go func() {
		sc := bufio.NewScanner(pr)
		closed := false
		for sc.Scan() {
			line := sc.Text()
			switch {
			case strings.HasPrefix(line, "finalizer: NATS "):
				p.natsURL = strings.Fields(line)[2]
			case strings.HasPrefix(line, "finalizer: HTTP "):
				p.httpURL = strings.Fields(line)[2]
			case strings.HasPrefix(line, "finalizer: ready"):
				if !closed {
					close(ready)
					closed = true
				}
			}
		}
	}()
	select {
	case <-ready:
	case <-p.done:
		t.Fatalf("serve exited before it was ready: %v\nstdout:\n%s\nstderr:\n%s", p.exit, p.stdout, p.stderr)
	case <-time.After(90 * time.Second):
		p.kill()
		t.Fatalf("serve not ready within 90 s\nstderr:\n%s", p.stderr)
	}
	if p.natsURL == "" {
		p.natsURL = o.natsURL
	}
	p.natsBare = p.natsURL
	dataDir := o.dataDir
	if o.noFlags {
		dataDir = filepath.Join(dataDir, "finalizer-data")
	}
	if raw, err := os.ReadFile(filepath.Join(dataDir, "nats-login.json")); err == nil && o.natsURL == "" {
		// The embedded server's login for the machine's owner: the tests'
		// publishers and commands use it, in the URL.
		var login struct{ User, Password string }
		if err := json.Unmarshal(raw, &login); err != nil {
			t.Fatalf("nats-login.json: %v", err)
		}
		p.natsURL = strings.Replace(p.natsURL, "://", "://"+login.User+":"+login.Password+"@", 1)
	}
	if o.pgURL == "" {
		// stdout masks the managed cluster's password; the full URL is in
		// the data dir's postgres.url.
		dir := o.dataDir
		if o.noFlags {
			dir = filepath.Join(dir, "finalizer-data")
		}
		raw, err := os.ReadFile(filepath.Join(dir, "postgres.url"))
		if err != nil {
			t.Fatalf("managed cluster: %v", err)
		}
		p.pgURL = strings.TrimSpace(string(raw))
	}
	t.Cleanup(func() {
		p.stop()
		if t.Failed() {
			t.Logf("serve stderr:\n%s", tail(p.stderr.String(), 60))
		}
	})
	return p
}

// stop sends SIGTERM and waits for a clean exit.
func (p *proc) stop() {
	select {
	case <-p.done:
		return
	default:
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
		if p.exit != nil {
			p.t.Errorf("serve exited with %v after SIGTERM, want 0", p.exit)
		}
	case <-time.After(60 * time.Second):
		p.kill()
		p.t.Errorf("serve did not stop within 60 s of SIGTERM")
	}
}

// kill sends SIGKILL and waits.
func (p *proc) kill() {
	_ = p.cmd.Process.Kill()
	<-p.done
}

func cleanEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "FINALIZER_") {
			env = append(env, kv)
		}
	}
	return env
}

func tail(s string, n int) string {
	lines := strings.Split(s, "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// dieWithTest makes the kernel kill a child when the test binary dies
// (a timeout panic, a kill -9 of `go test`), so that no orphaned serve keeps
// holding a port, a data dir or a PostgreSQL cluster after the test.
func dieWithTest(cmd *exec.Cmd) {
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	cmd.SysProcAttr.Pdeathsig = syscall.SIGKILL
}

// cli runs a finalizer subcommand and returns its exit code and output.
func cli(t *testing.T, env []string, args ...string) (int, string, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, binary, args...)
	dieWithTest(cmd)
	cmd.Env = append(cleanEnv(), env...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatalf("run %v: %v", args, err)
	}
	return code, out.String(), errb.String()
}

// publisher is a plain NATS client, as a Spark driver's listener is.
type publisher struct {
	t  *testing.T
	nc *nats.Conn
}

func connect(t *testing.T, url string) *publisher {
	t.Helper()
	nc, err := nats.Connect(url)
	if err != nil {
		t.Fatalf("connect %s: %v", url, err)
	}
	t.Cleanup(nc.Close)
	return &publisher{t: t, nc: nc}
}

// publish sends one event to <prefix>.<kind>.<queryId>.<runId>.
func (p *publisher) publish(kind, queryID, runID string, payload string) {
	p.t.Helper()
	subj := fmt.Sprintf("spark.%s.%s.%s", kind, queryID, runID)
	if err := p.nc.Publish(subj, []byte(payload)); err != nil {
		p.t.Fatal(err)
	}
	if err := p.nc.Flush(); err != nil {
		p.t.Fatal(err)
	}
}

// Listener-form payloads, shaped as Spark's json4s output.

func startedJSON(queryID, runID, name string) string {
	return startedAtJSON(queryID, runID, name, "2026-09-28T13:00:00")
}

// startedAtJSON is a started event at ts (naive UTC): of two runs of one
// query, the one that started later supersedes the other (ADR 0017).
func startedAtJSON(queryID, runID, name, ts string) string {
	n := "null"
	if name != "" {
		n = fmt.Sprintf("%q", name)
	}
	return fmt.Sprintf(`{"id":%q,"runId":%q,"name":%s,"timestamp":"%s.000Z"}`, queryID, runID, n, ts)
}

var batch int64

// cdcProgressJSON is a listener-form progress whose CDC source ends at
// commitTS (naive UTC).
func cdcProgressJSON(queryID, runID, name, commitTS string) string {
	batch++
	n := "null"
	if name != "" {
		n = fmt.Sprintf("%q", name)
	}
	return fmt.Sprintf(`{"id":%q,"runId":%q,"name":%s,"timestamp":"2026-09-28T15:00:00.000Z","batchId":%d,"numInputRows":10,"inputRowsPerSecond":1.0,"processedRowsPerSecond":2.0,"durationMs":{"addBatch":100,"triggerExecution":120},"stateOperators":[],"sources":[{"description":"SqlServerCdc[dbo.orders]","startOffset":null,"endOffset":{"lsn":"0x00000027000001a80003","commit_ts":%q},"latestOffset":null,"numInputRows":10,"inputRowsPerSecond":1.0,"processedRowsPerSecond":2.0,"metrics":{}}],"sink":{"description":"DeltaSink[bronze.orders]","numOutputRows":10,"metrics":{}},"observedMetrics":{}}`,
		queryID, runID, n, batch, commitTS)
}

func terminatedJSON(queryID, runID string) string {
	return fmt.Sprintf(`{"id":%q,"runId":%q,"exception":null,"errorClassOnException":null}`, queryID, runID)
}

func idleJSON(queryID, runID string) string {
	return fmt.Sprintf(`{"id":%q,"runId":%q,"timestamp":"2026-09-28T15:00:10.000Z"}`, queryID, runID)
}

// row is a control-table row as the tests read it with SQL.
type row struct {
	FinalizedUntil time.Time
	BatchID        int64
	RunID          string
	UpdatedAt      time.Time
}

// readRow reads a table's row; ok is false when there is none.
func readRow(t *testing.T, pgURL, table string) (row, bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, pgURL)
	if err != nil {
		t.Fatalf("connect postgres: %v", err)
	}
	defer conn.Close(ctx)
	var r row
	// A rewind (or a verdict held before its first progress) leaves no
	// batch or run on the row: NULL reads as zero, not as a failed test.
	err = conn.QueryRow(ctx, `SELECT /* test */ finalized_until, coalesce(batch_id, 0), coalesce(run_id, ''), updated_at FROM public.table_finalization WHERE table_name = $1`, table).
		Scan(&r.FinalizedUntil, &r.BatchID, &r.RunID, &r.UpdatedAt)
	if err == pgx.ErrNoRows {
		return row{}, false
	}
	if err != nil {
		t.Fatalf("read row: %v", err)
	}
	r.FinalizedUntil = r.FinalizedUntil.UTC()
	return r, true
}

// waitVerdict polls the control table until table's verdict equals want.
func waitVerdict(t *testing.T, pgURL, table, want string) row {
	t.Helper()
	w := utc(want)
	deadline := time.Now().Add(20 * time.Second)
	var last row
	for time.Now().Before(deadline) {
		r, ok := readRow(t, pgURL, table)
		if ok && r.FinalizedUntil.Equal(w) {
			return r
		}
		last = r
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("%s: verdict %v, want %v", table, last.FinalizedUntil, w)
	return row{}
}

// getJSON GETs url and decodes the JSON body into v; it returns the status.
func getJSON(t *testing.T, url string, v any) int {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if v != nil && len(body) > 0 {
		if err := json.Unmarshal(body, v); err != nil && resp.Header.Get("Content-Type") == "application/json" {
			t.Fatalf("GET %s: %v: %s", url, err, body)
		}
	}
	return resp.StatusCode
}

func utc(s string) time.Time {
	t, err := time.Parse(time.RFC3339, s)
	if err != nil {
		panic(err)
	}
	return t
}

// eventually polls cond until it holds or 20 s pass.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// logged waits until serve's stderr holds substr. A line logged before an
// effect the test saw (a 503, a metric, a verdict) can reach the test after
// it: stderr is copied through a pipe, so a single read right after the
// effect is a flaky test, not a missing log line.
func (p *proc) logged(t *testing.T, what, substr string) {
	t.Helper()
	eventually(t, what+" in the log", func() bool { return strings.Contains(p.stderr.String(), substr) })
}

// countWrites counts the control-table statements the service executed,
// from its /metrics.
func metric(t *testing.T, httpURL, name string) float64 {
	t.Helper()
	resp, err := http.Get(httpURL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	var sum float64
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, name+" ") || strings.HasPrefix(line, name+"{") {
			var v float64
			fields := strings.Fields(line)
			fmt.Sscan(fields[len(fields)-1], &v)
			sum += v
		}
	}
	return sum
}

// openDir returns a new directory that the postgres OS user can traverse
// (t.TempDir is 0700), for a managed cluster started by serve as root.
func openDir(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "finalizer-e2e-")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

// portFree reports whether addr can be listened on.
func portFree(addr string) bool {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return false
	}
	ln.Close()
	return true
}

// metricText returns the service's /metrics page.
func metricText(t *testing.T, httpURL string) string {
	t.Helper()
	resp, err := http.Get(httpURL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return string(b)
}

// grep returns the lines of s that contain sub.
func grep(s, sub string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}
