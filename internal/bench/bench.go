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
	"runtime/debug"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/finalizer-dev/finalizer/finalizer"
	"github.com/finalizer-dev/finalizer/internal/embeddednats"
	"github.com/finalizer-dev/finalizer/internal/pgcluster"
	"github.com/finalizer-dev/finalizer/listener"
)

// Defaults of Config.
const (
	// DefaultRuns is the number of simulated runs.
	DefaultRuns = 1000
	// DefaultTracking tracks half of the runs explicitly and half by rule.
	DefaultTracking = "mixed"
	// DefaultIngestPerRun is how many progress events each run publishes in
	// the ingest phase.
	DefaultIngestPerRun = 20
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
	// DefaultWaitTimeout bounds every wait for verdicts.
	DefaultWaitTimeout = 5 * time.Minute
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
	// phase (N * IngestPerRun messages in all).
	IngestPerRun int
	// Rate is the background load of the latency phase, in events/s.
	Rate float64
	// Duration is the length of the latency phase.
	Duration time.Duration
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
	// ProfileDir, when set, receives a CPU profile per phase
	// (cpu-<phase>.pprof) and a heap profile after tracking (heap.pprof).
	ProfileDir string
	// WaitTimeout bounds each wait for verdicts; 0 means DefaultWaitTimeout.
	WaitTimeout time.Duration
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
		c.IngestPerRun = DefaultIngestPerRun
	}
	if c.Rate <= 0 {
		c.Rate = DefaultRate
	}
	if c.Duration <= 0 {
		c.Duration = DefaultDuration
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
	if c.WaitTimeout <= 0 {
		c.WaitTimeout = DefaultWaitTimeout
	}
	if c.Logger == nil {
		c.Logger = zap.NewNop()
	}
	if c.Log == nil {
		c.Log = io.Discard
	}
	return c
}

// Validate reports a Config that cannot run.
func (c Config) Validate() error {
	switch c.Tracking {
	case "", "mixed", "explicit", "rule":
	default:
		return fmt.Errorf("tracking %q: want mixed, explicit or rule", c.Tracking)
	}
	if c.PerPeriod == 1 {
		return errors.New("per-period must be at least 2: every event would cross a period")
	}
	if c.PerPeriod > 0 && 60%c.PerPeriod != 0 {
		return fmt.Errorf("per-period %d: must divide 60 (seconds of a minute)", c.PerPeriod)
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
	buf       []byte
	rr        int    // round-robin position of the paced publisher
	rrLatency int    // rr when the service's latency phase began
	stored    uint64 // the stream's last sequence, as waitStored last saw it
	res       Result
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
	if r.sims, err = newSims(cfg.Runs, r.tag, prefix, cfg.Tracking, r.clk.perPeriod); err != nil {
		return nil, err
	}
	r.res = Result{
		Runs: cfg.Runs, Tracking: cfg.Tracking, CPUs: runtime.NumCPU(), GoVersion: runtime.Version(),
		IngestPerRun: cfg.IngestPerRun, Rate: cfg.Rate, DurationSeconds: cfg.Duration.Seconds(), PerPeriod: cfg.PerPeriod,
	}
	total := 0
	for _, s := range r.sims {
		total += len(s.tmpl)
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
	if cfg.Naive {
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

func (r *runner) serviceConfig() serviceConfig {
	return serviceConfig{
		NATSURL: r.natsURL, PostgresURL: r.pgURL, ControlTable: r.schema + ".table_finalization",
		Prefix: prefix, Rules: r.rules(), Logger: r.cfg.Logger, NoGroupCommit: r.cfg.NoGroupCommit,
	}
}

// profile runs fn under a CPU profile named after the phase, when asked.
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
	return fn()
}

// ingestAt returns the run and batch of the i-th ingest message: rounds of
// one event per run, batches 2 .. IngestPerRun+1 (batch 1 is the first
// progress every run publishes when it is tracked).
func (r *runner) ingestAt(i int) (*sim, int64) {
	return r.sims[i%len(r.sims)], 2 + int64(i/len(r.sims))
}

// publishProgress publishes s's progress of batch k and returns when.
func (r *runner) publishProgress(s *sim, k int64) (time.Time, error) {
	r.buf = s.progress(r.buf, k, r.clk.at(s, k))
	at := time.Now()
	if err := r.pub.Publish(s.subject, r.buf); err != nil {
		return at, fmt.Errorf("publish: %w", err)
	}
	s.last = k
	return at, nil
}

// blast publishes n messages (next(i) publishes the i-th) as fast as the
// consumer takes them, never more than Window ahead of consumed(). It
// returns when the first message was published.
func (r *runner) blast(ctx context.Context, n int, next func(i int) error, consumed func() int64) (time.Time, error) {
	start := time.Now()
	for i := 0; i < n; {
		if int64(i)-consumed() >= int64(r.cfg.Window) {
			if err := ctx.Err(); err != nil {
				return start, err
			}
			time.Sleep(50 * time.Microsecond)
			continue
		}
		if err := next(i); err != nil {
			return start, err
		}
		i++
	}
	return start, r.pub.FlushTimeout(10 * time.Second)
}

// waitCount polls until count() reaches n, and returns when it did.
func (r *runner) waitCount(ctx context.Context, what string, n int64, count func() int64) error {
	deadline := time.Now().Add(r.cfg.WaitTimeout)
	for count() < n {
		if time.Now().After(deadline) {
			return fmt.Errorf("%s: %d of %d after %s", what, count(), n, r.cfg.WaitTimeout)
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		time.Sleep(time.Millisecond)
	}
	return nil
}

// waitVerdicts waits until every table of targets is heard at its time and
// returns when the last one was.
func (r *runner) waitVerdicts(ctx context.Context, what string, targets map[string]time.Time) (time.Time, error) {
	wctx, cancel := context.WithTimeout(ctx, r.cfg.WaitTimeout)
	defer cancel()
	last, left, err := r.obs.waitAll(wctx, targets)
	if err != nil {
		return last, fmt.Errorf("%s: %d of %d verdicts not committed: %w", what, left, len(targets), err)
	}
	return last, nil
}

// settle waits until count() has not changed for 200 ms: the verdicts a
// phase waits for are heard at commit, a little before the trackers (or
// the naive callbacks) count the statements that made them.
func (r *runner) settle(ctx context.Context, count func() float64) float64 {
	deadline := time.Now().Add(r.cfg.WaitTimeout)
	last, since := count(), time.Now()
	for time.Since(since) < 200*time.Millisecond && time.Now().Before(deadline) && ctx.Err() == nil {
		time.Sleep(10 * time.Millisecond)
		if v := count(); v != last {
			last, since = v, time.Now()
		}
	}
	return last
}

// targetsAtLast returns, per table, the period of its last published batch.
func (r *runner) targetsAtLast() map[string]time.Time {
	t := make(map[string]time.Time, len(r.sims))
	for _, s := range r.sims {
		t[s.table] = r.clk.period(s, s.last)
	}
	return t
}

// rawDelivery measures the NATS delivery rate of the ingest messages to a
// subscriber that does nothing. The stream captures them as it will in
// the ingest phase; it is purged afterwards.
func (r *runner) rawDelivery(ctx context.Context) error {
	// The stream, as the service makes it, so that the server stores every
	// message as it will later.
	l, err := listener.Dial(ctx, listener.Options{URL: r.natsURL, Prefix: prefix})
	if err != nil {
		return err
	}
	err = l.EnsureStream(ctx)
	l.Close()
	if err != nil {
		return err
	}
	js, err := jetstream.New(r.pub)
	if err != nil {
		return err
	}
	st, err := js.Stream(ctx, listener.DefaultStream)
	if err != nil {
		return err
	}
	n := len(r.sims) * r.cfg.IngestPerRun
	r.res.IngestEvents = n
	for round := range r.cfg.RawRounds {
		rate, err := r.rawRound(ctx, n, round)
		if err != nil {
			return err
		}
		r.res.RawRounds = append(r.res.RawRounds, rate)
		r.res.RawEventsPerSec = max(r.res.RawEventsPerSec, rate)
		// Forget them: the next round, and the service, must meet the same
		// messages as news.
		stored, err := r.waitStored(ctx, st, n)
		if err != nil {
			return err
		}
		if stored < n {
			r.say("raw NATS delivery: the stream stored %d of the %d plain publishes", stored, n)
		}
		if err := st.Purge(ctx); err != nil {
			return err
		}
	}
	return nil
}

// rawRound publishes the ingest messages once to a subscriber that does
// nothing and returns its delivery rate.
func (r *runner) rawRound(ctx context.Context, n, round int) (float64, error) {
	nc, err := nats.Connect(r.natsURL, nats.Name("finalizer-bench-raw"))
	if err != nil {
		return 0, err
	}
	defer nc.Close()
	var got atomic.Int64
	var doneAt atomic.Int64
	sub, err := nc.Subscribe(prefix+".>", func(*nats.Msg) {
		if got.Add(1) == int64(n) {
			doneAt.Store(time.Now().UnixNano())
		}
	})
	if err != nil {
		return 0, err
	}
	_ = sub.SetPendingLimits(-1, -1)
	if err := nc.Flush(); err != nil {
		return 0, err
	}
	var start time.Time
	err = r.profile(fmt.Sprintf("raw%d", round+1), func() error {
		var err error
		start, err = r.blast(ctx, n, func(i int) error {
			s, k := r.ingestAt(i)
			_, err := r.publishProgress(s, k)
			return err
		}, got.Load)
		if err != nil {
			return err
		}
		return r.waitCount(ctx, "raw delivery", int64(n), got.Load)
	})
	if err != nil {
		return 0, err
	}
	took := time.Duration(doneAt.Load() - start.UnixNano())
	rate := float64(n) / took.Seconds()
	r.say("raw NATS delivery, round %d: %d messages in %s: %.0f/s", round+1, n, took.Round(time.Millisecond), rate)
	return rate, nil
}

// waitStored waits until the stream has stored n messages more than at
// r.stored (it captures plain publishes asynchronously), or has stored
// nothing more for a second: under a flood of plain publishes JetStream
// may drop some. It returns how many were stored.
func (r *runner) waitStored(ctx context.Context, st jetstream.Stream, n int) (int, error) {
	deadline := time.Now().Add(r.cfg.WaitTimeout)
	var seen uint64
	still := time.Now()
	for {
		info, err := st.Info(ctx)
		if err != nil {
			return 0, err
		}
		last := info.State.LastSeq
		if last != seen {
			seen, still = last, time.Now()
		}
		if last >= r.stored+uint64(n) || time.Since(still) > time.Second || time.Now().After(deadline) {
			stored := int(last - r.stored)
			r.stored = last
			return stored, nil
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// memSample is the process's memory at one moment, after a full GC that
// returned what it could to the operating system.
type memSample struct {
	rss, heap, stack uint64
	goroutines       int
}

func sampleMemory() memSample {
	runtime.GC()
	debug.FreeOSMemory()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return memSample{rss: residentBytes(), heap: ms.HeapInuse, stack: ms.StackInuse, goroutines: runtime.NumGoroutine()}
}

// residentBytes returns the process's resident set size, 0 when unknown.
func residentBytes() uint64 {
	b, err := os.ReadFile("/proc/self/statm")
	if err != nil {
		return 0
	}
	f := strings.Fields(string(b))
	if len(f) < 2 {
		return 0
	}
	pages, err := strconv.ParseUint(f[1], 10, 64)
	if err != nil {
		return 0
	}
	return pages * uint64(os.Getpagesize())
}

// loadAverage returns the 1-minute load average, 0 when unknown.
func loadAverage() float64 {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return 0
	}
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return 0
	}
	v, _ := strconv.ParseFloat(f[0], 64)
	return v
}

// metricValue returns the sum of the samples of the counter or gauge name
// in g, 0 when there is none.
func metricValue(g prometheus.Gatherer, name string) float64 {
	mfs, err := g.Gather()
	if err != nil {
		return 0
	}
	sum := 0.0
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			sum += m.GetCounter().GetValue() + m.GetGauge().GetValue()
		}
	}
	return sum
}

// runService runs the service's phases.
func (r *runner) runService(ctx context.Context) error {
	if err := r.rawDelivery(ctx); err != nil {
		return fmt.Errorf("raw delivery: %w", err)
	}
	before := sampleMemory()

	// Start and track.
	svc, err := startService(ctx, r.serviceConfig())
	if err != nil {
		return err
	}
	stop := func() {
		r.res.AdvanceRetries += int(svc.metric("finalizer_advance_retries_total"))
		r.res.AdvanceFailures += int(svc.metric("finalizer_advance_failures_total"))
		svc.stop(ctx)
		svc = nil
	}
	defer func() {
		if svc != nil {
			stop()
		}
	}()
	if err := r.profile("track", func() error { return r.track(ctx, svc) }); err != nil {
		return err
	}
	// Every run's first progress: the N first verdicts (inserts).
	start := time.Now()
	for _, s := range r.sims {
		if _, err := r.publishProgress(s, 1); err != nil {
			return err
		}
	}
	last, err := r.waitVerdicts(ctx, "first verdicts", r.targetsAtLast())
	if err != nil {
		return err
	}
	r.res.FirstVerdictsSeconds = last.Sub(start).Seconds()
	r.say("first verdicts of %d tables in %s", len(r.sims), last.Sub(start).Round(time.Millisecond))

	after := sampleMemory()
	n := float64(len(r.sims))
	r.res.MemPerRunKiB = (float64(after.rss) - float64(before.rss)) / n / 1024
	r.res.HeapPerRunKiB = (float64(after.heap) - float64(before.heap)) / n / 1024
	r.res.StackPerRunKiB = (float64(after.stack) - float64(before.stack)) / n / 1024
	r.res.GoroutinesPerRun = float64(after.goroutines-before.goroutines) / n
	r.say("memory per tracked run: %.1f KiB resident (heap %.1f KiB, stacks %.1f KiB, %.1f goroutines)",
		r.res.MemPerRunKiB, r.res.HeapPerRunKiB, r.res.StackPerRunKiB, r.res.GoroutinesPerRun)
	if r.cfg.ProfileDir != "" {
		if f, err := os.Create(filepath.Join(r.cfg.ProfileDir, "heap.pprof")); err == nil {
			_ = pprof.WriteHeapProfile(f)
			_ = f.Close()
		}
	}

	if err := r.serviceIngest(ctx, svc); err != nil {
		return err
	}
	r.rrLatency = r.rr
	if err := r.profile("latency", func() error {
		return r.latency(ctx, func() float64 { return svc.metric("finalizer_control_writes_total") }, &r.res.Latency)
	}); err != nil {
		return err
	}
	if err := r.profile("burst", func() error {
		var err error
		r.res.BurstSeconds, err = r.burst(ctx)
		return err
	}); err != nil {
		return err
	}
	if svc.dropped.Load() != 0 {
		return fmt.Errorf("the service dropped %d events", svc.dropped.Load())
	}

	// Restart: stop, publish one crossing per run while down, start.
	stop()
	js, err := jetstream.New(r.pub)
	if err != nil {
		return err
	}
	st, err := js.Stream(ctx, listener.DefaultStream)
	if err != nil {
		return err
	}
	info, err := st.Info(ctx)
	if err != nil {
		return err
	}
	r.stored = info.State.LastSeq
	for _, s := range r.sims {
		if _, err := r.publishProgress(s, r.clk.nextCrossing(s, s.last)); err != nil {
			return err
		}
	}
	if err := r.pub.Flush(); err != nil {
		return err
	}
	if stored, err := r.waitStored(ctx, st, len(r.sims)); err != nil {
		return err
	} else if stored < len(r.sims) {
		return fmt.Errorf("recovery: the stream stored %d of the %d progress events published while the service was down", stored, len(r.sims))
	}
	targets := r.targetsAtLast()
	err = r.profile("recovery", func() error {
		start := time.Now()
		var err error
		if svc, err = startService(ctx, r.serviceConfig()); err != nil {
			return err
		}
		last, err := r.waitVerdicts(ctx, "recovery", targets)
		if err != nil {
			return err
		}
		r.res.RecoverySeconds = last.Sub(start).Seconds()
		r.res.RecoveryStartSeconds = svc.startedIn.Seconds()
		r.say("recovery: %d runs re-applied %s after start (start itself %s: retained runs listed in %s, Recover %s)", len(r.sims),
			last.Sub(start).Round(time.Millisecond), svc.startedIn.Round(time.Millisecond),
			svc.retainedIn.Round(time.Millisecond), svc.recoverIn.Round(time.Millisecond))
		return nil
	})
	return err
}

// track tracks every run: explicit ones through the registry (as the
// track API does, persisted), ruled ones by publishing their started event
// for discovery. It returns once N trackers run.
func (r *runner) track(ctx context.Context, svc *service) error {
	start := time.Now()
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		first error
	)
	work := make(chan *sim)
	for range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for s := range work {
				_, err := svc.tracker.Track(ctx, finalizer.Request{QueryID: s.queryID, RunID: s.runID, Table: s.table,
					Spec: s.spec, Explicit: true, Supersede: true})
				if err != nil {
					mu.Lock()
					first = cmpOr(first, err)
					mu.Unlock()
				}
			}
		}()
	}
	for _, s := range r.sims {
		if s.rule {
			if err := r.pub.Publish(s.startedSubject, s.started); err != nil {
				first = cmpOr(first, err)
			}
			continue
		}
		work <- s
	}
	close(work)
	wg.Wait()
	if first != nil {
		return fmt.Errorf("track: %w", first)
	}
	if err := r.pub.Flush(); err != nil {
		return err
	}
	n := int64(len(r.sims))
	if err := r.waitCount(ctx, "trackers", n, func() int64 { return int64(svc.metric("finalizer_tracked_runs")) }); err != nil {
		return err
	}
	r.res.TrackSeconds = time.Since(start).Seconds()
	r.say("tracked %d runs in %s", n, time.Since(start).Round(time.Millisecond))
	return nil
}

func cmpOr(a, b error) error {
	if a != nil {
		return a
	}
	return b
}

// crossingsIn counts the period crossings of batches from+1 .. to of run s.
func (r *runner) crossingsIn(s *sim, from, to int64) int {
	n := 0
	for k := from + 1; k <= to; k++ {
		if r.clk.crossing(s, k) {
			n++
		}
	}
	return n
}

// serviceIngest publishes the ingest messages to the service as fast as
// it accepts them.
func (r *runner) serviceIngest(ctx context.Context, svc *service) error {
	n := len(r.sims) * r.cfg.IngestPerRun
	base := svc.accepted.Load()
	accepted := func() int64 { return svc.accepted.Load() - base }
	writes0 := svc.metric("finalizer_control_writes_total")
	var start, acceptedAt time.Time
	err := r.profile("ingest", func() error {
		var err error
		if start, err = r.blast(ctx, n, func(i int) error {
			s, k := r.ingestAt(i)
			_, err := r.publishProgress(s, k)
			return err
		}, accepted); err != nil {
			return err
		}
		if err := r.waitCount(ctx, "ingest", int64(n), accepted); err != nil {
			return err
		}
		acceptedAt = time.Now()
		_, err = r.waitVerdicts(ctx, "ingest", r.targetsAtLast())
		return err
	})
	if err != nil {
		return err
	}
	settled := time.Now()
	crossings := 0
	for _, s := range r.sims {
		crossings += r.crossingsIn(s, 1, s.last)
	}
	r.res.IngestEventsPerSec = float64(n) / acceptedAt.Sub(start).Seconds()
	r.res.SettledEventsPerSec = float64(n) / settled.Sub(start).Seconds()
	writes := r.settle(ctx, func() float64 { return svc.metric("finalizer_control_writes_total") })
	r.res.IngestWritesPerPeriod = (writes - writes0) / float64(max(crossings, 1))
	r.say("ingest: %d events accepted at %.0f/s (%.0f%% of raw), all verdicts committed at %.0f/s, %.2f writes per (table, period)",
		n, r.res.IngestEventsPerSec, 100*r.res.IngestEventsPerSec/r.res.RawEventsPerSec, r.res.SettledEventsPerSec, r.res.IngestWritesPerPeriod)
	return nil
}

// latency publishes the background load at Rate for Duration, one run
// after the other, and measures every period-crossing progress from its
// publication to its committed verdict. writes reads the control writes
// so far.
func (r *runner) latency(ctx context.Context, writes func() float64, out *Latency) error {
	writes0 := writes()
	crossings, sent := 0, 0
	touched := make(map[string]time.Time)
	start := time.Now()
	for {
		elapsed := time.Since(start)
		if elapsed >= r.cfg.Duration {
			break
		}
		due := int(elapsed.Seconds() * r.cfg.Rate)
		for ; sent < due; sent++ {
			s := r.sims[r.rr%len(r.sims)]
			r.rr++
			k := s.last + 1
			if r.clk.crossing(s, k) {
				crossings++
				r.obs.expect(s.table, r.clk.period(s, k), time.Now())
			}
			if _, err := r.publishProgress(s, k); err != nil {
				return err
			}
			touched[s.table] = r.clk.period(s, k)
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		next := start.Add(time.Duration(float64(sent+1) / r.cfg.Rate * float64(time.Second)))
		time.Sleep(time.Until(next))
	}
	if err := r.pub.Flush(); err != nil {
		return err
	}
	if _, err := r.waitVerdicts(ctx, "latency", touched); err != nil {
		return err
	}
	lat, missing := r.obs.takeLatencies()
	slices.Sort(lat)
	out.Events = sent
	out.Probes = len(lat)
	out.Missing = missing
	if len(lat) > 0 {
		out.P50Ms = ms(lat[len(lat)/2])
		out.P99Ms = ms(lat[min(len(lat)-1, len(lat)*99/100)])
		out.MaxMs = ms(lat[len(lat)-1])
	}
	out.WritesPerPeriod = (r.settle(ctx, writes) - writes0) / float64(max(crossings, 1))
	r.say("latency at %.0f events/s for %s: %d crossings, p50 %.2f ms, p99 %.2f ms, max %.2f ms, %.2f writes per (table, period)",
		r.cfg.Rate, r.cfg.Duration, out.Probes, out.P50Ms, out.P99Ms, out.MaxMs, out.WritesPerPeriod)
	return nil
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// burst makes every run cross into its next period at once and returns
// the time from the first publication to the last committed verdict.
func (r *runner) burst(ctx context.Context) (float64, error) {
	start := time.Now()
	for _, s := range r.sims {
		if _, err := r.publishProgress(s, r.clk.nextCrossing(s, s.last)); err != nil {
			return 0, err
		}
	}
	if err := r.pub.Flush(); err != nil {
		return 0, err
	}
	last, err := r.waitVerdicts(ctx, "burst", r.targetsAtLast())
	if err != nil {
		return 0, err
	}
	took := last.Sub(start)
	r.say("burst: %d tables crossing at once, last verdict committed after %s", len(r.sims), took.Round(time.Millisecond))
	return took.Seconds(), nil
}

// runNaive runs the naive baseline's phases on the same messages.
func (r *runner) runNaive(ctx context.Context) error {
	nv, err := startNaive(ctx, r.natsURL, r.pgURL, r.schema+".naive", r.sims, r.cfg.Logger.Named("naive"))
	if err != nil {
		return err
	}
	defer nv.stop()
	r.obs.forget()
	b := &Baseline{}
	r.res.Naive = b

	// Ingest: the same messages (batches 2 .. IngestPerRun+1).
	n := len(r.sims) * r.cfg.IngestPerRun
	var start time.Time
	err = r.profile("naive-ingest", func() error {
		var err error
		if start, err = r.blast(ctx, n, func(i int) error {
			s, k := r.ingestAt(i)
			_, err := r.publishProgress(s, k)
			return err
		}, nv.processed.Load); err != nil {
			return err
		}
		return r.waitCount(ctx, "naive ingest", int64(n), nv.processed.Load)
	})
	if err != nil {
		return err
	}
	took := time.Since(start)
	crossings := 0
	for _, s := range r.sims {
		crossings += r.crossingsIn(s, 1, s.last)
	}
	b.IngestEventsPerSec = float64(n) / took.Seconds()
	b.IngestWritesPerPeriod = r.settle(ctx, func() float64 { return float64(nv.writes.Load()) }) / float64(max(crossings, 1))
	r.say("naive ingest: %d events at %.0f/s, %.2f writes per (table, period)", n, b.IngestEventsPerSec, b.IngestWritesPerPeriod)
	// The runs now stand where they stood after the service's ingest; the
	// latency and burst phases replay the service's messages.
	r.rr = r.rrLatency
	if nv.failed.Load() != 0 {
		return fmt.Errorf("naive: %d events failed", nv.failed.Load())
	}
	if err := r.profile("naive-latency", func() error {
		return r.latency(ctx, func() float64 { return float64(nv.writes.Load()) }, &b.Latency)
	}); err != nil {
		return err
	}
	return r.profile("naive-burst", func() error {
		var err error
		b.BurstSeconds, err = r.burst(ctx)
		return err
	})
}
