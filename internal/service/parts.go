package service

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/cenkalti/backoff/v4"
	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"
	"golang.org/x/net/netutil"

	"github.com/finalizer-dev/finalizer/control"
	"github.com/finalizer-dev/finalizer/finalizer"
	"github.com/finalizer-dev/finalizer/internal/embeddednats"
	"github.com/finalizer-dev/finalizer/internal/lograte"
	"github.com/finalizer-dev/finalizer/internal/memlimit"
	"github.com/finalizer-dev/finalizer/internal/ownership"
	"github.com/finalizer-dev/finalizer/internal/pgcluster"
	"github.com/finalizer-dev/finalizer/internal/redact"
	"github.com/finalizer-dev/finalizer/internal/statuspage"
	"github.com/finalizer-dev/finalizer/listener"
	"github.com/finalizer-dev/finalizer/progress"
)

// The start functions of the service's actors, in start order. Each one
// registers its actor's stop with started once it runs.

// lockDataDir creates and locks the data dir when an embedded server or
// the managed cluster will live in it.
func (s *Service) lockDataDir(context.Context) error {
	if err := s.opts.checkHTTP(); err != nil {
		return err
	}
	if err := s.checkPreconditions(); err != nil {
		return err
	}
	if s.opts.EmbeddedNATS == nil && s.opts.PostgresURL != "" {
		return nil
	}
	_, statErr := os.Stat(s.opts.DataDir)
	created := errors.Is(statErr, os.ErrNotExist)
	if err := os.MkdirAll(s.opts.DataDir, 0o755); err != nil {
		return fmt.Errorf("data dir: %w", err)
	}
	unlock, err := lockDataDir(s.opts.DataDir)
	if err != nil {
		return err
	}
	s.started("data dir lock", func(context.Context) {
		if created && s.startFailed {
			// A failed first start leaves nothing behind in the data dir
			// it created: no lock file, no empty store directory.
			_ = os.Remove(filepath.Join(s.opts.DataDir, lockFile))
			_ = os.Remove(filepath.Join(s.opts.DataDir, "nats"))
			_ = os.Remove(s.opts.DataDir)
		}
		unlock()
	})
	return nil
}

// startNATS starts the embedded NATS server, or takes the external URL.
func (s *Service) startNATS(context.Context) error {
	s.natsURL = s.opts.NATS.URL
	o := s.opts.EmbeddedNATS
	if o == nil {
		// An external server (--nats-url, nats.url or FINALIZER_NATS_URL):
		// say so before the dial, which retries until it is up, so a URL
		// left in the environment is not a silent wait.
		s.printf("finalizer: connecting to the external NATS server at %s (no embedded server)\n", redact.URLs(s.natsURL))
		s.log.Info("connecting to an external nats server", zap.String("url", redact.URLs(s.natsURL)))
		return nil
	}
	eo := *o
	if eo.StoreDir == "" {
		eo.StoreDir = filepath.Join(s.opts.DataDir, "nats")
	}
	if eo.Logger == nil {
		eo.Logger = s.log.Named("nats-server")
	}
	var local embeddednats.User
	if s.opts.LocalLogin {
		var err error
		if local, err = localLogin(s.opts.DataDir); err != nil {
			return err
		}
		eo.Users = append(slices.Clone(eo.Users), local)
		if s.opts.NATS.User == "" {
			// The server now has authentication: the service logs in too.
			pw, err := randomPassword()
			if err != nil {
				return err
			}
			eo.Users = append(eo.Users, embeddednats.User{Name: "finalizer-service", Password: pw})
			s.opts.NATS.User, s.opts.NATS.Password = "finalizer-service", pw
		}
	}
	srv, err := embeddednats.Start(eo)
	if err != nil {
		if errors.Is(err, syscall.EADDRINUSE) {
			return fmt.Errorf("%w; stop what listens there, or give the embedded server another address with --nats-listen (nats.listen)", err)
		}
		return err // embeddednats's errors say "embedded nats" themselves
	}
	s.embedded = srv
	s.started("embedded nats", func(context.Context) { srv.Shutdown() })
	s.natsURL = srv.ClientURL()
	if h := eo.Host; h == "" || h == "0.0.0.0" || h == "::" {
		// Listening on every address: connect through the loopback one.
		s.natsURL = strings.Replace(s.natsURL, "://"+net.JoinHostPort(h, ""), "://"+net.JoinHostPort("127.0.0.1", ""), 1)
	}
	how := "no authentication: every local user may publish, track and purge"
	switch {
	case s.opts.LocalLogin:
		path, err := writeLocalLogin(s.opts.DataDir, s.natsURL, local)
		if err != nil {
			return err
		}
		how = "login in " + path + ", mode 0600"
		if n := len(eo.Users) - 2; n > 0 { // less the service's own and the owner's
			how += fmt.Sprintf(", and %d users", n)
		}
		s.log.Info("the embedded nats server's login for this machine's owner (track, join, publish use it)",
			zap.String("file", path), zap.String("user", local.Name))
	case len(eo.Users) > 0:
		how = fmt.Sprintf("%d users", len(eo.Users)-1) // less the service's own
	}
	if eo.TLS != nil {
		how += ", TLS"
	}
	s.printf("finalizer: NATS %s (embedded, %s, JetStream under %s)\n", srv.ClientURL(), how, eo.StoreDir)
	return nil
}

// startPostgres starts the managed PostgreSQL cluster, or takes the
// external URL.
func (s *Service) startPostgres(ctx context.Context) error {
	s.pgURL = s.opts.PostgresURL
	if s.pgURL != "" {
		// An external server (--postgres-url, postgres.url or
		// FINALIZER_POSTGRES_URL): say so, as for NATS, so that an
		// exported variable never silently replaces the managed cluster.
		s.printf("finalizer: connecting to the external PostgreSQL at %s (no managed cluster)\n", redact.URLs(s.pgURL))
		return nil
	}
	dir, err := managedClusterDir(s.opts.DataDir, s.log)
	if err != nil {
		return fmt.Errorf("managed postgresql: %w", err)
	}
	cluster, err := pgcluster.Start(ctx, pgcluster.Options{Dir: dir, Logger: s.log.Named("postgres")})
	if err != nil {
		return fmt.Errorf("managed postgresql: %w", err)
	}
	s.cluster = cluster
	s.started("managed postgresql", func(context.Context) {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := cluster.Stop(ctx); err != nil {
			s.log.Error("stopping the managed postgresql failed", zap.Error(err))
		}
	})
	s.pgURL = cluster.URL()
	if err := os.WriteFile(filepath.Join(s.opts.DataDir, PostgresURLFile), []byte(s.pgURL+"\n"), 0o600); err != nil {
		return fmt.Errorf("write %s: %w", PostgresURLFile, err)
	}
	// The password stays off the terminal (and out of any log that
	// captures stdout): the full URL is in the 0600 file beside it.
	s.printf("finalizer: PostgreSQL %s (managed cluster under %s; full URL in %s, mode 0600)\n",
		redactURL(s.pgURL), cluster.Dir(), filepath.Join(s.opts.DataDir, PostgresURLFile))
	return nil
}

// openStore opens the control store and migrates (or checks) its table.
func (s *Service) openStore(ctx context.Context) error {
	store, err := control.Open(ctx, s.pgURL, control.Options{Table: s.opts.ControlTable, Logger: s.log.Named("control")})
	if err != nil {
		return fmt.Errorf("postgresql: %w", err)
	}
	s.store = store
	s.started("control store", func(context.Context) { store.Close() })
	// The store's busy warnings, and the HTTP handler's (ReportHeld), have
	// no loop of their own to say the lines they held back when no later
	// line of the class comes: this one does, until the service stops
	// (before the store closes).
	held := lograte.StartLoop(lograte.ReportEvery)
	held.Add(store.ReportHeldLogs)
	s.held = held
	s.started("held log lines", func(context.Context) { held.Stop() })
	if err := s.prepareSchema(ctx); err != nil {
		return err
	}
	// The lag gauges start from the verdicts as they stand (two columns,
	// read as they come: no list of every verdict).
	if err := store.EachFinalizedUntil(ctx, s.metrics.ObserveVerdict); err != nil {
		s.log.Debug("could not read the verdicts for the lag gauges; each table's gauge starts at its first verdict", zap.Error(err))
	}
	if err := s.prom.Register(newFeederCollector(store, time.Now)); err != nil {
		return fmt.Errorf("feeder metrics: %w", err)
	}
	return nil
}

// prepareSchema migrates the control table, waiting for PostgreSQL to come
// up, or only checks it with NoMigrate.
func (s *Service) prepareSchema(ctx context.Context) error {
	op := func() error {
		var err error
		if s.opts.NoMigrate {
			err = s.store.CheckSchema(ctx)
		} else {
			err = s.store.Migrate(ctx)
		}
		if err != nil && !errors.Is(err, control.ErrUnavailable) {
			return backoff.Permanent(err)
		}
		return err
	}
	b := backoff.NewExponentialBackOff(backoff.WithMaxElapsedTime(2 * time.Minute))
	notify := func(err error, next time.Duration) {
		s.log.Warn("waiting for postgresql", zap.Error(err), zap.Duration("retry_in", next))
	}
	if err := backoff.RetryNotify(op, backoff.WithContext(b, ctx), notify); err != nil {
		return fmt.Errorf("control table: %w", err)
	}
	return nil
}

// dialBus connects the event bus and ensures its JetStream stream.
func (s *Service) dialBus(ctx context.Context) error {
	o := s.opts.NATS
	o.URL = s.natsURL
	o.Logger = s.log.Named("listener")
	hook := s.opts.OnEvent
	o.OnEvent = func(kind progress.Kind, outcome string) {
		s.metrics.CountEvent(kind, outcome)
		if hook != nil {
			hook(kind, outcome)
		}
	}
	incidents := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "finalizer_stream_incidents_total",
		Help: "Times the event stream was found deleted (and recreated) or purged by someone, by kind (deleted, purged).",
	}, []string{"kind"})
	for _, kind := range []string{listener.StreamDeleted, listener.StreamPurged} {
		incidents.WithLabelValues(kind)
	}
	if err := s.prom.Register(incidents); err != nil {
		return fmt.Errorf("stream metrics: %w", err)
	}
	o.OnStreamIncident = func(kind string) { incidents.WithLabelValues(kind).Inc() }
	bus, err := listener.Dial(ctx, o)
	if err != nil {
		return fmt.Errorf("nats: %w", err)
	}
	s.bus = bus
	s.started("event bus", func(context.Context) { bus.Close() })
	natsCounters := []prometheus.Collector{
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "finalizer_nats_slow_consumer_total",
			Help: "Slow-consumer errors of the service's NATS connection: a subscription's pending limits were exceeded and messages dropped.",
		}, func() float64 { return float64(bus.ConnStats().SlowConsumer) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "finalizer_nats_dropped_messages_total",
			Help: "Messages the service's event subscription dropped because it fell behind (its pending limits).",
		}, func() float64 { return float64(bus.ConnStats().Dropped) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "finalizer_nats_disconnects_total",
			Help: "Disconnections of the service's NATS connection with an error (a server that cut it off as a slow consumer among them).",
		}, func() float64 { return float64(bus.ConnStats().Disconnects) }),
	}
	s.prom.MustRegister(natsCounters...)
	s.counters.MustRegister(natsCounters...)
	s.jetstream = true
	if err := bus.EnsureStream(ctx); err != nil {
		if !errors.Is(err, listener.ErrNoJetStream) {
			return fmt.Errorf("nats stream: %w", err)
		}
		s.jetstream = false
		s.log.Warn("the NATS server has no JetStream: runs tracked late or after a restart miss the events sent before")
	}
	return nil
}

// startRegistry starts the registry of trackers. Its stop lets every
// tracker apply what is pending until the stop's deadline.
func (s *Service) startRegistry(ctx context.Context) error {
	rc := s.opts.Registry
	rc.Bus, rc.Store, rc.Tracks = finalizer.ListenerBus{L: s.bus}, s.store, s.store
	rc.Logger, rc.Metrics = s.log.Named("tracker"), s.metrics
	// A burst widens the memory limit's headroom while it lasts, when
	// its SurgeHeadroom is set (off by default; ADR 0022, addendum 10). s.limiter is set by limitMemory, the next
	// start, before any tracker runs (discover and recover come after);
	// Surge on a nil or stopped limiter does nothing.
	rc.Surge = func() { s.limiter.Surge() }
	if o := s.opts.Ownership; !o.Off {
		// The trackers advance through the ownership gate: a table whose
		// bucket another replica owns is held, not written (ADR 0020).
		// Its stop comes after the registry's, so that what the trackers
		// apply at shutdown is still written by the buckets' owner; it
		// starts after the recovery (own).
		s.owner = ownership.New(ownership.Options{
			URL: s.pgURL, Table: s.opts.ControlTable, Store: s.store,
			Buckets: o.Buckets, Balance: o.Balance, Poll: o.Poll, Grace: o.Grace,
			Logger: s.log.Named("ownership"), Registerer: s.prom,
		})
		rc.Store = ownership.Gate(s.store, s.owner)
		s.started("ownership", func(context.Context) { s.owner.Close() })
	}
	registry := finalizer.NewRegistry(rc)
	s.registry = registry
	if s.owner != nil {
		// A held advance this replica wrote later and the control table
		// refused as decided before its table's rewind: its run shows it
		// (before_rewind), as when its own statement is refused.
		s.owner.OnRefused(registry.RefusedHeld)
	}
	s.started("registry", func(ctx context.Context) {
		if err := registry.Close(ctx); err != nil {
			s.log.Warn("shutdown deadline passed with advances pending; their runs' retained progress re-applies them on the next start", zap.Error(err))
		}
	})
	return s.watchReconnects(ctx)
}

// limitMemory starts the soft memory limit that follows the live heap and
// the tracked runs (ADR 0022, addendum), unless it is off or GOMEMLIMIT is
// set. It stops before the registry does and gives the process its
// previous limit back.
func (s *Service) limitMemory(context.Context) error {
	if s.opts.MemoryLimitOff {
		s.log.Info("memory limit: off (tracking.memory_limit: off); the Go runtime's default pacing")
		return nil
	}
	o := s.opts.MemoryLimit
	o.Tracked, o.Logger = s.registry.Tracked, s.log.Named("memlimit")
	if l := memlimit.Start(o); l != nil {
		s.limiter = l
		s.started("memory limit", func(context.Context) { l.Stop() })
	}
	return nil
}

// listenWait bounds how long the start waits for the control database's
// LISTEN connection (watchReconnects).
const listenWait = 5 * time.Second

// watchReconnects makes every tracker re-assert its last verdict each time
// the control database's LISTEN connection is re-established (not at its
// first connect): after a failover to a standby that asynchronous
// replication left behind, the newest verdicts are written again at once
// (forward-only: a re-assert never moves a verdict back). A tracker whose
// table was rewound after its last write (a rewind announced while the
// connection was down) does not re-assert (Tracker.reassertLast). It also
// hands operators' rewinds to the registry, and has it read them all again
// when the notification names no table (ADR 0019).
func (s *Service) watchReconnects(ctx context.Context) error {
	var connects atomic.Int64
	registry, owner := s.registry, s.owner
	listening := make(chan struct{}) // closed at the first connect
	stop, err := s.store.Watch(func(n control.Notification) {
		if n.Rewound {
			// An operator's rewind (finalizer rewind): the table's trackers
			// start again from it, and what this replica held for it from
			// before it is dropped.
			if owner != nil {
				owner.Rewound(n.Table, n.RewoundAt)
			}
			registry.Rewound(n.Table, n.FinalizedUntil, n.RewoundAt)
			return
		}
		if n.Table != "" {
			// A move, by whichever replica wrote it: the lag gauges follow
			// it (a replica that holds its advances writes none), and what
			// this replica holds up to it needs no write.
			s.metrics.ObserveVerdict(n.Table, n.FinalizedUntil)
			if owner != nil {
				owner.Observed(n.Table, n.FinalizedUntil)
			}
			return
		}
		// "Some verdict may have changed", no table named: a rewind
		// announced while the connection was down, or in an announcement
		// that could not be read, was not heard. The registry reads the
		// tables' rewinds again, so that no tracker started after such a
		// rewind applies a progress from before it (ADR 0019).
		registry.RereadRewinds()
		if !n.Reconnected {
			// An announcement that could not be read (anyone may NOTIFY
			// on the channel): no reconnect, no re-assert.
			return
		}
		if connects.Add(1) == 1 {
			// The first connect: the start waits for it (below); no
			// re-assert.
			close(listening)
			return
		}
		if owner != nil {
			owner.Reconnected()
		}
		s.log.Info("control database connection re-established; every tracker re-asserts its last verdict",
			zap.Int("trackers", registry.Reassert()))
	})
	if err != nil {
		return fmt.Errorf("watch the control database: %w", err)
	}
	s.started("reconnect watch", func(context.Context) { stop() })
	// The start goes on once the LISTEN connection is up (or after
	// listenWait): the re-read of the rewinds its first connect asks for
	// is then served before the recovery's trackers start (by the
	// recovery's own read at the latest, which starts after it). A
	// connect after that read would hold every recovered tracker's
	// advance until a second read (ADR 0019, addendum).
	select {
	case <-listening:
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(listenWait):
		s.log.Warn("the control database's LISTEN connection is not up yet; the start goes on, and the trackers' advances wait for the tables' rewinds to be read again once it is",
			zap.Duration("waited", listenWait))
	}
	return nil
}

// serveAPI answers `finalizer track` and `finalizer join` over NATS.
func (s *Service) serveAPI(context.Context) error {
	api, err := s.bus.ServeAPI(s.handleTrack, s.handleJoin)
	if err != nil {
		return fmt.Errorf("nats api: %w", err)
	}
	s.started("nats api", func(context.Context) { _ = api.Unsubscribe() })
	retire, err := s.bus.ServeRetire(s.handleRetire)
	if err != nil {
		return fmt.Errorf("nats api: %w", err)
	}
	s.started("nats retire api", func(context.Context) { _ = retire.Unsubscribe() })
	return nil
}

// discover hands every run the registry does not know to it, when rules
// are configured.
func (s *Service) discover(context.Context) error {
	if len(s.opts.Registry.Rules) == 0 {
		return nil
	}
	disc, err := s.bus.Discover(s.registry.Known, s.registry.Discovered)
	if err != nil {
		return fmt.Errorf("nats discovery: %w", err)
	}
	// A run discovery had to drop (too many waiting for a decision, a
	// start that failed) is found again by a rescan of the stream, not
	// left to its next event.
	s.registry.SetRescan(disc.Rescan)
	s.started("discovery", func(context.Context) { _ = disc.Unsubscribe() })
	return nil
}

// recover resumes the explicit tracks from the control database and the
// declarative ones from what JetStream retained. Each tracker applies its
// run's retained progress at once. It has nothing to stop.
func (s *Service) recover(ctx context.Context) error {
	defer s.markRecovered()
	// Discovery's starts wait for the recovery's (finalizer.Registry.HoldDiscovery).
	defer s.registry.HoldDiscovery()()
	began := time.Now()
	tracks, err := s.store.Tracks(ctx)
	if err != nil {
		return fmt.Errorf("read explicit tracks: %w", err)
	}
	// The catch-ups of the recovered runs wait until all are subscribed
	// (Recover holds them too); held from before Retained, they are made
	// from what Retained read and the stream after it, so that the stream
	// is read once (listener.HoldCatchUps).
	release := s.bus.HoldCatchUps()
	// The runs about to be recovered count in the memory limit from now
	// (memlimit.Limiter.Expect), the explicit tracks before the listing
	// (whose snapshot is the first to grow the heap), the retained runs
	// once listed: the heap grows to their size in seconds, faster than a
	// limit that follows the live heap after each collection.
	s.limiter.Expect(recovering(tracks, nil))
	var runs []listener.Run
	if s.jetstream && len(s.opts.Registry.Rules) > 0 {
		if runs, err = s.bus.Retained(ctx); err != nil {
			s.log.Error("could not list the runs JetStream retained; they are tracked on their next event", zap.Error(err))
		}
	}
	listed := time.Now()
	s.limiter.Expect(recovering(tracks, runs))
	_ = s.registry.Recover(ctx, tracks, runs) // logged by Recover
	if err := release(ctx); err != nil {
		s.log.Warn("could not catch the recovered runs up from the stream at once; each is retried on its own", zap.Error(err))
	}
	s.limiter.Expect(0)
	s.timings.Retained, s.timings.Recover = listed.Sub(began), time.Since(listed)
	s.log.Info("recovered tracked runs", zap.Int("explicit_tracks", len(tracks)), zap.Int("retained_runs", len(runs)),
		zap.Int("trackers", s.registry.Tracked()), zap.Duration("took", time.Since(began)))
	return nil
}

// recovering counts the runs Recover may track: the explicit tracks not
// done and the retained runs, each run once.
func recovering(tracks []control.Track, runs []listener.Run) int {
	ids := make(map[string]struct{}, len(tracks))
	for _, t := range tracks {
		if t.DoneAt.IsZero() {
			ids[t.RunID] = struct{}{}
		}
	}
	n := len(ids)
	for _, r := range runs {
		if _, ok := ids[r.RunID]; !ok {
			n++
		}
	}
	return n
}

// own starts the ownership of tables once the recovery is done: it takes
// this replica's share of the buckets and writes what the recovered
// trackers hold for them (its stop was registered with the registry's).
func (s *Service) own(ctx context.Context) error {
	if s.owner == nil {
		return nil
	}
	began := time.Now()
	s.owner.Start(ctx)
	s.timings.Own = time.Since(began)
	s.log.Info("ownership of tables started", zap.Int("buckets_owned", s.owner.Owned()))
	return nil
}

// startPage starts the status page (GET /) when there is an HTTP API: it
// watches the control table's announcements from now on.
func (s *Service) startPage(context.Context) error {
	if s.opts.HTTPListen == "" || s.opts.HTTPListen == "off" {
		return nil
	}
	page, err := statuspage.New(statuspage.Options{Verdicts: s.store, Runs: s.registry,
		StaleAfter: s.opts.Registry.StaleAfter, Logger: s.log.Named("statuspage")})
	if err != nil {
		return fmt.Errorf("status page: %w", err)
	}
	s.page = page
	s.started("statuspage", func(context.Context) { page.Close() })
	return nil
}

// serveHTTP serves the HTTP API and /metrics. A server that stops on its
// own fails the service (see Run).
func (s *Service) serveHTTP(context.Context) error {
	if s.httpLn == nil {
		return nil
	}
	ln := s.httpLn // bound by reserveListeners, before anything slow started
	s.httpLn = nil // the server's Shutdown closes it from now on
	// Bounded: at most HTTPMaxConns connections at once (more wait in the
	// kernel's backlog, never for a file descriptor of ours), none idle for
	// long, none slow to send its request. There is no write deadline:
	// long polls and the status page's stream last as long as they need.
	maxConns := s.opts.HTTPMaxConns
	if maxConns <= 0 {
		maxConns = DefaultHTTPMaxConns
	}
	ln = netutil.LimitListener(ln, maxConns)
	srv := &http.Server{
		Handler:           s.opts.HTTPHandler(s),
		ReadHeaderTimeout: HTTPReadHeaderTimeout,
		ReadTimeout:       HTTPReadTimeout,
		IdleTimeout:       HTTPIdleTimeout,
		MaxHeaderBytes:    HTTPMaxHeaderBytes,
	}
	if s.page != nil {
		srv.RegisterOnShutdown(s.page.CloseStreams) // a live page's stream never goes idle by itself
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			s.fail(fmt.Errorf("http server: %w", err))
		}
	}()
	s.started("http", func(context.Context) {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		_ = srv.Shutdown(ctx)
		<-done
	})
	s.httpAddr = ln.Addr().String()
	s.printf("finalizer: HTTP http://%s\n", s.httpAddr)
	s.log.Info("http listening", zap.String("addr", s.httpAddr))
	return nil
}

// fallbackClusterRoot holds managed clusters whose data dir the postgres OS
// user cannot reach (a data dir under root's 0700 home, when run as root).
const fallbackClusterRoot = "/var/lib/finalizer/clusters"

// managedClusterDir returns where the managed PostgreSQL cluster of dataDir
// lives: <data-dir>/postgres, or, when this process runs as root and the
// postgres OS user cannot reach that path, a directory under
// fallbackClusterRoot named after the data dir, so that
// `finalizer serve` works from any directory.
func managedClusterDir(dataDir string, log *zap.Logger) (string, error) {
	dir := filepath.Join(dataDir, "postgres")
	err := pgcluster.Reachable(dir)
	if err == nil || !errors.Is(err, pgcluster.ErrUnreachable) {
		return dir, err
	}
	abs, aerr := filepath.Abs(dataDir)
	if aerr != nil {
		return "", aerr
	}
	sum := sha256.Sum256([]byte(abs))
	alt := filepath.Join(fallbackClusterRoot, fmt.Sprintf("%s-%x", filepath.Base(abs), sum[:4]))
	if merr := os.MkdirAll(fallbackClusterRoot, 0o755); merr != nil {
		return "", fmt.Errorf("%w; and the fallback %s: %v", err, fallbackClusterRoot, merr)
	}
	log.Warn("the postgres OS user cannot reach the data dir; the managed cluster lives in the fallback directory",
		zap.String("data_dir", abs), zap.String("cluster_dir", alt), zap.NamedError("reason", err))
	return alt, nil
}
