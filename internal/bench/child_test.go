package bench

import (
	"context"
	"fmt"
	neturl "net/url"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/finalizer-dev/finalizer/internal/pgcluster/pgtest"
)

// TestServiceProcess runs the bench with --service-process: the service
// as a `finalizer serve` child process, built here (the test binary is
// not the finalizer binary).
func TestServiceProcess(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("--service-process reads /proc")
	}
	bin := filepath.Join(t.TempDir(), "finalizer")
	if out, err := exec.Command("go", "build", "-o", bin, "../../cmd/finalizer").CombinedOutput(); err != nil {
		t.Fatalf("go build ./cmd/finalizer: %v\n%s", err, out)
	}
	t.Run("bench", func(t *testing.T) { testServiceProcessBench(t, bin) })
	t.Run("cancelled", func(t *testing.T) { testServiceProcessCancelled(t, bin) })
}

// testServiceProcessBench runs the bench with the service as a
// `finalizer serve` child process on a small configuration, and asserts
// what the in-process bench asserts of correctness: every verdict heard,
// one control write per (table, period), nothing dropped, retried or
// failed; and of the process: its resident set and CPU read from /proc,
// its exit code 0 on SIGTERM at both stops (the restart's and the end's).
func testServiceProcessBench(t *testing.T, bin string) {
	cfg := Config{
		Runs:           60,
		IngestPerRun:   10,
		Rate:           200,
		Duration:       2 * time.Second,
		Idle:           2 * time.Second,
		RawRounds:      1,
		PostgresURL:    pgtest.URL(t),
		WaitTimeout:    time.Minute,
		ServiceProcess: true,
		ServiceBinary:  bin,
	}
	// The PostgreSQL URL's password reaches the child through its config
	// file only (0600): never its argv or environment, which other users
	// of the machine read in /proc, nor the bench's output or the
	// service's log.
	cfg.WorkDir = t.TempDir()
	password := ""
	if u, err := neturl.Parse(cfg.PostgresURL); err == nil {
		password, _ = u.User.Password()
	}
	var pids []int
	var exposed []string
	cfg.OnServiceProcess = func(pid int) {
		pids = append(pids, pid)
		for _, f := range []string{"cmdline", "environ"} {
			b, err := os.ReadFile(fmt.Sprintf("/proc/%d/%s", pid, f))
			if err != nil {
				exposed = append(exposed, fmt.Sprintf("%s unread: %v", f, err))
			} else if password != "" && strings.Contains(string(b), password) {
				exposed = append(exposed, f)
			}
		}
	}
	res, log := runBench(t, cfg, 3*time.Minute)
	var table strings.Builder
	if err := res.WriteTable(&table); err != nil {
		t.Fatal(err)
	}
	t.Log("\n" + table.String() + string(res.JSON()))
	if res.Mode != ModeServiceProcess {
		t.Errorf("mode %q, want %q", res.Mode, ModeServiceProcess)
	}
	// A fast ingest may skip a period's verdict for a later one: at most
	// one write per (table, period), as in process.
	if res.IngestEventsPerSec <= 0 || res.IngestWritesPerPeriod > 1 || res.IngestWritesPerPeriod <= 0 {
		t.Errorf("ingest: accepted %.0f/s, %.3f writes per (table, period); want some, at most 1.00", res.IngestEventsPerSec, res.IngestWritesPerPeriod)
	}
	if l := res.Latency; l.Probes == 0 || l.Missing != 0 || l.WritesPerPeriod != 1 {
		t.Errorf("latency phase: %d crossings measured, %d missing, %.3f writes per (table, period); want some, none, 1.00",
			l.Probes, l.Missing, l.WritesPerPeriod)
	}
	if res.TrackSeconds <= 0 || res.FirstVerdictsSeconds <= 0 || res.BurstSeconds <= 0 || res.RecoverySeconds <= 0 || res.RecoveryStartSeconds <= 0 {
		t.Errorf("track %.3f s, first verdicts %.3f s, burst %.3f s, recovery %.3f s (start %.3f s): a phase did not run",
			res.TrackSeconds, res.FirstVerdictsSeconds, res.BurstSeconds, res.RecoverySeconds, res.RecoveryStartSeconds)
	}
	if res.ServiceBaseRSSMiB <= 0 || res.ServiceRSSMiB <= 0 {
		t.Errorf("the service process's VmRSS: %.1f MiB ready, %.1f MiB with the runs; want both read", res.ServiceBaseRSSMiB, res.ServiceRSSMiB)
	}
	if i := res.Idle; i == nil || i.IdleEventsSent == 0 || i.IdleEventsAccepted != int64(i.IdleEventsSent) || i.GeneratorCoreShare <= 0 {
		t.Errorf("idle phase: %+v; want every idle event taken in and the generator measured", i)
	}
	if len(res.ServiceExitCodes) != 2 || res.ServiceExitCodes[0] != 0 || res.ServiceExitCodes[1] != 0 {
		t.Errorf("the service process's exit codes on SIGTERM: %v, want [0 0]", res.ServiceExitCodes)
	}
	if res.NATSSlowConsumer != 0 || res.NATSDropped != 0 || res.NATSDisconnects != 0 || res.AdvanceRetries != 0 || res.AdvanceFailures != 0 {
		t.Errorf("slow consumer %d, dropped %d, disconnects %d, retries %d, failures %d; want none",
			res.NATSSlowConsumer, res.NATSDropped, res.NATSDisconnects, res.AdvanceRetries, res.AdvanceFailures)
	}
	if password == "" {
		t.Log("the test's PostgreSQL URL has no password: its exposure is not checked")
	}
	if len(exposed) > 0 {
		t.Errorf("the PostgreSQL password in the service process's %v", exposed)
	}
	if fi, err := os.Stat(filepath.Join(cfg.WorkDir, "service.yaml")); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("service.yaml: %v, %v; want mode 0600", fi, err)
	}
	svcLog, err := os.ReadFile(filepath.Join(cfg.WorkDir, "service.log"))
	if err != nil || len(svcLog) == 0 {
		t.Errorf("service.log: %d bytes, %v", len(svcLog), err)
	}
	if password != "" {
		for what, text := range map[string]string{"the bench's output": log, "the JSON": string(res.JSON()), "service.log": string(svcLog)} {
			if strings.Contains(text, password) {
				t.Errorf("the PostgreSQL password in %s", what)
			}
		}
	}
	if len(pids) != 2 {
		t.Errorf("service processes started: %v, want 2", pids)
	}
	if t.Failed() {
		// The service's warnings and errors name the cause (a retried
		// advance's, a disconnect's).
		for _, line := range strings.Split(string(svcLog), "\n") {
			if strings.Contains(line, `"level":"warn"`) || strings.Contains(line, `"level":"error"`) {
				t.Log(line)
			}
		}
	}
	for _, pid := range pids {
		if alive(pid) {
			t.Errorf("service process %d still runs after the bench", pid)
		}
	}
}

// testServiceProcessCancelled cancels the bench while the service process
// starts and while it runs: Run returns an error and no service process
// outlives it.
func testServiceProcessCancelled(t *testing.T, bin string) {
	url := pgtest.URL(t)
	for _, after := range []time.Duration{0, 1500 * time.Millisecond} {
		t.Run(after.String(), func(t *testing.T) {
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			var (
				mu    sync.Mutex
				pids  []int
				timer *time.Timer
			)
			cfg := Config{
				Runs: 200, IngestPerRun: 50, Duration: 10 * time.Second, RawRounds: 1, PostgresURL: url,
				WaitTimeout: time.Minute, ServiceProcess: true, ServiceBinary: bin,
				OnServiceProcess: func(pid int) {
					mu.Lock()
					defer mu.Unlock()
					pids = append(pids, pid)
					if after == 0 {
						cancel()
						return
					}
					if timer == nil {
						timer = time.AfterFunc(after, cancel)
					}
				},
			}
			_, err := Run(ctx, cfg)
			mu.Lock()
			if timer != nil {
				timer.Stop()
			}
			started := append([]int(nil), pids...)
			mu.Unlock()
			if err == nil {
				t.Fatal("the bench succeeded, want the cancellation's error")
			}
			if len(started) == 0 {
				t.Fatalf("no service process started: %v", err)
			}
			for _, pid := range started {
				if alive(pid) {
					t.Errorf("service process %d survives the cancelled bench (%v)", pid, err)
				}
			}
		})
	}
}

// TestParseMetrics reads the text format as /metrics serves it.
func TestParseMetrics(t *testing.T) {
	in := `# HELP finalizer_events_total x
# TYPE finalizer_events_total counter
finalizer_events_total{kind="progress",outcome="accepted"} 120
finalizer_events_total{kind="progress",outcome="superseded"} 3
finalizer_events_total{kind="idle",outcome="accepted"} 7
finalizer_events_total{kind="progress",outcome="malformed"} 1
finalizer_tracked_runs 60
`
	m, err := parseMetrics(strings.NewReader(in))
	if err != nil {
		t.Fatal(err)
	}
	if got := m["finalizer_tracked_runs"]; len(got) != 1 || got[0].value != 60 {
		t.Errorf("tracked runs: %+v", got)
	}
	var acc, idle, bad float64
	for _, s := range m["finalizer_events_total"] {
		switch k, o := label(s.labels, "kind"), label(s.labels, "outcome"); {
		case !taken(o):
			bad += s.value
		case k == "progress":
			acc += s.value
		case k == "idle":
			idle += s.value
		}
	}
	if acc != 123 || idle != 7 || bad != 1 {
		t.Errorf("accepted %v, idle %v, dropped %v; want 123, 7, 1", acc, idle, bad)
	}
	if procRSS(os.Getpid()) == 0 && runtime.GOOS == "linux" {
		t.Error("procRSS of this process: 0")
	}
}
