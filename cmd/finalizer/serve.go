package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strconv"
	"time"

	"github.com/spf13/cobra"
	"go.uber.org/zap"

	"github.com/finalizer-dev/finalizer/control"
	"github.com/finalizer-dev/finalizer/finalizer"
	"github.com/finalizer-dev/finalizer/internal/embeddednats"
	"github.com/finalizer-dev/finalizer/internal/memlimit"
	"github.com/finalizer-dev/finalizer/internal/service"
	"github.com/finalizer-dev/finalizer/listener"
)

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
pending (bounded by tracking.shutdown_timeout), the embedded servers stop.

A rule's actions (tables[].actions: nats, webhook, marker) announce each period of its
table that becomes final, once, in order, from an outbox kept in PostgreSQL (README,
"Actions"). A bad action (an unknown kind, a webhook secret_env that is not set, a
marker directory that cannot be written) stops the start with an error naming the field.

Before it starts anything slow (the managed PostgreSQL takes seconds), serve binds every
address it will listen on (--http-listen, also /metrics, and --nats-listen), reads the
NATS client's TLS and credential files and parses the PostgreSQL URL: a taken port or an
unreadable file fails at once, exit code 2, naming the address and its flag (and how to
find what holds a port: ss -ltnp 'sport = :8080'). A later failure stops what started.`,
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
	fs.Int("stream-replicas", 1, "replicas of the JetStream stream the service creates (3 on a three-node cluster)")
	fs.String("subject-prefix", "", `subject prefix of the listener events (default "`+listener.DefaultPrefix+`")`)
	fs.String("log-format", "", `log format: json or console (default "json")`)
	fs.String("log-level", "", `log level: debug, info, warn, error (default "info")`)
	fs.String("memory-limit", "", `soft memory limit: auto (from the live heap and the tracked runs) or off (default "auto"); GOMEMLIMIT, when set, wins`)
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
	set("memory-limit", &cfg.Tracking.MemoryLimit)
	for name, dst := range map[string]*bool{"no-migrate": &cfg.Postgres.NoMigrate, "http-insecure": &cfg.HTTP.Insecure,
		"nats-allow-anonymous": &cfg.NATS.Embedded.AllowAnonymous} {
		if fl := fs.Lookup(name); fl.Changed {
			*dst = fl.Value.String() == "true"
		}
	}
	if fl := fs.Lookup("stream-replicas"); fl.Changed {
		n, err := fs.GetInt("stream-replicas")
		if err != nil {
			return cfg, err
		}
		cfg.Stream.Replicas = n
	}
	applyNATSAuthFlags(fs, &cfg.NATS)
	return cfg, cfg.validate()
}

func serve(ctx context.Context, cfg Config, stdout, stderr io.Writer) error {
	log, err := newLogger(cfg.Log, stderr)
	if err != nil {
		return usageError(err)
	}
	defer func() { _ = log.Sync() }()
	started := time.Now()
	o, err := serviceOptions(cfg, log, stdout)
	if err != nil {
		return usageError(err)
	}
	svc, err := service.Start(ctx, o)
	if err != nil {
		log.Error("start failed", zap.Error(err))
		return usageError(err)
	}
	log.Info("finalizer ready", zap.Duration("startup", time.Since(started)))
	fmt.Fprintf(stdout, "finalizer: ready in %s\n", time.Since(started).Round(time.Millisecond))
	if err := svc.Run(ctx, time.Duration(cfg.Tracking.Shutdown)); err != nil {
		return err
	}
	log.Info("stopped cleanly")
	return nil
}

// serviceOptions turns the configuration into the service's options.
func serviceOptions(cfg Config, log *zap.Logger, stdout io.Writer) (service.Options, error) {
	rules, err := cfg.rules()
	if err != nil {
		return service.Options{}, err
	}
	actionRules, err := cfg.actionRules(os.Getenv)
	if err != nil {
		return service.Options{}, err
	}
	o := service.Options{
		Logger: log, Stdout: stdout, DataDir: cfg.DataDir,
		NATS: listener.Options{
			URL: cfg.NATS.URL, Prefix: cfg.Prefix, Stream: cfg.Stream.Name, MaxAge: time.Duration(cfg.Stream.MaxAge),
			MaxBytes: cfg.Stream.MaxBytes,
			Replicas: cfg.Stream.Replicas, PlacementCluster: cfg.Stream.Placement.Cluster, PlacementTags: cfg.Stream.Placement.Tags,
			APIPrefix: cfg.NATS.APIPrefix,
		},
		PostgresURL: cfg.Postgres.URL, ControlTable: cfg.ControlTable, NoMigrate: cfg.Postgres.NoMigrate,
		Registry: finalizer.RegistryConfig{
			Rules:       rules,
			Tracker:     finalizer.TrackerOptions{FutureSkew: time.Duration(cfg.Tracking.FutureSkew)},
			StaleAfter:  time.Duration(cfg.Tracking.StaleAfter),
			ExpireAfter: time.Duration(cfg.Tracking.ExpireAfter),
			MaxTrackers: cfg.Tracking.MaxTrackers,
		},
		Actions:        actionRules,
		MemoryLimitOff: cfg.Tracking.MemoryLimit == "off",
		MemoryLimit:    memlimit.Options{Headroom: cfg.Tracking.MemoryHeadroom},
		Ownership: service.Ownership{
			Off: !cfg.Ownership.Enabled, Balance: cfg.Ownership.Balance, Buckets: cfg.Ownership.Buckets,
			Poll: time.Duration(cfg.Ownership.Poll), Grace: time.Duration(cfg.Ownership.Grace),
		},
		HTTPListen: cfg.HTTP.Listen,
		HTTPHandler: func(svc *service.Service) http.Handler {
			return requireToken(cfg.HTTP.Token, newHTTPHandler(svc))
		},
	}
	auth := cfg.NATS
	if cfg.NATS.URL == "" {
		host, port, err := splitListen(cfg.NATS.Listen)
		if err != nil {
			return o, fmt.Errorf("nats listen: %w", err)
		}
		users, user, password, err := embeddedAuth(cfg)
		if err != nil {
			return o, err
		}
		tls := embeddedTLS(cfg.NATS.Embedded.TLS)
		o.EmbeddedNATS = &embeddednats.Options{Host: host, Port: port, Users: users, TLS: tls}
		// The owner's login, in <data-dir>/nats-login.json (0600), unless
		// the server is to trust everyone who can connect.
		o.LocalLogin = len(users) > 0 || !cfg.NATS.Embedded.AllowAnonymous
		// The service logs in as its own user; the client TLS settings
		// (tls_ca_file, tls_cert_file) apply to its embedded server too,
		// and without tls_ca_file it trusts the server's own certificate.
		auth = NATSConfig{User: user, Password: password, TLSCA: cfg.NATS.TLSCA, TLSCert: cfg.NATS.TLSCert, TLSKey: cfg.NATS.TLSKey}
		if tls != nil && auth.TLSCA == "" {
			auth.TLSCA = tls.CertFile
		}
	}
	o.NATS.User, o.NATS.Password, o.NATS.Token = auth.User, auth.Password, auth.Token
	o.NATS.NKeySeedFile, o.NATS.CredsFile = auth.NKeySeed, auth.Creds
	o.NATS.TLSCAFile, o.NATS.TLSCertFile, o.NATS.TLSKeyFile = auth.TLSCA, auth.TLSCert, auth.TLSKey
	return o, nil
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
