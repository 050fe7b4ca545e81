package main

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/finalizer-dev/finalizer/control"
	"github.com/finalizer-dev/finalizer/finalizer"
	"github.com/finalizer-dev/finalizer/internal/actions"
	"github.com/finalizer-dev/finalizer/internal/ownership"
	"github.com/finalizer-dev/finalizer/listener"
	"github.com/finalizer-dev/finalizer/progress"
)

// Defaults of the service's configuration (docs/contract.md §3, §7).
const (
	DefaultDataDir     = "./finalizer-data"
	DefaultNATSListen  = "127.0.0.1:4222"
	DefaultNATSURL     = "nats://127.0.0.1:4222"
	DefaultHTTPListen  = "127.0.0.1:8080"
	DefaultHTTPURL     = "http://127.0.0.1:8080"
	DefaultShutdown    = 10 * time.Second
	DefaultStaleAfter  = finalizer.DefaultStaleAfter
	DefaultExpireAfter = finalizer.DefaultExpireAfter
)

// maxStreamReplicas is JetStream's largest replica count.
const maxStreamReplicas = 5

// maxOwnershipBuckets bounds ownership.buckets: a bucket is an advisory
// lock held by one replica's session.
const maxOwnershipBuckets = 4096

// Config is the service's configuration: the YAML file, then environment
// variables and flags over it.
type Config struct {
	NATS         NATSConfig      `yaml:"nats"`
	Postgres     PostgresConfig  `yaml:"postgres"`
	ControlTable string          `yaml:"control_table"`
	Prefix       string          `yaml:"subject_prefix"`
	Stream       StreamConfig    `yaml:"stream"`
	HTTP         HTTPConfig      `yaml:"http"`
	DataDir      string          `yaml:"data_dir"`
	Log          LogConfig       `yaml:"log"`
	Tracking     TrackingConfig  `yaml:"tracking"`
	Ownership    OwnershipConfig `yaml:"ownership"`
	Tables       []TableConfig   `yaml:"tables"`
}

// NATSConfig says which NATS to use: an external server (URL) or the
// embedded one (Listen).
type NATSConfig struct {
	URL       string `yaml:"url"`
	Listen    string `yaml:"listen"`
	APIPrefix string `yaml:"api_prefix"`
	User      string `yaml:"user"`
	Password  string `yaml:"password"`
	Token     string `yaml:"token"`
	NKeySeed  string `yaml:"nkey_seed_file"`
	Creds     string `yaml:"credentials_file"`
	TLSCA     string `yaml:"tls_ca_file"`
	TLSCert   string `yaml:"tls_cert_file"`
	TLSKey    string `yaml:"tls_key_file"`
	// Embedded configures the embedded server (when URL is empty).
	Embedded EmbeddedNATSConfig `yaml:"embedded"`
}

// EmbeddedNATSConfig secures the embedded NATS server: who may log in
// and what they may do, and TLS.
type EmbeddedNATSConfig struct {
	// Users, when set, turn authentication on; the service logs in as its
	// own user, with a password made at start.
	Users []EmbeddedUserConfig `yaml:"users"`
	// TLS makes clients connect with TLS.
	TLS EmbeddedTLSConfig `yaml:"tls"`
	// AllowAnonymous accepts a non-loopback listen address without users.
	AllowAnonymous bool `yaml:"allow_anonymous"`
}

// EmbeddedUserConfig is one login of the embedded server: user and
// password (plain, or a bcrypt hash), or an NKey public key; and a role
// (publisher, operator or admin).
type EmbeddedUserConfig struct {
	User     string `yaml:"user"`
	Password string `yaml:"password"`
	NKey     string `yaml:"nkey"`
	Role     string `yaml:"role"`
}

// EmbeddedTLSConfig is the embedded server's certificate and key, and the
// CA its clients' certificates must be signed by (mutual TLS) if set.
type EmbeddedTLSConfig struct {
	CertFile     string `yaml:"cert_file"`
	KeyFile      string `yaml:"key_file"`
	ClientCAFile string `yaml:"client_ca_file"`
}

// PostgresConfig says which PostgreSQL to use; an empty URL means the
// managed private cluster under the data dir.
type PostgresConfig struct {
	URL       string `yaml:"url"`
	NoMigrate bool   `yaml:"no_migrate"`
}

// StreamConfig is the JetStream stream that retains the last events. The
// service creates it with these settings; of an existing stream it only
// reports the settings that differ (listener.EnsureStream).
type StreamConfig struct {
	Name   string   `yaml:"name"`
	MaxAge Duration `yaml:"max_age"`
	// MaxBytes bounds the stream finalizer creates (or one it finds
	// unbounded); 0 = listener.DefaultMaxBytes.
	MaxBytes int64 `yaml:"max_bytes"`
	// Replicas is 1 (the default) on one server, 3 on a three-node
	// JetStream cluster; at most 5.
	Replicas  int             `yaml:"replicas"`
	Placement StreamPlacement `yaml:"placement"`
}

// StreamPlacement puts the stream on a named JetStream cluster and/or on
// servers that have all the tags.
type StreamPlacement struct {
	Cluster string   `yaml:"cluster"`
	Tags    []string `yaml:"tags"`
}

// HTTPConfig is the HTTP API's listen address ("" or "off" disables it)
// and its bearer token. A non-loopback listen needs a token, or Insecure.
type HTTPConfig struct {
	Listen   string `yaml:"listen"`
	Token    string `yaml:"token"`
	Insecure bool   `yaml:"insecure"`
}

// LogConfig sets the log format (json or console) and level.
type LogConfig struct {
	Format string `yaml:"format"`
	Level  string `yaml:"level"`
}

// TrackingConfig holds the tracker tunables.
type TrackingConfig struct {
	StaleAfter  Duration `yaml:"stale_after"`
	ExpireAfter Duration `yaml:"expire_after"`
	// MaxTrackers caps the trackers running at once (one per run and
	// table: a run into two tables counts twice); 0 = the default,
	// negative = no cap.
	MaxTrackers int      `yaml:"max_trackers"`
	FutureSkew  Duration `yaml:"future_skew"`
	Shutdown    Duration `yaml:"shutdown_timeout"`
	// MemoryLimit is "auto" (the default: a soft memory limit the service
	// sets for itself from its live heap and tracked runs, ADR 0022) or
	// "off" (the Go runtime's default). GOMEMLIMIT, when set, wins.
	MemoryLimit string `yaml:"memory_limit"`
	// MemoryHeadroom is how far the heap may grow above what is live
	// under the auto limit, as a share of the live heap; 0 = the default
	// (memlimit.DefaultHeadroom, 0.5). 1.0 makes the collector run about
	// as often as the Go runtime's default.
	MemoryHeadroom float64 `yaml:"memory_headroom"`
}

// OwnershipConfig is how replicas share the writes of the tables
// (ADR 0020): each replica writes the tables of the buckets whose
// PostgreSQL advisory lock it holds and holds the advances of the others.
type OwnershipConfig struct {
	// Enabled: true by default; false makes every replica write every
	// advance (active-active, a statement per replica per advance).
	Enabled bool `yaml:"enabled"`
	// Buckets is how many buckets the tables are hashed into; every
	// replica must use the same.
	Buckets int `yaml:"buckets"`
	// Balance spreads the buckets over the live replicas; false (the
	// default) lets one replica own them all, which costs the fewest
	// statements (one group commit for all the tables).
	Balance bool `yaml:"balance"`
	// Poll is how often a replica looks at the locks: a takeover's bound.
	Poll Duration `yaml:"poll_interval"`
	// Grace is how long a replica waits for the owner to write an advance
	// it holds before it writes it itself.
	Grace Duration `yaml:"grace"`
}

// TableConfig is one declarative tracking rule: the table, the query it
// tracks, and the tracking spec (time, source, granularity, timezone,
// delay and the guards' options, progress.SpecOptions).
type TableConfig struct {
	Table                string `yaml:"table"`
	Query                string `yaml:"query"`
	progress.SpecOptions `yaml:",inline"`
	// Feeders are the queries (names or ids) expected to write the table
	// (ADR 0015); Retire is never (default) or on_clean_termination.
	Feeders []string `yaml:"feeders"`
	Retire  string   `yaml:"retire"`
	// Actions announce each period of the table that becomes final
	// (issue 19): nats, webhook, marker.
	Actions []actions.Config `yaml:"actions"`
}

// Duration is a time.Duration written as "10m" in YAML.
type Duration time.Duration

// UnmarshalYAML reads a Go duration string.
func (d *Duration) UnmarshalYAML(n *yaml.Node) error {
	var s string
	if err := n.Decode(&s); err != nil {
		return err
	}
	v, err := time.ParseDuration(s)
	if err != nil {
		// A TypeError, so that decoding goes on and reports the other
		// errors of the file (unknown keys) too.
		return &yaml.TypeError{Errors: []string{fmt.Sprintf("line %d: %q is not a duration (e.g. 10m, 1h30m)", n.Line, s)}}
	}
	*d = Duration(v)
	return nil
}

// defaultConfig returns the embedded defaults.
func defaultConfig() Config {
	return Config{
		NATS:         NATSConfig{Listen: DefaultNATSListen, APIPrefix: listener.DefaultAPIPrefix},
		ControlTable: control.DefaultTable,
		Prefix:       listener.DefaultPrefix,
		Stream:       StreamConfig{Name: listener.DefaultStream, MaxAge: Duration(listener.DefaultMaxAge), Replicas: 1},
		HTTP:         HTTPConfig{Listen: DefaultHTTPListen},
		DataDir:      DefaultDataDir,
		Log:          LogConfig{Format: "json", Level: "info"},
		Tracking: TrackingConfig{
			StaleAfter:  Duration(DefaultStaleAfter),
			ExpireAfter: Duration(DefaultExpireAfter),
			FutureSkew:  Duration(finalizer.DefaultFutureSkew),
			Shutdown:    Duration(DefaultShutdown),
			MemoryLimit: "auto",
		},
		Ownership: OwnershipConfig{
			Enabled: true, Buckets: ownership.DefaultBuckets,
			Poll: Duration(ownership.DefaultPoll), Grace: Duration(ownership.DefaultGrace),
		},
	}
}

// loadConfigFile reads path over cfg: unknown keys are errors that name
// the key and line, and $VARS are expanded in values only, after parsing
// (see expandValue).
func loadConfigFile(path string, cfg *Config) error {
	raw, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("config: %w", err)
	}
	if err := unknownKey(raw); err != nil {
		return fmt.Errorf("config %s: %w", path, err) // in the user's words, not Go's type names
	}
	if err := unknownKeys(raw); err != nil {
		return fmt.Errorf("config %s: %w", path, err)
	}
	var doc yaml.Node
	if err := yaml.NewDecoder(bytes.NewReader(raw)).Decode(&doc); err != nil {
		if errors.Is(err, io.EOF) {
			return nil
		}
		return fmt.Errorf("config %s: %w", path, err)
	}
	// An unset variable is empty, and validation names the field that
	// ends up empty.
	if err := expandNode(&doc); err != nil {
		return fmt.Errorf("config %s: %w", path, err)
	}
	if err := doc.Decode(cfg); err != nil {
		return fmt.Errorf("config %s: %w", path, err)
	}
	return nil
}

// rules validates the tables section and returns its rules.
func (c Config) rules() ([]finalizer.Rule, error) {
	var out []finalizer.Rule
	for i, t := range c.Tables {
		spec, err := progress.ParseSpec(t.SpecOptions)
		if err != nil {
			return nil, fmt.Errorf("config tables[%d] (%s): %w", i, t.Table, err)
		}
		r := finalizer.Rule{Table: t.Table, Query: t.Query, Spec: spec, Feeders: t.Feeders, Retire: t.Retire}
		if err := r.Validate(); err != nil {
			return nil, fmt.Errorf("config tables[%d]: %w", i, err)
		}
		out = append(out, r)
	}
	return out, nil
}

// actionRules validates the actions of every rule and returns the rules
// that have some, in config order: an unknown kind, a secret's variable
// that is not set, a marker directory that cannot be written are errors
// naming the field (tables[i].actions[j]...). It creates a marker's
// directory when missing, so it runs at serve only.
func (c Config) actionRules(getenv func(string) string) ([]actions.Rule, error) {
	var out []actions.Rule
	for i, t := range c.Tables {
		if len(t.Actions) == 0 {
			continue
		}
		spec, err := progress.ParseSpec(t.SpecOptions)
		if err != nil {
			return nil, fmt.Errorf("config tables[%d] (%s): %w", i, t.Table, err)
		}
		as, err := actions.Build(fmt.Sprintf("config tables[%d].actions", i), t.Actions, getenv)
		if err != nil {
			return nil, err
		}
		out = append(out, actions.Rule{Table: t.Table, Granularity: spec.Granularity, Location: spec.Location, Actions: as})
	}
	if err := actions.Name(out); err != nil {
		return nil, fmt.Errorf("config tables: %w", err)
	}
	return out, nil
}

// validate checks what flags and the file cannot check by type.
func (c Config) validate() error {
	if _, _, err := control.ParseTableName(c.ControlTable); err != nil {
		return fmt.Errorf("control_table %q: %w", c.ControlTable, err)
	}
	if c.Prefix == "" || strings.ContainsAny(c.Prefix, "*> \t") || strings.HasPrefix(c.Prefix, ".") || strings.HasSuffix(c.Prefix, ".") || strings.Contains(c.Prefix, "..") {
		return fmt.Errorf("subject_prefix %q: want one or more NATS tokens separated by dots, without wildcards", c.Prefix)
	}
	switch c.Log.Format {
	case "json", "console":
	default:
		return fmt.Errorf("log.format %q: want json or console", c.Log.Format)
	}
	if c.Stream.Replicas < 1 || c.Stream.Replicas > maxStreamReplicas {
		return fmt.Errorf("stream.replicas %d: want 1 to %d (3 on a three-node cluster)", c.Stream.Replicas, maxStreamReplicas)
	}
	if c.Stream.MaxAge <= 0 {
		return fmt.Errorf("stream.max_age %v: want a positive duration", time.Duration(c.Stream.MaxAge))
	}
	if c.NATS.URL == "" && c.Stream.Replicas > 1 {
		return fmt.Errorf("stream.replicas %d: the embedded server is a single node; replicas need an external JetStream cluster (nats.url)", c.Stream.Replicas)
	}
	if c.Ownership.Buckets < 1 || c.Ownership.Buckets > maxOwnershipBuckets {
		return fmt.Errorf("ownership.buckets %d: want 1 to %d (the same on every replica)", c.Ownership.Buckets, maxOwnershipBuckets)
	}
	if c.Ownership.Poll <= 0 || c.Ownership.Grace <= 0 {
		return fmt.Errorf("ownership.poll_interval %v, ownership.grace %v: want positive durations",
			time.Duration(c.Ownership.Poll), time.Duration(c.Ownership.Grace))
	}
	switch c.Tracking.MemoryLimit {
	case "auto", "off":
	default:
		return fmt.Errorf("tracking.memory_limit %q: want auto or off (a fixed limit is the GOMEMLIMIT environment variable)", c.Tracking.MemoryLimit)
	}
	if h := c.Tracking.MemoryHeadroom; h != 0 && !(h >= 0.1 && h <= 4) { // NaN fails every comparison
		return fmt.Errorf("tracking.memory_headroom %v: want a share of the live heap from 0.1 to 4 (0: the default, 0.5)", h)
	}
	if c.NATS.URL == "" && c.NATS.Listen == "" {
		return fmt.Errorf("nats: set url (external server) or listen (embedded server)")
	}
	if err := c.NATS.Embedded.validate(); err != nil {
		return err
	}
	if err := c.checkExposure(); err != nil {
		return err
	}
	if _, err := c.rules(); err != nil {
		return err
	}
	return nil
}
