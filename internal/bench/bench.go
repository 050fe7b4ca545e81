package bench

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"runtime/trace"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/nats-io/nats.go"
	"go.uber.org/zap"

	"github.com/finalizer-dev/finalizer/finalizer"
	"github.com/finalizer-dev/finalizer/internal/actions"
	"github.com/finalizer-dev/finalizer/internal/embeddednats"
	"github.com/finalizer-dev/finalizer/internal/pgcluster"
	"github.com/finalizer-dev/finalizer/listener"
	"github.com/finalizer-dev/finalizer/progress"
)

// Defaults of Config.
const (
	// DefaultRuns is the number of simulated runs.
	DefaultRuns = 1000
	// DefaultTracking tracks half of the runs explicitly and half by rule.
	DefaultTracking = "mixed"
	// DefaultIngestPerRun is how many progress events each run publishes in
	// the ingest phase, up to DefaultIngestEvents events in all (see
	// IngestPerRunFor).
	DefaultIngestPerRun = 20
	// DefaultIngestEvents bounds the ingest phase's events when the
	// events per run are not set: at 100,000 runs, 10 per run (1M events,
	// as issue 12's outside measurement).
	DefaultIngestEvents = 1_000_000
	// minIngestPerRun is the fewest events per run the default gives.
	minIngestPerRun = 2
	// DefaultRate is the background load of the latency phase, events/s.
	DefaultRate = 1000
	// DefaultDuration is the length of the latency phase.
	DefaultDuration = 10 * time.Second
	// DefaultPerPeriod is how many progress events of a run fall in one
	// period: a 10 s trigger with minute periods.
	DefaultPerPeriod = 6
	// DefaultWindow is how many messages the ingest publisher may be ahead
	// of the consumer, so that neither side is cut off as a slow consumer.
	DefaultWindow = 10_000
	// DefaultRawRounds is how many times the raw delivery is measured.
	DefaultRawRounds = 3
	// DefaultWaitTimeout bounds every wait for verdicts, or
	// waitPerRun per run when that is longer.
	DefaultWaitTimeout = 5 * time.Minute
	waitPerRun         = 5 * time.Millisecond
	// prefix is the event subject prefix.
	prefix = listener.DefaultPrefix
)

// Config configures Run. Zero values take the defaults above.
type Config struct {
	// Runs is N, the number of simulated runs, each with its own query id,
	// run id and table.
	Runs int
	// Tracking is "mixed" (half explicit, half by rule), "explicit" or
	// "rule".
	Tracking string
	// IngestPerRun is the number of progress events per run in the ingest
	// phase (N * IngestPerRun messages in all); 0 = IngestPerRunFor(N).
	IngestPerRun int
	// Rate is the background load of the latency phase, in events/s.
	Rate float64
	// Duration is the length of the latency phase.
	Duration time.Duration
	// Idle is the length of each measured window of the idle phase
	// (every run posts one event every IdleInterval, the process's CPU is
	// measured); 0 skips it.
	Idle time.Duration
	// IdleRounds is how many times the idle phase measures each of its
	// windows (0: DefaultIdleRounds); the result is the median, with
	// every round's figure beside it.
	IdleRounds int
	// IdleOnly skips the raw delivery and every phase after the first
	// verdicts but the idle phase (no restart, no naive baseline): to
	// measure the idle cost alone.
	IdleOnly bool
	// RestartOnly skips the phases between the first verdicts and the
	// restart (ingest, latency, burst, feeders, idle), to measure tracking
	// and the restart's recovery at sizes whose whole bench would not fit
	// in a short hold of a shared machine.
	RestartOnly bool
	// BurstOnly skips the raw delivery and every phase after the first
	// verdicts but the burst (Bursts of them, one boundary after the
	// other), the restart and the naive baseline: to measure the burst
	// alone, e.g. to iterate on the group commit.
	BurstOnly bool
	// LatencyOnly skips the raw delivery and every phase after the first
	// verdicts but the latency phase (no ingest, burst, feeders, idle,
	// restart or naive baseline): to measure the latency tail alone, a
	// round in a short run.
	LatencyOnly bool
	// StreamMaxBytes bounds the JetStream stream the bench's service
	// makes; 0 means listener.DefaultMaxBytes, as serve's default. To
	// measure what the stream at its bound costs the event path.
	StreamMaxBytes int64
	// NoFlush skips the flush before every latency phase (VACUUM ANALYZE
	// of the bench's tables, a CHECKPOINT and sync(2): see
	// flushBeforeLatency), to measure the phase with
	// what the phases before it wrote still dirty, as before the ninth
	// pass of the latency tail.
	NoFlush bool
	// CommitProbeRate is how many lone commits a second the commit probe
	// makes beside every latency phase (0: DefaultCommitProbeRate), to
	// measure PostgreSQL's and the disk's commit in the phase's window
	// (commitProbe); NoCommitProbe turns it off.
	CommitProbeRate float64
	NoCommitProbe   bool
	// NoBurstFloor skips the burst's floor after the burst phase (the
	// burst's advances applied by the store alone: burstFloor).
	NoBurstFloor bool
	// Bursts is how many bursts the burst phase runs, each crossing the
	// next boundary (0: 1). The result's burst is the first one's; every
	// one's is in BurstRounds.
	Bursts int
	// PerPeriod is the number of progress events per run and period.
	PerPeriod int
	// Window bounds how far the ingest publisher runs ahead of the consumer.
	Window int
	// RawRounds is how many times the raw delivery rate is measured (on the
	// same messages, the stream purged in between); the best counts, so
	// that noise on the machine cannot flatter the ingest ratio.
	RawRounds int
	// PostgresURL is the PostgreSQL to use; "" starts a throwaway cluster
	// (the local installation, as `serve` does) and removes it afterwards.
	// The bench works in a schema of its own, bench_<tag>, dropped at the end.
	PostgresURL string
	// PostgresSettings are extra server settings of the throwaway cluster
	// (e.g. "synchronous_commit": "off"); none by default, as `serve` runs
	// its managed cluster.
	PostgresSettings map[string]string
	// WorkDir holds the NATS store and the throwaway cluster; "" means a
	// new temporary directory, removed afterwards.
	WorkDir string
	// Naive runs the naive baseline too.
	Naive bool
	// NoGroupCommit turns the group commit of advances off (ADR 0008), to
	// measure what it changes.
	NoGroupCommit bool
	// MaxBatch and Workers override the registry's group size and worker
	// pool (0: the service's defaults), to measure the burst at other
	// sizes (issue 12).
	MaxBatch, Workers int
	// MemoryLimit is the service's soft memory limit (package memlimit,
	// ADR 0022): "" or "auto" as serve sets it, "off" the Go runtime's
	// default. MemoryHeadroom, when positive, replaces its headroom (a
	// share of the live heap), to measure other settings. MemorySurge,
	// when positive, is its headroom during a burst (memlimit.Options.
	// SurgeHeadroom, off in serve; in process only).
	MemoryLimit    string
	MemoryHeadroom float64
	MemorySurge    float64
	// Actions gives every bench table an action (issue 19): "" none,
	// "nats" (the JetStream event) or "marker" (a file under the work
	// dir), to measure what actions cost the hot path.
	Actions string
	// ProfileDir, when set, receives a CPU, an allocation, a block and a
	// mutex profile per phase (cpu-, allocs-, block-, mutex-<phase>.pprof;
	// allocs-<phase>.base.pprof is the allocations before the phase) and
	// a heap profile after tracking (heap.pprof).
	ProfileDir string
	// Trace also writes an execution trace per phase to ProfileDir
	// (trace-<phase>.out), for the time spent waiting on the network.
	Trace bool
	// WaitTimeout bounds each wait for verdicts; 0 means DefaultWaitTimeout
	// or 5 ms per run, whichever is longer.
	WaitTimeout time.Duration
	// ServiceProcess measures the service as an operator runs it: the
	// `finalizer serve` binary (ServiceBinary, or this executable) in a
	// process of its own, against the bench's NATS server (external to
	// it, hosted by the bench with the publisher and the observer) and
	// PostgreSQL, configured by a file in the work dir and logging to
	// service.log there. Its resident set and CPU come from /proc, its
	// counters from /metrics, its restart is SIGTERM and a new process.
	// Not with Actions, NoGroupCommit, MaxBatch or Workers (serve has no
	// setting for them).
	ServiceProcess bool
	// ServiceBinary is the finalizer binary ServiceProcess runs; "" is
	// os.Executable().
	ServiceBinary string
	// OnServiceProcess, when set, is called with the pid of every
	// service process started (tests).
	OnServiceProcess func(pid int)
	// Logger receives the service's logs; nil discards them.
	Logger *zap.Logger
	// Log receives one line per phase; nil discards them.
	Log io.Writer
}

func (c Config) withDefaults() Config {
	if c.Runs <= 0 {
		c.Runs = DefaultRuns
	}
	if c.Tracking == "" {
		c.Tracking = DefaultTracking
	}
	if c.IngestPerRun <= 0 {
		c.IngestPerRun = IngestPerRunFor(c.Runs)
	}
	if c.Rate <= 0 {
		c.Rate = DefaultRate
	}
	if c.Duration <= 0 {
		c.Duration = DefaultDuration
	}
	if c.CommitProbeRate <= 0 {
		c.CommitProbeRate = DefaultCommitProbeRate
	}
	if c.PerPeriod <= 0 {
		c.PerPeriod = DefaultPerPeriod
	}
	if c.Window <= 0 {
		c.Window = DefaultWindow
	}
	if c.RawRounds <= 0 {
		c.RawRounds = DefaultRawRounds
	}
	if c.Bursts <= 0 {
		c.Bursts = 1
	}
	if c.WaitTimeout <= 0 {
		c.WaitTimeout = max(DefaultWaitTimeout, time.Duration(c.Runs)*waitPerRun)
	}
	if c.Logger == nil {
		c.Logger = zap.NewNop()
	}
	if c.Log == nil {
		c.Log = io.Discard
	}
	return c
}

// IngestPerRunFor is the default of Config.IngestPerRun for n runs:
// DefaultIngestPerRun, fewer (at least 2) when the ingest phase would
// exceed DefaultIngestEvents.
func IngestPerRunFor(n int) int {
	if n <= 0 {
		return DefaultIngestPerRun
	}
	return min(DefaultIngestPerRun, max(minIngestPerRun, DefaultIngestEvents/n))
}

// Validate reports a Config that cannot run.
func (c Config) Validate() error {
	switch c.Tracking {
	case "", "mixed", "explicit", "rule":
	default:
		return fmt.Errorf("tracking %q: want mixed, explicit or rule", c.Tracking)
	}
	switch c.MemoryLimit {
	case "", "auto", "off":
	default:
		return fmt.Errorf("memory-limit %q: want auto or off", c.MemoryLimit)
	}
	switch c.Actions {
	case "", "nats", "marker":
	default:
		return fmt.Errorf("actions %q: want nats or marker", c.Actions)
	}
	if c.CommitProbeRate < 0 || c.CommitProbeRate > 1000 {
		return fmt.Errorf("commit-probe-rate %g: want 0 (none) to 1000 commits a second", c.CommitProbeRate)
	}
	if c.PerPeriod == 1 {
		return errors.New("per-period must be at least 2: every event would cross a period")
	}
	if c.PerPeriod > 0 && 60%c.PerPeriod != 0 {
		return fmt.Errorf("per-period %d: must divide 60 (seconds of a minute)", c.PerPeriod)
	}
	if c.ServiceProcess {
		switch {
		case !childSupported:
			return errNoChild
		case c.Actions != "" || c.NoGroupCommit || c.MaxBatch != 0 || c.Workers != 0:
			return errors.New("service-process: not with actions, no-group-commit, max-batch or workers (serve has no setting for them)")
		}
	}
	if only := btoi(c.BurstOnly) + btoi(c.RestartOnly) + btoi(c.IdleOnly) + btoi(c.LatencyOnly); only > 1 {
		return errors.New("burst-only, restart-only, idle-only and latency-only: choose one")
	}
	if c.IdleOnly && c.Idle <= 0 {
		return errors.New("idle-only needs the idle windows' length: give --idle, e.g. --idle 10s")
	}
	if c.IdleRounds < 0 {
		return errors.New("idle-rounds must not be negative")
	}
	return nil
}

// runner holds one invocation's state.
type runner struct {
	cfg       Config
	tag       uint32
	clk       clock
	sims      []*sim
	work      string
	natsSrv   *embeddednats.Server
	natsURL   string
	pgc       *pgcluster.Cluster
	pgURL     string
	schema    string
	pub       *nats.Conn
	obs       *observer
	child     *childService // the running service process (ServiceProcess)
	buf       []byte
	rr        int    // round-robin position of the paced publisher
	rrLatency int    // rr when the service's latency phase began
	stored    uint64 // the stream's last sequence, as waitStored last saw it
	res       Result

	// feedersPeriod, when set (tests), runs before each measured period
	// of the feeders phase, with the phase's control table.
	feedersPeriod func(ctx context.Context, table string, period int)
}

// Run runs every phase and returns the results. It blocks for the whole
// bench and cleans up after itself (servers stopped, schema dropped, work
// directory removed) whether it succeeds or not.
func Run(ctx context.Context, cfg Config) (res *Result, err error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	var tb [4]byte
	if _, err := rand.Read(tb[:]); err != nil {
		return nil, err
	}
	r := &runner{cfg: cfg, tag: binary.BigEndian.Uint32(tb[:])}
	r.schema = fmt.Sprintf("bench_%08x", r.tag)
	r.clk = clock{
		base:      time.Now().Add(-48 * time.Hour).Truncate(time.Minute),
		step:      time.Minute / time.Duration(cfg.PerPeriod),
		perPeriod: int64(cfg.PerPeriod),
	}
	simsFrom := liveHeap()
	if r.sims, err = newSims(cfg.Runs, r.tag, prefix, cfg.Tracking, r.clk.perPeriod); err != nil {
		return nil, err
	}
	r.res = Result{
		Runs: cfg.Runs, Tracking: cfg.Tracking, CPUs: runtime.NumCPU(), GoVersion: runtime.Version(),
		IngestPerRun: cfg.IngestPerRun, Rate: cfg.Rate, DurationSeconds: cfg.Duration.Seconds(), PerPeriod: cfg.PerPeriod,
		Mode: ModeInProcess,
	}
	if cfg.ServiceProcess {
		r.res.Mode = ModeServiceProcess
	}
	r.res.SimsHeapPerRunKiB = (float64(liveHeap()) - float64(simsFrom)) / float64(cfg.Runs) / 1024
	total := 0
	for _, s := range r.sims {
		total += s.msgLen
	}
	r.res.MsgBytes = total / len(r.sims)

	r.res.LoadBefore = loadAverage()
	defer func() {
		if cerr := r.teardown(); cerr != nil && err == nil {
			err = cerr
		}
	}()
	if err := r.setup(ctx); err != nil {
		return nil, err
	}
	if err := r.runService(ctx); err != nil {
		return nil, err
	}
	if cfg.Naive && !cfg.BurstOnly && !cfg.IdleOnly && !cfg.LatencyOnly {
		if err := r.runNaive(ctx); err != nil {
			return nil, err
		}
	}
	r.res.LoadAfter = loadAverage()
	r.res.ratios()
	out := r.res
	return &out, nil
}

func (r *runner) say(format string, args ...any) {
	fmt.Fprintf(r.cfg.Log, "bench: "+format+"\n", args...)
}

// setup starts NATS and PostgreSQL, the publisher and the observer.
func (r *runner) setup(ctx context.Context) error {
	var err error
	r.work = r.cfg.WorkDir
	if r.work == "" {
		if r.work, err = os.MkdirTemp("", "finalizer-bench-"); err != nil {
			return err
		}
		// When root, the cluster runs as postgres, which must traverse it.
		if err := os.Chmod(r.work, 0o711); err != nil {
			return err
		}
	}
	r.natsSrv, err = embeddednats.Start(embeddednats.Options{
		Port: embeddednats.RandomPort, StoreDir: filepath.Join(r.work, "nats"), Logger: r.cfg.Logger.Named("nats-server"),
	})
	if err != nil {
		return err
	}
	r.natsURL = r.natsSrv.ClientURL()
	r.pgURL = r.cfg.PostgresURL
	if r.pgURL == "" {
		r.say("starting a throwaway PostgreSQL cluster under %s", r.work)
		r.pgc, err = pgcluster.Start(ctx, pgcluster.Options{Dir: filepath.Join(r.work, "postgres"), Logger: r.cfg.Logger.Named("postgres"),
			Settings: r.cfg.PostgresSettings})
		if err != nil {
			return err
		}
		r.pgURL = r.pgc.URL()
	}
	conn, err := pgx.Connect(ctx, r.pgURL)
	if err != nil {
		return fmt.Errorf("postgresql: %w", err)
	}
	var version string
	if err := conn.QueryRow(ctx, "SHOW server_version").Scan(&version); err == nil {
		r.res.Postgres = strings.Fields(version)[0]
	}
	_ = conn.Close(ctx)
	if r.pub, err = nats.Connect(r.natsURL, nats.Name("finalizer-bench-publisher")); err != nil {
		return fmt.Errorf("publisher: %w", err)
	}
	if r.obs, err = startObserver(ctx, r.pgURL); err != nil {
		return err
	}
	return nil
}

// teardown stops and removes everything setup made. It blocks.
func (r *runner) teardown() error {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var errs []error
	if r.child != nil {
		// An error path: no service process outlives the bench.
		r.child.kill()
		r.child = nil
	}
	if r.obs != nil {
		r.obs.close()
	}
	if r.pub != nil {
		r.pub.Close()
	}
	if r.natsSrv != nil {
		r.natsSrv.Shutdown()
	}
	switch {
	case r.pgc != nil:
		errs = append(errs, r.pgc.Stop(ctx))
		errs = append(errs, pgcluster.Remove(ctx, r.pgc.Dir()))
	case r.pgURL != "":
		if conn, err := pgx.Connect(ctx, r.pgURL); err == nil {
			_, err = conn.Exec(ctx, "DROP SCHEMA IF EXISTS "+pgx.Identifier{r.schema}.Sanitize()+" CASCADE")
			errs = append(errs, err)
			_ = conn.Close(ctx)
		}
	}
	if r.cfg.WorkDir == "" && r.work != "" {
		errs = append(errs, os.RemoveAll(r.work))
	}
	return errors.Join(errs...)
}

// rules are the declarative rules of the ruled runs.
func (r *runner) rules() []finalizer.Rule {
	var rules []finalizer.Rule
	seen := map[sourceKind]bool{}
	for _, s := range r.sims {
		if !s.rule || seen[s.source] {
			continue
		}
		seen[s.source] = true
		kind := "cdc"
		if s.source == sourceKafka {
			kind = "kafka"
		}
		rules = append(rules, finalizer.Rule{Table: "bench.{name}", Query: fmt.Sprintf("b%08x-%s-*", r.tag, kind), Spec: s.spec})
	}
	return rules
}

// startUnderTest starts the service under measure: in this process, or
// as a `finalizer serve` child (ServiceProcess, then r.child).
func (r *runner) startUnderTest(ctx context.Context) (underTest, error) {
	if !r.cfg.ServiceProcess {
		svc, err := startService(ctx, r.serviceConfig())
		if err != nil {
			return nil, err
		}
		return svc, nil
	}
	var c serveConfig
	c.NATS.URL, c.Postgres.URL = r.natsURL, r.pgURL
	c.ControlTable, c.Prefix = r.schema+".table_finalization", prefix
	c.Stream.MaxBytes = r.cfg.StreamMaxBytes
	// No cap, as in process: the bench tracks exactly its N runs.
	c.Tracking.MaxTrackers = -1
	if r.cfg.MemoryLimit == "off" {
		c.Tracking.MemoryLimit = "off"
	}
	c.Tracking.MemoryHeadroom = r.cfg.MemoryHeadroom
	for _, rule := range r.rules() {
		c.Tables = append(c.Tables, serveTable{Table: rule.Table, Query: rule.Query, SpecOptions: rule.Spec.Options()})
	}
	child, err := startChild(ctx, childConfig{
		Binary: r.cfg.ServiceBinary, WorkDir: r.work, Config: c, Timeout: r.cfg.WaitTimeout, OnChild: r.cfg.OnServiceProcess,
		Request: func(ctx context.Context, subject string, data []byte) ([]byte, error) {
			m, err := r.pub.RequestWithContext(ctx, subject, data)
			if err != nil {
				return nil, err
			}
			return m.Data, nil
		},
	})
	if err != nil {
		return nil, err
	}
	r.child = child
	r.say("the service process (pid %d, %s) answered /healthz %s after its exec; its log: %s", child.pid, child.cmd.Path,
		child.startedIn.Round(time.Millisecond), child.logPath)
	return child, nil
}

func (r *runner) serviceConfig() serviceConfig {
	return serviceConfig{
		NATSURL: r.natsURL, PostgresURL: r.pgURL, ControlTable: r.schema + ".table_finalization",
		Prefix: prefix, Rules: r.rules(), Logger: r.cfg.Logger, NoGroupCommit: r.cfg.NoGroupCommit,
		MaxBatch: r.cfg.MaxBatch, Workers: r.cfg.Workers, Actions: r.actionRules(),
		MemoryLimitOff: r.cfg.MemoryLimit == "off", MemoryHeadroom: r.cfg.MemoryHeadroom, MemorySurge: r.cfg.MemorySurge,
		StreamMaxBytes: r.cfg.StreamMaxBytes,
	}
}

// actionRules gives every bench table (bench.{name}: the ruled and the
// explicit ones alike) the configured action, by the minute.
func (r *runner) actionRules() []actions.Rule {
	var cfg actions.Config
	switch r.cfg.Actions {
	case "nats":
		cfg.NATS = &actions.NATSConfig{}
	case "marker":
		cfg.Marker = &actions.MarkerConfig{Path: filepath.Join(r.work, "markers", "{table}", "{period}", "_SUCCESS")}
	default:
		return nil
	}
	as, err := actions.Build("bench", []actions.Config{cfg}, nil)
	if err != nil {
		r.say("actions: %v", err)
		return nil
	}
	rules := []actions.Rule{{Table: "bench.{name}", Granularity: progress.Minute, Location: time.UTC, Actions: as}}
	_ = actions.Name(rules)
	return rules
}

// profile runs fn under a CPU profile named after the phase, when asked,
// records what the phase allocated (allocs-<phase>.pprof, with the
// process's allocations before the phase in allocs-<phase>.base.pprof:
// `go tool pprof -sample_index=alloc_space -base allocs-<phase>.base.pprof
// allocs-<phase>.pprof` gives the phase's own; the runtime updates the
// figures at each collection, so each snapshot lags by up to one cycle),
// and records where the phase waited: a block and a mutex profile
// (block-<phase>.pprof, mutex-<phase>.pprof: channel, select, lock and
// sync.Cond waits) and an execution trace (trace-<phase>.out: `go tool
// trace -pprof=net|sync|syscall|sched` shows the waits on the network,
// PostgreSQL's and NATS's round trips, that no profile counts).
func (r *runner) profile(phase string, fn func() error) error {
	if r.cfg.ProfileDir == "" {
		return fn()
	}
	f, err := os.Create(filepath.Join(r.cfg.ProfileDir, "cpu-"+phase+".pprof"))
	if err != nil {
		return err
	}
	defer f.Close()
	if err := pprof.StartCPUProfile(f); err != nil {
		return err
	}
	defer pprof.StopCPUProfile()
	if r.cfg.Trace {
		tf, err := os.Create(filepath.Join(r.cfg.ProfileDir, "trace-"+phase+".out"))
		if err != nil {
			return err
		}
		defer tf.Close()
		if err := trace.Start(tf); err != nil {
			return err
		}
		defer trace.Stop()
	}
	runtime.SetBlockProfileRate(int(100 * time.Microsecond))
	prev := runtime.SetMutexProfileFraction(10)
	r.writeProfile("allocs", "allocs-"+phase+".base.pprof")
	defer func() {
		r.writeProfile("allocs", "allocs-"+phase+".pprof")
		for _, k := range []string{"block", "mutex"} {
			if pf, err := os.Create(filepath.Join(r.cfg.ProfileDir, k+"-"+phase+".pprof")); err == nil {
				_ = pprof.Lookup(k).WriteTo(pf, 0)
				_ = pf.Close()
			}
		}
		runtime.SetBlockProfileRate(0)
		runtime.SetMutexProfileFraction(prev)
	}()
	return fn()
}

// writeProfile writes the named runtime profile (pprof.Lookup) to file in
// the profile directory; a failure only loses the profile.
func (r *runner) writeProfile(name, file string) {
	if pf, err := os.Create(filepath.Join(r.cfg.ProfileDir, file)); err == nil {
		_ = pprof.Lookup(name).WriteTo(pf, 0)
		_ = pf.Close()
	}
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}
