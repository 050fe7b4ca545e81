package main

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/cenkalti/backoff/v4"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/spf13/cobra"
	"go.uber.org/zap"

	"github.com/finalizer-dev/finalizer/control"
	"github.com/finalizer-dev/finalizer/finalizer"
	"github.com/finalizer-dev/finalizer/internal/embeddednats"
	"github.com/finalizer-dev/finalizer/internal/pgcluster"
	"github.com/finalizer-dev/finalizer/listener"
	"github.com/finalizer-dev/finalizer/progress"
)

// Compile-time checks that the real parts fit the engine's interfaces.
var (
	_ finalizer.Store      = (*control.Store)(nil)
	_ finalizer.TrackStore = (*control.Store)(nil)
	_ finalizer.BatchStore = (*control.Store)(nil) // group commit (ADR 0008)
)

// postgresURLFile is where serve leaves the managed cluster's URL, for the
// status, is-final and wait commands (mode 0600).
const postgresURLFile = "postgres.url"

type serveFlags struct {
	configFile string
	cfg        Config
}

func newServeCmd(stdout, stderr io.Writer) *cobra.Command {
	var f serveFlags
	f.cfg = defaultConfig()
	cmd := &cobra.Command{
		Use:   "serve",
		Short: "Run the service",
		Long: `Runs the service: tracks streaming query runs from their listener events on NATS and
advances each tracked table's verdict in the PostgreSQL control table.

With no flags it runs on its embedded defaults: an in-process NATS server with JetStream
on 127.0.0.1:4222 (data under <data-dir>/nats) and a private PostgreSQL cluster under
<data-dir>/postgres, created with the machine's PostgreSQL installation on first start.
--nats-url and --postgres-url switch to external servers.

Precedence: flags, then FINALIZER_* environment variables, then the config file, then
the defaults. SIGINT or SIGTERM stops it cleanly: intake stops, trackers apply what is
pending (bounded by tracking.shutdown_timeout), the embedded servers stop.`,
		Example: `  finalizer serve
  finalizer serve --config finalizer.yaml
  finalizer serve --nats-url nats://nats:4222 --postgres-url postgres://finalizer@db/ops`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, err := f.resolve(cmd)
			if err != nil {
				return usageError(err)
			}
			return serve(cmd.Context(), cfg, stdout, stderr)
		},
	}
	fs := cmd.Flags()
	fs.StringVar(&f.configFile, "config", "", "YAML config file ($VARS are expanded)")
	fs.String("data-dir", DefaultDataDir, "directory of the embedded NATS store and the managed PostgreSQL cluster")
	fs.String("nats-url", "", "external NATS server URL(s), comma-separated (empty: run the embedded server)")
	fs.String("nats-listen", DefaultNATSListen, "address of the embedded NATS server")
	fs.String("postgres-url", "", "PostgreSQL URL (empty: the managed cluster under <data-dir>/postgres)")
	fs.Bool("no-migrate", false, "do not create or migrate the control table; fail if its schema is not current")
	fs.String("http-listen", DefaultHTTPListen, `address of the HTTP API and /metrics ("off" disables it)`)
	fs.String("http-token", "", "bearer token the HTTP API requires (not /healthz, /readyz); prefer FINALIZER_HTTP_TOKEN")
	fs.Bool("http-insecure", false, "allow a non-loopback --http-listen without a token")
	fs.Bool("nats-allow-anonymous", false, "allow a non-loopback --nats-listen without nats.embedded.users")
	fs.String("control-table", "", `control table, schema-qualified (default "`+control.DefaultTable+`")`)
	fs.String("subject-prefix", "", `subject prefix of the listener events (default "`+listener.DefaultPrefix+`")`)
	fs.String("log-format", "", `log format: json or console (default "json")`)
	fs.String("log-level", "", `log level: debug, info, warn, error (default "info")`)
	addNATSAuthFlags(fs)
	addAPIPrefixFlag(fs)
	return cmd
}

// resolve merges defaults, the config file, environment and flags.
func (f *serveFlags) resolve(cmd *cobra.Command) (Config, error) {
	cfg := f.cfg
	if f.configFile != "" {
		if err := loadConfigFile(f.configFile, &cfg); err != nil {
			return cfg, err
		}
	}
	fs := cmd.Flags()
	set := func(name string, dst *string) {
		if fl := fs.Lookup(name); fl != nil && (fl.Changed || *dst == "") && fl.Value.String() != "" {
			*dst = fl.Value.String()
		}
	}
	set("data-dir", &cfg.DataDir)
	set("nats-url", &cfg.NATS.URL)
	set("nats-listen", &cfg.NATS.Listen)
	set("postgres-url", &cfg.Postgres.URL)
	set("http-listen", &cfg.HTTP.Listen)
	set("http-token", &cfg.HTTP.Token)
	set("control-table", &cfg.ControlTable)
	set("subject-prefix", &cfg.Prefix)
	set("log-format", &cfg.Log.Format)
	set("log-level", &cfg.Log.Level)
	for name, dst := range map[string]*bool{"no-migrate": &cfg.Postgres.NoMigrate, "http-insecure": &cfg.HTTP.Insecure,
		"nats-allow-anonymous": &cfg.NATS.Embedded.AllowAnonymous} {
		if fl := fs.Lookup(name); fl.Changed {
			*dst = fl.Value.String() == "true"
		}
	}
	applyNATSAuthFlags(fs, &cfg.NATS)
	return cfg, cfg.validate()
}

// service is everything serve started, in the order it stops them.
type service struct {
	log      *zap.Logger
	cfg      Config
	unlock   func()
	nats     *embeddednats.Server
	pg       *pgcluster.Cluster
	store    *control.Store
	bus      *listener.Listener
	reg      *finalizer.Registry
	subs     []*listener.Subscription
	http     *http.Server
	httpDone chan struct{}
}

func serve(ctx context.Context, cfg Config, stdout, stderr io.Writer) (err error) {
	log, err := newLogger(cfg.Log, stderr)
	if err != nil {
		return usageError(err)
	}
	defer func() { _ = log.Sync() }()
	started := time.Now()
	s := &service{log: log, cfg: cfg}
	defer func() {
		if err != nil {
			s.stop(context.Background())
		}
	}()
	if err := s.start(ctx, stdout); err != nil {
		log.Error("start failed", zap.Error(err))
		return usageError(err)
	}
	log.Info("finalizer ready", zap.Duration("startup", time.Since(started)))
	fmt.Fprintf(stdout, "finalizer: ready in %s\n", time.Since(started).Round(time.Millisecond))
	<-ctx.Done()
	log.Info("shutting down", zap.String("signal", "received"))
	shutdownCtx, cancel := context.WithTimeout(context.Background(), time.Duration(cfg.Tracking.Shutdown))
	defer cancel()
	s.stop(shutdownCtx)
	log.Info("stopped cleanly")
	return nil
}

func (s *service) start(ctx context.Context, stdout io.Writer) error {
	cfg := s.cfg
	embedded := cfg.NATS.URL == "" || cfg.Postgres.URL == ""
	if embedded {
		if err := os.MkdirAll(cfg.DataDir, 0o755); err != nil {
			return fmt.Errorf("data dir: %w", err)
		}
		unlock, err := lockDataDir(cfg.DataDir)
		if err != nil {
			return err
		}
		s.unlock = unlock
	}

	// NATS: embedded or external.
	natsURL, natsAuth := cfg.NATS.URL, cfg.NATS
	if natsURL == "" {
		host, port, err := splitListen(cfg.NATS.Listen)
		if err != nil {
			return fmt.Errorf("nats listen: %w", err)
		}
		users, user, password, err := embeddedAuth(cfg)
		if err != nil {
			return err
		}
		tls := embeddedTLS(cfg.NATS.Embedded.TLS)
		s.nats, err = embeddednats.Start(embeddednats.Options{
			Host: host, Port: port, StoreDir: filepath.Join(cfg.DataDir, "nats"), Logger: s.log.Named("nats-server"),
			Users: users, TLS: tls,
		})
		if err != nil {
			return fmt.Errorf("embedded nats: %w", err)
		}
		natsURL = s.nats.ClientURL()
		// The service logs in as its own user; the client TLS settings
		// (tls_ca_file, tls_cert_file) apply to its embedded server too,
		// and without tls_ca_file it trusts the server's own certificate.
		natsAuth = NATSConfig{User: user, Password: password, TLSCA: cfg.NATS.TLSCA, TLSCert: cfg.NATS.TLSCert, TLSKey: cfg.NATS.TLSKey}
		if tls != nil && natsAuth.TLSCA == "" {
			natsAuth.TLSCA = tls.CertFile
		}
		if host == "" || host == "0.0.0.0" || host == "::" {
			natsURL = strings.Replace(natsURL, "://"+net.JoinHostPort(host, ""), "://"+net.JoinHostPort("127.0.0.1", ""), 1)
		}
		how := "no authentication"
		if len(users) > 0 {
			how = fmt.Sprintf("%d users", len(users)-1)
		}
		if tls != nil {
			how += ", TLS"
		}
		fmt.Fprintf(stdout, "finalizer: NATS %s (embedded, %s, JetStream under %s)\n", s.nats.ClientURL(), how, filepath.Join(cfg.DataDir, "nats"))
	}

	// PostgreSQL: managed or external.
	pgURL := cfg.Postgres.URL
	if pgURL == "" {
		pgDir, err := managedClusterDir(cfg.DataDir, s.log)
		if err != nil {
			return fmt.Errorf("managed postgresql: %w", err)
		}
		s.pg, err = pgcluster.Start(ctx, pgcluster.Options{Dir: pgDir, Logger: s.log.Named("postgres")})
		if err != nil {
			return fmt.Errorf("managed postgresql: %w", err)
		}
		pgURL = s.pg.URL()
		if err := os.WriteFile(filepath.Join(cfg.DataDir, postgresURLFile), []byte(pgURL+"\n"), 0o600); err != nil {
			return fmt.Errorf("write %s: %w", postgresURLFile, err)
		}
		fmt.Fprintf(stdout, "finalizer: PostgreSQL %s (managed cluster under %s)\n", pgURL, s.pg.Dir())
	}

	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	metrics := finalizer.NewMetrics(reg, time.Now)

	var err error
	s.store, err = control.Open(ctx, pgURL, control.Options{Table: cfg.ControlTable, Logger: s.log.Named("control")})
	if err != nil {
		return fmt.Errorf("postgresql: %w", err)
	}
	if err := s.prepareSchema(ctx); err != nil {
		return err
	}
	if vs, err := s.store.List(ctx); err == nil {
		for _, v := range vs {
			metrics.ObserveVerdict(v.Table, v.FinalizedUntil)
		}
	}

	s.bus, err = listener.Dial(ctx, listener.Options{
		URL: natsURL, Prefix: cfg.Prefix, Stream: cfg.Stream.Name, MaxAge: time.Duration(cfg.Stream.MaxAge),
		APIPrefix: cfg.NATS.APIPrefix, Logger: s.log.Named("listener"),
		OnEvent: func(kind progress.Kind, outcome string) {
			metrics.Events.WithLabelValues(kind.String(), outcome).Inc()
		},
		User: natsAuth.User, Password: natsAuth.Password, Token: natsAuth.Token,
		NKeySeedFile: natsAuth.NKeySeed, CredsFile: natsAuth.Creds,
		TLSCAFile: natsAuth.TLSCA, TLSCertFile: natsAuth.TLSCert, TLSKeyFile: natsAuth.TLSKey,
	})
	if err != nil {
		return fmt.Errorf("nats: %w", err)
	}
	jetstream := true
	if err := s.bus.EnsureStream(ctx); err != nil {
		if !errors.Is(err, listener.ErrNoJetStream) {
			return fmt.Errorf("nats stream: %w", err)
		}
		jetstream = false
		s.log.Warn("the NATS server has no JetStream: runs tracked late or after a restart miss the events sent before")
	}

	rules, _ := cfg.rules() // validated already
	s.reg = finalizer.NewRegistry(finalizer.RegistryConfig{
		Events: finalizer.ListenerEvents{L: s.bus}, Store: s.store, Tracks: s.store, Rules: rules,
		Logger: s.log.Named("tracker"), Metrics: metrics,
		Tracker:     finalizer.TrackerConfig{FutureSkew: time.Duration(cfg.Tracking.FutureSkew)},
		StaleAfter:  time.Duration(cfg.Tracking.StaleAfter),
		ExpireAfter: time.Duration(cfg.Tracking.ExpireAfter),
	})

	api, err := s.bus.ServeAPI(s.handleTrack, s.handleJoin)
	if err != nil {
		return fmt.Errorf("nats api: %w", err)
	}
	s.subs = append(s.subs, api)
	if len(rules) > 0 {
		disc, err := s.bus.Discover(s.reg.Known, s.reg.Discovered)
		if err != nil {
			return fmt.Errorf("nats discovery: %w", err)
		}
		s.subs = append(s.subs, disc)
	}

	// Recovery: explicit tracks from the control database, declarative ones
	// from what JetStream retained. Each tracker applies its run's retained
	// progress at once.
	began := time.Now()
	tracks, err := s.store.Tracks(ctx)
	if err != nil {
		return fmt.Errorf("read explicit tracks: %w", err)
	}
	var runs []listener.Run
	if jetstream && len(rules) > 0 {
		if runs, err = s.bus.Retained(ctx); err != nil {
			s.log.Error("could not list the runs JetStream retained; they are tracked on their next event", zap.Error(err))
		}
	}
	_ = s.reg.Recover(ctx, tracks, runs) // logged by Recover
	s.log.Info("recovered tracked runs", zap.Int("explicit_tracks", len(tracks)), zap.Int("retained_runs", len(runs)),
		zap.Int("trackers", len(s.reg.Status())), zap.Duration("took", time.Since(began)))

	if cfg.HTTP.Listen != "" && cfg.HTTP.Listen != "off" {
		ln, err := net.Listen("tcp", cfg.HTTP.Listen)
		if err != nil {
			return fmt.Errorf("http listen %s: %w", cfg.HTTP.Listen, err)
		}
		s.http = &http.Server{Handler: requireToken(cfg.HTTP.Token, newHTTPHandler(s, reg)), ReadHeaderTimeout: 10 * time.Second}
		s.httpDone = make(chan struct{})
		go func() {
			defer close(s.httpDone)
			if err := s.http.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
				s.log.Error("http server stopped", zap.Error(err))
			}
		}()
		fmt.Fprintf(stdout, "finalizer: HTTP http://%s\n", ln.Addr())
		s.log.Info("http listening", zap.String("addr", ln.Addr().String()))
	}
	return nil
}

// prepareSchema migrates the control table, waiting for PostgreSQL to come
// up, or only checks it with --no-migrate.
func (s *service) prepareSchema(ctx context.Context) error {
	op := func() error {
		var err error
		if s.cfg.Postgres.NoMigrate {
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

// stop stops everything start started, in reverse order. It blocks.
func (s *service) stop(ctx context.Context) {
	if s.http != nil {
		hctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		_ = s.http.Shutdown(hctx)
		cancel()
		<-s.httpDone
	}
	for _, sub := range s.subs {
		_ = sub.Unsubscribe()
	}
	if s.reg != nil {
		if err := s.reg.Close(ctx); err != nil {
			s.log.Warn("shutdown deadline passed with advances pending; their runs' retained progress re-applies them on the next start", zap.Error(err))
		}
	}
	if s.bus != nil {
		s.bus.Close()
	}
	if s.store != nil {
		s.store.Close()
	}
	if s.pg != nil {
		pctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		if err := s.pg.Stop(pctx); err != nil {
			s.log.Error("stopping the managed postgresql failed", zap.Error(err))
		}
		cancel()
	}
	if s.nats != nil {
		s.nats.Shutdown()
	}
	if s.unlock != nil {
		s.unlock()
	}
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

// handleTrack serves `finalizer track`.
func (s *service) handleTrack(ctx context.Context, r listener.TrackRequest) listener.TrackReply {
	spec, err := progress.ParseSpec(r.Spec)
	if err != nil {
		return listener.TrackReply{Error: err.Error()}
	}
	if r.QueryID == "" || r.RunID == "" || r.Table == "" {
		return listener.TrackReply{Error: "query id, run id and table are required"}
	}
	// Checked before anything is persisted: a track that can never receive
	// an event would otherwise fail again at every restart.
	r.QueryID, r.RunID = strings.ToLower(r.QueryID), strings.ToLower(r.RunID)
	if err := checkIDs(r.QueryID, r.RunID); err != nil {
		return listener.TrackReply{Error: err.Error()}
	}
	ok, err := s.reg.Track(ctx, finalizer.Request{QueryID: r.QueryID, RunID: r.RunID, Table: r.Table, Spec: spec, Explicit: true, Supersede: true})
	if err != nil {
		return listener.TrackReply{Error: err.Error()}
	}
	return listener.TrackReply{OK: true, Tracked: ok}
}

// handleJoin serves `finalizer join`.
func (s *service) handleJoin(ctx context.Context, r listener.JoinRequest) listener.JoinReply {
	if r.Timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, r.Timeout)
		defer cancel()
	}
	res, err := s.reg.Join(ctx, r.RunID)
	if err != nil {
		return listener.JoinReply{Error: err.Error()}
	}
	return listener.JoinReply{Done: res.Done, LastError: res.LastError}
}

// splitListen parses host:port.
func splitListen(addr string) (string, int, error) {
	host, p, err := net.SplitHostPort(addr)
	if err != nil {
		return "", 0, err
	}
	port, err := strconv.Atoi(p)
	if err != nil {
		return "", 0, fmt.Errorf("port %q: %w", p, err)
	}
	if port == 0 {
		port = -1 // the embedded server's "pick a free port"
	}
	return host, port, nil
}
