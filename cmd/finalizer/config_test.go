package main

import (
	"bytes"
	"context"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/finalizer-dev/finalizer/internal/pgcluster/pgtest"
)

// TestMain starts one throwaway PostgreSQL cluster for the tests that run
// the commands against a control table (pgtest.URL), and checks for leaked
// goroutines after the run, as goleak.VerifyTestMain did.
func TestMain(m *testing.M) { pgtest.Main(m) }

func writeConfig(t *testing.T, body string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "finalizer.yaml")
	if err := os.WriteFile(path, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// resolveServe parses serve's flags as the command line would and returns
// the merged configuration.
func resolveServe(t *testing.T, args ...string) (Config, error) {
	t.Helper()
	cmd := newServeCmd(&bytes.Buffer{}, &bytes.Buffer{})
	if err := cmd.ParseFlags(args); err != nil {
		t.Fatal(err)
	}
	if err := applyEnv(cmd.Flags()); err != nil {
		return Config{}, err
	}
	var f serveFlags
	f.cfg = defaultConfig()
	f.configFile, _ = cmd.Flags().GetString("config")
	return f.resolve(cmd)
}

func TestConfigPrecedence(t *testing.T) {
	t.Setenv("ORDERS_QUERY", "orders-v1")
	path := writeConfig(t, `
control_table: ops.finalization
subject_prefix: acme.spark
http: {listen: "127.0.0.1:9999"}
tables:
  - table: bronze.orders
    query: $ORDERS_QUERY
    granularity: day
    timezone: Europe/London
`)
	t.Setenv("FINALIZER_SUBJECT_PREFIX", "from.env")
	cfg, err := resolveServe(t, "--config", path, "--http-listen", "127.0.0.1:7777")
	if err != nil {
		t.Fatal(err)
	}
	if cfg.ControlTable != "ops.finalization" {
		t.Errorf("control table %q: the file sets it", cfg.ControlTable)
	}
	if cfg.Prefix != "from.env" {
		t.Errorf("prefix %q: the environment beats the file", cfg.Prefix)
	}
	if cfg.HTTP.Listen != "127.0.0.1:7777" {
		t.Errorf("http listen %q: a flag beats the file", cfg.HTTP.Listen)
	}
	rules, err := cfg.rules()
	if err != nil || len(rules) != 1 || rules[0].Query != "orders-v1" || rules[0].Spec.Location.String() != "Europe/London" {
		t.Fatalf("rules = %+v, %v; want the $VAR expanded and the spec parsed", rules, err)
	}
	if cfg.NATS.Listen != DefaultNATSListen || cfg.DataDir != DefaultDataDir {
		t.Errorf("defaults lost: %+v", cfg)
	}
}

func TestConfigErrorsNameTheField(t *testing.T) {
	cases := []struct{ body, want string }{
		{"tabels: []\n", "tabels"},
		{"tables:\n  - table: t\n    query: q\n    granularity: week\n", `granularity "week"`},
		{"tables:\n  - table: t\n    query: q\n    timezone: Mars/Olympus\n", "Mars/Olympus"},
		{"tables:\n  - table: t\n    query: \"[a-\"\n", "not a valid glob"},
		{"control_table: \"x; DROP TABLE y\"\n", "control_table"},
		{"subject_prefix: \"spark.>\"\n", "subject_prefix"},
		{"tracking: {stale_after: soon}\n", "not a duration"},
		{"log: {format: xml}\n", "log.format"},
		{"tracking: {memory_limit: 2GiB}\n", "tracking.memory_limit"},
		{"tracking: {memory_headroom: 50}\n", "tracking.memory_headroom"},
		{"tracking: {memory_headroom: .nan}\n", "tracking.memory_headroom NaN"},
		{"tracking: {memory_headroom: -0.5}\n", "tracking.memory_headroom -0.5"},
		{"tables:\n  - table: t\n    query: q\n    retire: always\n", `retire "always"`},
		{"tables:\n  - table: \"s.{name}\"\n    query: q\n    feeders: [a]\n", "feeders need one table"},
	}
	for _, c := range cases {
		t.Run(c.want, func(t *testing.T) {
			_, err := resolveServe(t, "--config", writeConfig(t, c.body))
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("err = %v, want it to name %q", err, c.want)
			}
		})
	}
}

func TestEmptyConfigFileIsFine(t *testing.T) {
	if _, err := resolveServe(t, "--config", writeConfig(t, "")); err != nil {
		t.Fatal(err)
	}
}

func TestParseTS(t *testing.T) {
	want := time.Date(2026, 9, 28, 15, 0, 0, 0, time.UTC)
	for _, s := range []string{"2026-09-28T15:00:00Z", "2026-09-28T12:00:00-03:00", "2026-09-28T15:00:00", "2026-09-28 15:00:00", "2026-09-28T15:00"} {
		got, err := parseTS(s)
		if err != nil || !got.Equal(want) {
			t.Errorf("parseTS(%q) = %v, %v; want %v", s, got, err, want)
		}
	}
	if _, err := parseTS("tomorrow"); err == nil {
		t.Error("parseTS(tomorrow) accepted")
	}
}

func TestUsageErrorsExitTwoWithOneLine(t *testing.T) {
	var out, errOut bytes.Buffer
	code := run(context.Background(), []string{"is-final", "--table", "t"}, nil, &out, &errOut)
	if code != exitUsage {
		t.Fatalf("exit %d, want 2", code)
	}
	if lines := strings.Count(strings.TrimSpace(errOut.String()), "\n"); lines != 0 || !strings.Contains(errOut.String(), "--period-end") {
		t.Fatalf("stderr = %q, want one line naming --period-end", errOut.String())
	}
	errOut.Reset()
	if code := run(context.Background(), []string{"serve", "--no-such-flag"}, nil, &out, &errOut); code != exitUsage {
		t.Fatalf("unknown flag: exit %d, want 2", code)
	}
}

func TestEveryCommandHasHelp(t *testing.T) {
	for _, name := range []string{"serve", "track", "join", "status", "is-final", "wait", "publish", "version"} {
		var out bytes.Buffer
		if code := run(context.Background(), []string{name, "--help"}, nil, &out, &out); code != 0 {
			t.Errorf("%s --help: exit %d", name, code)
		}
		if !strings.Contains(out.String(), "Exit codes") && name != "serve" {
			t.Errorf("%s --help does not state its exit codes:\n%s", name, out.String())
		}
	}
}

func TestConfigStream(t *testing.T) {
	path := writeConfig(t, `
nats: {url: "nats://a:4222,nats://b:4222,nats://c:4222"}
stream:
  replicas: 3
  max_age: 48h
  placement: {cluster: east, tags: [ssd, fast]}
`)
	cfg, err := resolveServe(t, "--config", path)
	if err != nil {
		t.Fatal(err)
	}
	s := cfg.Stream
	if s.Replicas != 3 || time.Duration(s.MaxAge) != 48*time.Hour || s.Placement.Cluster != "east" || len(s.Placement.Tags) != 2 || s.Name != "SPARK_EVENTS" {
		t.Fatalf("stream = %+v", s)
	}
	t.Setenv("FINALIZER_STREAM_REPLICAS", "5")
	if cfg, err = resolveServe(t, "--config", path); err != nil || cfg.Stream.Replicas != 5 {
		t.Fatalf("replicas from the environment: %d, %v", cfg.Stream.Replicas, err)
	}
	if cfg, err = resolveServe(t, "--config", path, "--stream-replicas", "1"); err != nil || cfg.Stream.Replicas != 1 {
		t.Fatalf("replicas from the flag: %d, %v", cfg.Stream.Replicas, err)
	}
	for _, bad := range []struct {
		args []string
		want string
	}{
		{[]string{"--config", path, "--stream-replicas", "0"}, "stream.replicas 0"},
		{[]string{"--config", path, "--stream-replicas", "7"}, "stream.replicas 7"},
		{[]string{"--stream-replicas", "3"}, "embedded server is a single node"},
	} {
		t.Setenv("FINALIZER_STREAM_REPLICAS", "")
		os.Unsetenv("FINALIZER_STREAM_REPLICAS")
		if _, err := resolveServe(t, bad.args...); err == nil || !strings.Contains(err.Error(), bad.want) {
			t.Errorf("%v: err = %v, want %q", bad.args, err, bad.want)
		}
	}
}

// TestUnknownKeyInTheUsersWords: an unknown key is named with where it is
// and the closest known key, not with Go's type names.
func TestUnknownKeyInTheUsersWords(t *testing.T) {
	cases := []struct{ body, want string }{
		{"tables:\n  - table: t\n    query: q\n    granulrity: hour\n", `line 4: unknown key "granulrity" in tables[0]; did you mean "granularity"?`},
		{"tables:\n  - {table: a, query: a}\n  - {table: b, query: b, tiemzone: UTC}\n", `unknown key "tiemzone" in tables[1]; did you mean "timezone"?`},
		{"nats:\n  embedded:\n    tls: {cert_fiel: x}\n", `unknown key "cert_fiel" in nats.embedded.tls; did you mean "cert_file"?`},
		{"tabels: []\n", `unknown key "tabels" at the top level; did you mean "tables"?`},
		{"completely_else: 1\n", `unknown key "completely_else" at the top level`},
	}
	for _, c := range cases {
		t.Run(c.want, func(t *testing.T) {
			_, err := resolveServe(t, "--config", writeConfig(t, c.body))
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("err = %v, want %q", err, c.want)
			}
			if strings.Contains(err.Error(), "main.") || strings.Contains(err.Error(), "did you mean") != strings.Contains(c.want, "did you mean") {
				t.Fatalf("err = %v", err)
			}
		})
	}
}

// The examples' config loads: a rule's spec keys (time, granularity, ...)
// are inlined into tables[] and are known keys.
func TestExampleConfigLoads(t *testing.T) {
	cfg := defaultConfig()
	if err := loadConfigFile("../../examples/finalizer.yaml", &cfg); err != nil {
		t.Fatal(err)
	}
	if len(cfg.Tables) != 2 || cfg.Tables[0].Time != "offset:/commit_ts" || cfg.Tables[1].Delay != "10m" {
		t.Fatalf("tables = %+v", cfg.Tables)
	}
}

// A rule's feeders and lifecycle (ADR 0015) reach the rule.
func TestConfigFeeders(t *testing.T) {
	cfg, err := resolveServe(t, "--config", writeConfig(t, "tables:\n  - table: silver.all\n    query: \"region-*\"\n    feeders: [region-us, region-eu]\n    retire: on_clean_termination\n"))
	if err != nil {
		t.Fatal(err)
	}
	rules, err := cfg.rules()
	if err != nil || len(rules) != 1 || len(rules[0].Feeders) != 2 || rules[0].Feeders[1] != "region-eu" || rules[0].Retire != "on_clean_termination" {
		t.Fatalf("rules = %+v, %v", rules, err)
	}
}

// The memory limit's keys reach the service: off by the flag, the
// headroom from the file; auto by default (ADR 0022, addendum 2).
func TestMemoryLimitConfig(t *testing.T) {
	dir := t.TempDir()
	cfg, err := resolveServe(t, "--data-dir", dir)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Tracking.MemoryLimit != "auto" {
		t.Errorf("tracking.memory_limit = %q by default, want auto", cfg.Tracking.MemoryLimit)
	}
	cfg, err = resolveServe(t, "--data-dir", dir, "--memory-limit", "off", "--config", writeConfig(t, "tracking: {memory_headroom: 0.75}\n"))
	if err != nil {
		t.Fatal(err)
	}
	o, err := serviceOptions(cfg, zap.NewNop(), io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if !o.MemoryLimitOff || o.MemoryLimit.Headroom != 0.75 {
		t.Errorf("service options: memory limit off %v, headroom %v; want true, 0.75", o.MemoryLimitOff, o.MemoryLimit.Headroom)
	}
}
