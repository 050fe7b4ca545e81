package bench

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/finalizer-dev/finalizer/listener"
	"github.com/finalizer-dev/finalizer/progress"
)

// childService is the service under measure as an operator runs it: the
// `finalizer serve` binary in a process of its own (--service-process),
// pointed at the bench's NATS server (external to it, as in production)
// and PostgreSQL through a config file in the work dir. Its figures come
// from the operating system (/proc/<pid>: resident set, CPU time) and from
// its own surface: /metrics for the counters, the track API over NATS,
// its exit code on SIGTERM.
type childService struct {
	cmd     *exec.Cmd
	pid     int
	exited  chan struct{} // closed once cmd.Wait returned (its goroutine's end)
	waitErr error         // cmd.Wait's, set before exited is closed
	logPath string
	http    *http.Client
	base    string // http://127.0.0.1:<port>
	pub     trackRequester

	startedIn time.Duration // from the exec to /healthz answering

	mu      sync.Mutex
	scraped time.Time
	samples map[string][]sample // the counters of the last scrape
}

// trackRequester sends a request over NATS and returns the reply's data.
type trackRequester func(ctx context.Context, subject string, data []byte) ([]byte, error)

// sample is one series of a scrape: its labels as the text format prints
// them ("kind=\"progress\",outcome=\"accepted\"") and its value.
type sample struct {
	labels string
	value  float64
}

// childScrape is how old a scrape may be before a read makes a new one:
// the blast's window and the waits poll the counters far more often (the
// in-process counters are atomics), and a scrape costs the child an HTTP
// request. 2 ms (500 scrapes a second during an ingest) took CPU from the
// child's ingest; 20 ms still refreshes the window (10,000 messages) many
// times over before the publisher could run through it.
const childScrape = 20 * time.Millisecond

// childCounters are the families every scrape asks for: all in the
// service's Counters registry, so that a scrape costs the same at any
// number of tables.
var childCounters = []string{
	"finalizer_events_total", "finalizer_control_writes_total", "finalizer_advance_retries_total",
	"finalizer_advance_failures_total", "finalizer_tracked_runs",
	"finalizer_nats_slow_consumer_total", "finalizer_nats_dropped_messages_total", "finalizer_nats_disconnects_total",
}

// childConfig is what startChild needs.
type childConfig struct {
	Binary   string // the finalizer binary; "" = this executable
	WorkDir  string // the config file, the service's data dir and its log go here
	Config   serveConfig
	Timeout  time.Duration // bound of the start (exec to /healthz)
	Request  trackRequester
	OnChild  func(pid int) // called once the child runs (tests)
	LogLines int           // lines of the log an error quotes
}

// serveConfig is the part of `finalizer serve`'s YAML config the bench
// sets (cmd/finalizer's Config).
type serveConfig struct {
	NATS struct {
		URL string `yaml:"url"`
	} `yaml:"nats"`
	Postgres struct {
		URL string `yaml:"url"`
	} `yaml:"postgres"`
	ControlTable string `yaml:"control_table"`
	Prefix       string `yaml:"subject_prefix"`
	Stream       struct {
		MaxBytes int64 `yaml:"max_bytes,omitempty"`
	} `yaml:"stream"`
	HTTP struct {
		Listen string `yaml:"listen"`
	} `yaml:"http"`
	DataDir string `yaml:"data_dir"`
	Log     struct {
		Format string `yaml:"format"`
		Level  string `yaml:"level"`
	} `yaml:"log"`
	Tracking struct {
		MaxTrackers    int     `yaml:"max_trackers"`
		MemoryLimit    string  `yaml:"memory_limit,omitempty"`
		MemoryHeadroom float64 `yaml:"memory_headroom,omitempty"`
	} `yaml:"tracking"`
	Tables []serveTable `yaml:"tables,omitempty"`
}

// serveTable is one rule of serveConfig.
type serveTable struct {
	Table                string `yaml:"table"`
	Query                string `yaml:"query"`
	progress.SpecOptions `yaml:",inline"`
}

// freeLoopbackPort returns a TCP port free on 127.0.0.1 a moment ago.
func freeLoopbackPort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// startChild writes the config, starts `finalizer serve` and returns once
// its HTTP API answers /healthz (the last part serve starts, after
// recovery), or an error with the child killed and reaped.
func startChild(ctx context.Context, c childConfig) (*childService, error) {
	bin := c.Binary
	if bin == "" {
		var err error
		if bin, err = os.Executable(); err != nil {
			return nil, fmt.Errorf("service process: %w", err)
		}
	}
	port, err := freeLoopbackPort()
	if err != nil {
		return nil, fmt.Errorf("service process: %w", err)
	}
	cfg := c.Config
	cfg.HTTP.Listen = fmt.Sprintf("127.0.0.1:%d", port)
	cfg.DataDir = filepath.Join(c.WorkDir, "service-data")
	cfg.Log.Format, cfg.Log.Level = "json", "info"
	data, err := yaml.Marshal(cfg)
	if err != nil {
		return nil, err
	}
	// 0600: the PostgreSQL URL may hold a password.
	confPath := filepath.Join(c.WorkDir, "service.yaml")
	if err := os.WriteFile(confPath, data, 0o600); err != nil {
		return nil, err
	}
	logPath := filepath.Join(c.WorkDir, "service.log")
	logf, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	defer logf.Close() // the child holds its own descriptor
	cmd := exec.Command(bin, "serve", "--config", confPath)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.Env = childEnv()
	cmd.SysProcAttr = childProcAttr()
	s := &childService{
		cmd: cmd, exited: make(chan struct{}), logPath: logPath, pub: c.Request,
		// A transport of its own, its idle connections closed when the
		// child is gone (no keep-alive goroutine outlives it).
		http: &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: 2}},
		base: fmt.Sprintf("http://127.0.0.1:%d", port),
	}
	began := time.Now()
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("service process: %w", err)
	}
	s.pid = cmd.Process.Pid
	go func() { // owned by s: kill and stop wait for it
		s.waitErr = cmd.Wait()
		close(s.exited)
	}()
	if c.OnChild != nil {
		c.OnChild(s.pid)
	}
	if err := s.waitHealthy(ctx, c.Timeout); err != nil {
		s.kill()
		return nil, fmt.Errorf("service process: %w%s", err, s.logTail(max(c.LogLines, 20)))
	}
	s.startedIn = time.Since(began)
	return s, nil
}

// childEnv is this process's environment without FINALIZER_* variables:
// serve reads those over its config file, and the bench's config must be
// the one that applies.
func childEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "FINALIZER_") {
			env = append(env, kv)
		}
	}
	return env
}

// waitHealthy polls /healthz until it answers 200, the child exits, ctx
// ends or timeout passes.
func (s *childService) waitHealthy(ctx context.Context, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		select {
		case <-s.exited:
			return fmt.Errorf("serve exited before it was ready: %v", s.waitErr)
		case <-ctx.Done():
			return ctx.Err()
		default:
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("serve not ready after %s", timeout)
		}
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, s.base+"/healthz", nil)
		if resp, err := s.http.Do(req); err == nil {
			_, _ = io.Copy(io.Discard, resp.Body)
			_ = resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// kill kills the child and waits until it is reaped; safe to call on a
// child that already exited, and twice.
func (s *childService) kill() {
	if s.running() {
		_ = s.cmd.Process.Kill()
	}
	<-s.exited
	s.http.CloseIdleConnections()
}

// running reports whether the child has not exited.
func (s *childService) running() bool {
	select {
	case <-s.exited:
		return false
	default:
		return true
	}
}

// stop sends SIGTERM, as an operator's restart does, and waits for the
// exit; past ctx or two minutes it kills the child. It returns the exit
// code (-1 when killed by a signal).
func (s *childService) stop(ctx context.Context) int {
	if s.running() {
		_ = s.cmd.Process.Signal(syscall.SIGTERM)
		t := time.NewTimer(2 * time.Minute)
		defer t.Stop()
		select {
		case <-s.exited:
		case <-t.C:
			s.kill()
		case <-ctx.Done():
			s.kill()
		}
	}
	s.http.CloseIdleConnections()
	return s.cmd.ProcessState.ExitCode()
}

// logTail returns the last n lines of the child's log, as a suffix of an
// error message.
func (s *childService) logTail(n int) string {
	b, err := os.ReadFile(s.logPath)
	if err != nil || len(b) == 0 {
		return ""
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return "\nthe service's log (" + s.logPath + ") ends with:\n" + strings.Join(lines, "\n")
}

// trackExplicit sends the track API's request over NATS, as `finalizer
// track` does.
func (s *childService) trackExplicit(ctx context.Context, sm *sim) error {
	data, err := json.Marshal(listener.TrackRequest{QueryID: sm.queryID, RunID: sm.runID, Table: sm.table, Spec: sm.spec.Options()})
	if err != nil {
		return err
	}
	out, err := s.pub(ctx, listener.DefaultAPIPrefix+".track", data)
	if err != nil {
		return err
	}
	var reply listener.TrackReply
	if err := json.Unmarshal(out, &reply); err != nil {
		return fmt.Errorf("track reply: %w", err)
	}
	if !reply.OK {
		return fmt.Errorf("track %s: %s", sm.table, reply.Error)
	}
	return nil
}

// counters returns the last scrape of childCounters, scraping again when
// it is older than childScrape.
func (s *childService) counters() map[string][]sample {
	s.mu.Lock()
	defer s.mu.Unlock()
	if time.Since(s.scraped) < childScrape && s.samples != nil {
		return s.samples
	}
	if m, err := s.scrape(childCounters); err == nil {
		s.samples, s.scraped = m, time.Now()
	}
	return s.samples
}

// scrape reads the named families from /metrics (?name[]=...).
func (s *childService) scrape(names []string) (map[string][]sample, error) {
	q := make([]string, len(names))
	for i, n := range names {
		q[i] = "name[]=" + n
	}
	resp, err := s.http.Get(s.base + "/metrics?" + strings.Join(q, "&"))
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("/metrics: %s", resp.Status)
	}
	return parseMetrics(resp.Body)
}

// parseMetrics reads Prometheus's text format: every sample by family
// (histograms and summaries are not asked for).
func parseMetrics(r io.Reader) (map[string][]sample, error) {
	out := map[string][]sample{}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Bytes()
		if len(line) == 0 || line[0] == '#' {
			continue
		}
		sp := bytes.LastIndexByte(line, ' ')
		if sp < 0 {
			continue
		}
		v, err := strconv.ParseFloat(string(line[sp+1:]), 64)
		if err != nil {
			continue
		}
		name, labels := string(line[:sp]), ""
		if i := strings.IndexByte(name, '{'); i >= 0 {
			name, labels = name[:i], strings.TrimSuffix(name[i+1:], "}")
		}
		out[name] = append(out[name], sample{labels: labels, value: v})
	}
	return out, sc.Err()
}

func (s *childService) metric(name string) float64 {
	samples, ok := s.counters()[name]
	if !ok {
		for _, n := range childCounters {
			if n == name {
				return 0 // a family without a series yet
			}
		}
		m, err := s.scrape([]string{name})
		if err != nil {
			return 0
		}
		samples = m[name]
	}
	sum := 0.0
	for _, x := range samples {
		sum += x.value
	}
	return sum
}

// events sums finalizer_events_total's series that match: the same
// classes as the in-process bench's OnEvent hook.
func (s *childService) events(match func(kind, outcome string) bool) int64 {
	sum := 0.0
	for _, x := range s.counters()["finalizer_events_total"] {
		kind, outcome := label(x.labels, "kind"), label(x.labels, "outcome")
		if match(kind, outcome) {
			sum += x.value
		}
	}
	return int64(sum)
}

// label returns one label's value from a series' labels as printed.
func label(labels, name string) string {
	i := strings.Index(labels, name+`="`)
	if i < 0 {
		return ""
	}
	v := labels[i+len(name)+2:]
	if j := strings.IndexByte(v, '"'); j >= 0 {
		return v[:j]
	}
	return v
}

func taken(outcome string) bool {
	return outcome == listener.OutcomeAccepted || outcome == listener.OutcomeSuperseded
}

func (s *childService) accepted() int64 {
	return s.events(func(k, o string) bool { return k == progress.KindProgress.String() && taken(o) })
}

func (s *childService) idles() int64 {
	return s.events(func(k, o string) bool { return k == progress.KindIdle.String() && taken(o) })
}

func (s *childService) dropped() int64 {
	return s.events(func(_, o string) bool { return !taken(o) })
}

func (s *childService) timings() (start, retained, recover, own time.Duration) {
	return s.startedIn, 0, 0, 0
}

func (s *childService) connStats() (slow, dropped, disconnects int64) {
	return int64(s.metric("finalizer_nats_slow_consumer_total")), int64(s.metric("finalizer_nats_dropped_messages_total")),
		int64(s.metric("finalizer_nats_disconnects_total"))
}

// rss returns the child's resident set (VmRSS), 0 when unknown.
func (s *childService) rss() uint64 { return procRSS(s.pid) }

// cpu returns the child's user and system CPU time so far.
func (s *childService) cpu() time.Duration { return procCPU(s.pid) }

// switches returns the service process's context switches so far.
func (s *childService) switches() int64 { return procSwitches(s.pid) }

// errNoChild is returned where --service-process cannot run.
var errNoChild = errors.New("--service-process needs Linux (/proc)")
