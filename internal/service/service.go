// Package service starts and stops the finalizer service: the data-dir
// lock, the embedded NATS server or an external one, the managed
// PostgreSQL cluster or an external one, the control store, the event bus
// (package listener), the registry of trackers, the NATS API, discovery,
// recovery and the HTTP API. `finalizer serve`, `finalizer bench` and,
// through the binary, the end-to-end tests run this one wiring (ADR 0018).
//
// The service is a stack of actors: Start starts them one after another,
// each by one function that also registers how to stop it; Stop stops them
// in the reverse order. A failed start stops what started before it.
package service

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"go.uber.org/zap"

	"github.com/finalizer-dev/finalizer/control"
	"github.com/finalizer-dev/finalizer/finalizer"
	"github.com/finalizer-dev/finalizer/internal/actions"
	"github.com/finalizer-dev/finalizer/internal/embeddednats"
	"github.com/finalizer-dev/finalizer/internal/lograte"
	"github.com/finalizer-dev/finalizer/internal/memlimit"
	"github.com/finalizer-dev/finalizer/internal/ownership"
	"github.com/finalizer-dev/finalizer/internal/pgcluster"
	"github.com/finalizer-dev/finalizer/internal/statuspage"
	"github.com/finalizer-dev/finalizer/listener"
	"github.com/finalizer-dev/finalizer/progress"
)

// Compile-time checks that the real parts fit the engine's interfaces.
var (
	_ finalizer.Store      = (*control.Store)(nil)
	_ finalizer.TrackStore = (*control.Store)(nil)
	_ finalizer.BatchStore = (*control.Store)(nil) // group commit (ADR 0008)
)

// Bounds of the HTTP server (issue 9: idle connections must not exhaust
// the process's file descriptors).
const (
	// DefaultHTTPMaxConns is the most HTTP connections served at once
	// when Options.HTTPMaxConns is zero; more wait in the kernel's backlog.
	DefaultHTTPMaxConns = 256
	// HTTPReadHeaderTimeout bounds reading a request's headers, also of a
	// new connection that sends nothing.
	HTTPReadHeaderTimeout = 10 * time.Second
	// HTTPReadTimeout bounds reading a whole request.
	HTTPReadTimeout = 30 * time.Second
	// HTTPIdleTimeout closes a kept-alive connection idle this long.
	HTTPIdleTimeout = 30 * time.Second
	// HTTPMaxHeaderBytes bounds a request's headers.
	HTTPMaxHeaderBytes = 64 << 10
)

// PostgresURLFile is where the service leaves the managed cluster's URL in
// the data dir, for the status, is-final and wait commands (mode 0600).
const PostgresURLFile = "postgres.url"

// Options configures the service. Zero values: no embedded NATS (NATS.URL
// is an external server), the managed PostgreSQL cluster under DataDir
// (PostgresURL empty), no HTTP API, no rules.
type Options struct {
	// Logger receives the service's logs; nil = no logs.
	Logger *zap.Logger
	// Stdout receives one line per part started ("finalizer: NATS ...");
	// nil = none.
	Stdout io.Writer

	// DataDir holds the lock, the embedded NATS store and the managed
	// PostgreSQL cluster. It is created and locked only when one of them
	// runs.
	DataDir string
	// EmbeddedNATS, when not nil, starts the embedded NATS server, and the
	// service connects to it (NATS.URL is ignored). Its StoreDir and
	// Logger are filled in when empty.
	EmbeddedNATS *embeddednats.Options
	// LocalLogin, with EmbeddedNATS, adds the machine owner's login to
	// the embedded server (LocalLoginUser, every permission), with the
	// password kept in NATSLoginFile in the data dir (mode 0600), written
	// with the server's URL at every start. EmbeddedNATS.Users must then
	// hold the service's own login (the server has authentication).
	LocalLogin bool
	// NATS is how the service connects to NATS: URL (external server),
	// credentials, TLS, subject prefix, stream. Logger and OnEvent are set
	// by Start.
	NATS listener.Options

	// PostgresURL is the control database; "" starts the managed cluster
	// under DataDir and writes its URL to PostgresURLFile there.
	PostgresURL string
	// ControlTable is the control table; "" = control.DefaultTable.
	ControlTable string
	// NoMigrate only checks the control table's schema instead of creating
	// or migrating it.
	NoMigrate bool

	// Registry configures the registry of trackers: rules, stale and
	// expiry thresholds, tracker tunables, group commit. Bus, Store,
	// Tracks, Logger and Metrics are set by Start.
	Registry finalizer.RegistryConfig

	// Ownership says whether replicas share the tables' writes by
	// advisory locks (ADR 0020), and how.
	Ownership Ownership

	// TrackTimeout bounds one `finalizer track` request (persisting the
	// track and subscribing to the run); 0 = DefaultTrackTimeout. A
	// request that outlives it gets an error reply instead of holding its
	// handler while the control database or NATS does not answer.
	TrackTimeout time.Duration

	// HTTPListen is the HTTP API's address; "" or "off" = no HTTP API.
	HTTPListen string
	// HTTPMaxConns is the most HTTP connections served at once; 0 =
	// DefaultHTTPMaxConns.
	HTTPMaxConns int
	// HTTPHandler builds the HTTP API's handler once the service's parts
	// run; required with HTTPListen.
	HTTPHandler func(*Service) http.Handler

	// Actions are the rules with actions (issue 19), in config order;
	// none: the dispatcher does not run.
	Actions []actions.Rule
	// ActionsPollInterval is how often the dispatcher looks at the outbox
	// and due retries unwoken; 0 = actions.DefaultPollInterval.
	ActionsPollInterval time.Duration

	// StoreCheckEvery is how often the embedded NATS server is asked
	// whether the event stream can still store (see watchStore); 0 =
	// DefaultStoreCheckEvery, negative = never.
	StoreCheckEvery time.Duration

	// MemoryLimit configures the soft memory limit the service sets for
	// itself from its live heap and its tracked runs (package memlimit,
	// ADR 0022); MemoryLimitOff leaves the Go runtime's default. An
	// operator's GOMEMLIMIT always wins. Tracked and Logger are set by
	// Start.
	MemoryLimit    memlimit.Options
	MemoryLimitOff bool

	// OnEvent, when set, is called for every event the bus takes in or
	// drops, besides counting it in the metrics. It must not block.
	OnEvent func(kind progress.Kind, outcome string)
}

// Ownership configures the ownership of tables by advisory locks
// (package ownership): zero values take its defaults.
type Ownership struct {
	// Off makes every advance a statement, as active-active replicas
	// without ownership do.
	Off     bool
	Balance bool
	Buckets int
	Poll    time.Duration
	Grace   time.Duration
}

// Timings says how long the start took, and of which the recovery.
type Timings struct {
	// Start is the whole of Start.
	Start time.Duration
	// Retained is listing the runs JetStream retained; Recover is tracking
	// them and the explicit tracks.
	Retained, Recover time.Duration
	// Own is taking this replica's buckets of tables and writing what it
	// holds for them (0 with ownership off).
	Own time.Duration
}

// Service is a running service. Stop it with Stop.
type Service struct {
	opts    Options
	log     *zap.Logger
	out     io.Writer
	metrics *finalizer.Metrics
	prom    *prometheus.Registry
	// counters holds the scalar counters and gauges of prom alone (no
	// per-table series, no feeder read from PostgreSQL): what
	// GET /metrics?name[]=... serves when it asks for these only.
	counters *prometheus.Registry

	// Set by the start functions, in start order.
	natsURL    string
	pgURL      string
	embedded   *embeddednats.Server
	cluster    *pgcluster.Cluster
	store      *control.Store
	bus        *listener.Listener
	jetstream  bool
	registry   *finalizer.Registry
	owner      *ownership.Owner  // nil with Ownership.Off
	limiter    *memlimit.Limiter // nil when the limit is off or GOMEMLIMIT set
	page       *statuspage.Page
	outbox     *control.Outbox
	dispatcher *actions.Dispatcher
	httpAddr   string
	httpLn     net.Listener // bound by reserveListeners until serveHTTP serves it
	timings    Timings
	// held calls the reports of the limiters whose owner has no periodic
	// loop (the store's, the HTTP handler's: ReportHeld); started with
	// the store.
	held *lograte.Loop

	actors      []actor // started, in start order
	startFailed bool    // Start failed: its Stop undoes what a first start made
	stopOnce    sync.Once
	// recovered is closed once the registry recovered the tracked runs
	// (or the service stops): until then a join of a run the registry
	// does not know waits for it (handleJoin).
	recovered     chan struct{}
	recoveredOnce sync.Once
	failed        chan error // an actor that stopped on its own
}

// actor is one started part of the service and how to stop it.
type actor struct {
	name string
	stop func(ctx context.Context)
}

// Start starts the service's parts in order and returns once it is ready:
// recovery done, every API serving. On an error it stops what it started
// and returns the error.
func Start(ctx context.Context, o Options) (*Service, error) {
	began := time.Now()
	if o.Logger == nil {
		o.Logger = zap.NewNop()
	}
	if o.Stdout == nil {
		o.Stdout = io.Discard
	}
	if o.ControlTable == "" {
		o.ControlTable = control.DefaultTable
	}
	s := &Service{opts: o, log: o.Logger, out: o.Stdout, prom: prometheus.NewRegistry(), failed: make(chan error, 1),
		recovered: make(chan struct{})}
	s.prom.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}), newReadiness(s))
	s.metrics = finalizer.NewMetrics(s.prom, time.Now)
	s.counters = prometheus.NewRegistry()
	m := s.metrics
	s.counters.MustRegister(m.Events, m.Advances, m.Writes, m.FailedAdvances, m.Retries, m.TrackedRuns, m.StaleRuns)
	for _, start := range []func(context.Context) error{
		s.lockDataDir, // first: a second serve on the data dir is named as such
		s.reserveListeners,
		s.startNATS,
		s.startPostgres,
		s.openStore,
		s.expectFeeders,
		s.dialBus,
		s.watchStore,
		s.startRegistry,
		s.limitMemory,
		s.startActions,
		s.serveAPI,
		s.discover,
		s.recover,
		s.own,
		s.startPage,
		s.serveHTTP,
	} {
		if err := start(ctx); err != nil {
			s.startFailed = true
			s.Stop(context.Background())
			return nil, err
		}
	}
	s.timings.Start = time.Since(began)
	return s, nil
}

// started registers a started actor and how to stop it.
func (s *Service) started(name string, stop func(ctx context.Context)) {
	s.actors = append(s.actors, actor{name: name, stop: stop})
}

// fail reports an actor that stopped on its own; Run returns its error.
func (s *Service) fail(err error) {
	select {
	case s.failed <- err:
	default:
	}
}

// Run waits until ctx is done or an actor fails, then stops the service,
// giving the trackers shutdown to apply what is pending. It returns the
// failed actor's error, or nil.
func (s *Service) Run(ctx context.Context, shutdown time.Duration) error {
	var err error
	select {
	case <-ctx.Done():
		s.log.Info("shutting down", zap.String("signal", signalName(ctx)))
	case err = <-s.failed:
		s.log.Error("a part of the service failed; shutting down", zap.Error(err))
	}
	sctx, cancel := context.WithTimeout(context.Background(), shutdown)
	defer cancel()
	s.Stop(sctx)
	return err
}

// Stop stops every started actor in the reverse order of their start. The
// registry's trackers get until ctx is done to apply what is pending. It
// blocks; safe to call twice.
func (s *Service) Stop(ctx context.Context) {
	s.stopOnce.Do(func() {
		s.markRecovered()
		for i := len(s.actors) - 1; i >= 0; i-- {
			s.log.Debug("stopping", zap.String("part", s.actors[i].name))
			s.actors[i].stop(ctx)
		}
	})
}

// Store returns the control store.
func (s *Service) Store() *control.Store { return s.store }

// Bus returns the event bus.
func (s *Service) Bus() *listener.Listener { return s.bus }

// Owner returns the ownership of tables, nil when it is off.
func (s *Service) Owner() *ownership.Owner { return s.owner }

// Registry returns the registry of trackers.
func (s *Service) Registry() *finalizer.Registry { return s.registry }

// StatusPage returns the operator's status page, nil without the HTTP API.
func (s *Service) StatusPage() *statuspage.Page { return s.page }

// Metrics returns the engine's metrics (also in Prometheus), to read
// one counter without gathering every collector.
func (s *Service) Metrics() *finalizer.Metrics { return s.metrics }

// Prometheus returns the registry of the service's metrics, as /metrics
// serves them.
func (s *Service) Prometheus() *prometheus.Registry { return s.prom }

// Counters returns a registry of the service's scalar counters and
// gauges, each also in Prometheus(): finalizer_events_total,
// finalizer_advances_total, finalizer_control_writes_total,
// finalizer_advance_failures_total, finalizer_advance_retries_total,
// finalizer_tracked_runs, finalizer_stale_runs and the NATS connection's
// finalizer_nats_* counters. Gathering it costs the same at any number
// of tables: GET /metrics?name[]=... serves from it when it asks for
// these only (a poller such as `finalizer bench --service-process`).
func (s *Service) Counters() *prometheus.Registry { return s.counters }

// NATSURL returns the URL the service connected to NATS with.
func (s *Service) NATSURL() string { return s.natsURL }

// PostgresURL returns the control database's URL.
func (s *Service) PostgresURL() string { return s.pgURL }

// HTTPAddr returns the HTTP API's address, "" without one.
func (s *Service) HTTPAddr() string { return s.httpAddr }

// Timings returns how long the start took.
func (s *Service) Timings() Timings { return s.timings }

// ReportHeld has the service call report every lograte.ReportEvery until
// it stops, and once as it stops: for a rate-limited log of a part
// without a periodic loop of its own (the HTTP handler's), to say the
// lines it held back when no later line of their class goes out
// (lograte.Limiter.Report). final is true in the last call, as it stops:
// then report says every class with lines held back, its interval ended
// or not. Before the store is open it does nothing.
func (s *Service) ReportHeld(report func(final bool)) {
	if s.held != nil {
		s.held.Add(report)
	}
}

// Logger returns the service's logger.
func (s *Service) Logger() *zap.Logger { return s.log }

// errNoHandler is returned by Start when HTTPListen is set without a
// handler.
var errNoHandler = errors.New("http: HTTPListen set without HTTPHandler")

// checkHTTP reports a configuration error of the HTTP API.
func (o Options) checkHTTP() error {
	if o.HTTPListen != "" && o.HTTPListen != "off" && o.HTTPHandler == nil {
		return errNoHandler
	}
	return nil
}

func (s *Service) printf(format string, args ...any) { fmt.Fprintf(s.out, format, args...) }

// signalName names what ended ctx: SIGINT or SIGTERM when it came from
// signal.NotifyContext (its cause names the signal), else the cause.
func signalName(ctx context.Context) string {
	cause := context.Cause(ctx)
	if cause == nil {
		return "none"
	}
	name := strings.TrimSuffix(cause.Error(), " signal received")
	switch name {
	case syscall.SIGINT.String():
		return "SIGINT"
	case syscall.SIGTERM.String():
		return "SIGTERM"
	}
	return name
}

// redactURL masks the password of a URL for printing.
func redactURL(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return "(a URL that does not parse)"
	}
	return u.Redacted()
}

// markRecovered ends the recovery's hold on joins; safe to call twice.
func (s *Service) markRecovered() {
	s.recoveredOnce.Do(func() { close(s.recovered) })
}
