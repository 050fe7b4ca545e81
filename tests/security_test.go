//go:build linux

package tests

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"net/url"
	"os"
	"os/user"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/finalizer-dev/finalizer/internal/natstest"
	"github.com/finalizer-dev/finalizer/internal/testpki"

	"github.com/jackc/pgx/v5"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

	"github.com/finalizer-dev/finalizer/internal/embeddednats"
	"github.com/finalizer-dev/finalizer/internal/pgcluster/pgtest"
)

// A test NKey (a fixture, not a secret).
const (
	testNKeySeed = "SUAHLLZREFSXYW6XI3FKC3KNDU4D6RQRCUWU2FJ6V2METP6VBMG5QLHCO4"
	testNKeyPub  = "UB3M53S4PGQCZ2ASMR22ZH2644MLR6JAL3R72O43M6Y7H5ZBRCE7CP52"
)

// outputs collects everything the service and the commands printed, to
// check that no secret ever shows.
type outputs struct {
	mu  sync.Mutex
	all []string
}

func (o *outputs) add(s ...string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.all = append(o.all, s...)
}

// noSecrets fails the test when any output holds one of the secrets.
func (o *outputs) noSecrets(t *testing.T, secrets ...string) {
	t.Helper()
	o.mu.Lock()
	defer o.mu.Unlock()
	for _, out := range o.all {
		for _, s := range secrets {
			if s != "" && strings.Contains(out, s) {
				t.Errorf("secret %q.. shows in output:\n%s", s[:min(len(s), 6)], grep(out, s))
			}
		}
	}
}

// run runs a command, remembers its output, and returns its exit code.
func (o *outputs) run(t *testing.T, env []string, args ...string) (int, string) {
	t.Helper()
	code, out, e := cli(t, env, args...)
	o.add(out, e)
	return code, out + e
}

// NATS client authentication for serve, track, publish and join: user and
// password, token, NKey seed, credentials (JWT) file, and TLS with a CA
// and a client certificate, from flags, environment or the config file.
// Without the credential each command fails at once with exit 2, and no
// secret ever shows in a log or an output.
func TestNATSClientAuthentication(t *testing.T) {
	pki := testpki.New(t)
	seedFile := writeFile(t, t.TempDir(), "user.nk", testNKeySeed+"\n", 0o600)
	creds, err := os.ReadFile(filepath.Join("testdata", "user.creds"))
	if err != nil {
		t.Fatal(err)
	}
	credsFile := writeFile(t, t.TempDir(), "user.creds", string(creds), 0o600)
	clientKey, _ := os.ReadFile(pki.ClientKey)
	const password, token = "pw-3f9c1d7e-password", "tok-8a6b2c4d-token"

	for _, tc := range []struct {
		name    string
		server  func(t *testing.T) string // returns the URL
		config  string                    // the nats section of serve's config
		serve   []string                  // serve's flags
		client  []string                  // flags of track, publish, join
		env     []string                  // environment of every command
		cenv    []string                  // more environment of track, publish, join
		secrets []string
	}{
		{
			name: "user and password",
			server: func(t *testing.T) string {
				return startEmbedded(t, embeddednats.Options{Users: []embeddednats.User{{Name: "svc", Password: password}}})
			},
			config:  "nats:\n  user: svc\n  password: $TEST_NATS_PASSWORD\n",
			client:  []string{"--nats-user", "svc"},
			env:     []string{"TEST_NATS_PASSWORD=" + password},
			cenv:    []string{"FINALIZER_NATS_PASSWORD=" + password},
			secrets: []string{password},
		},
		{
			name: "token",
			server: func(t *testing.T) string {
				return startRawNATS(t, func(o *server.Options) { o.Authorization = token })
			},
			env:     []string{"FINALIZER_NATS_TOKEN=" + token},
			secrets: []string{token},
		},
		{
			name: "nkey seed",
			server: func(t *testing.T) string {
				return startEmbedded(t, embeddednats.Options{Users: []embeddednats.User{{NKey: testNKeyPub}}})
			},
			serve:   []string{"--nats-nkey-seed", seedFile},
			client:  []string{"--nats-nkey-seed", seedFile},
			secrets: []string{testNKeySeed},
		},
		{
			name:    "credentials file",
			server:  startOperatorNATS,
			config:  "nats:\n  credentials_file: " + credsFile + "\n",
			env:     []string{"FINALIZER_NATS_CREDS=" + credsFile},
			secrets: credsSecrets(t, string(creds)),
		},
		{
			name: "tls with a client certificate",
			server: func(t *testing.T) string {
				return startEmbedded(t, embeddednats.Options{TLS: &embeddednats.TLS{
					CertFile: pki.ServerCert, KeyFile: pki.ServerKey, ClientCAFile: pki.CACert}})
			},
			config:  "nats:\n  tls_ca_file: " + pki.CACert + "\n  tls_cert_file: " + pki.ClientCert + "\n  tls_key_file: " + pki.ClientKey + "\n",
			client:  []string{"--nats-tls-ca", pki.CACert, "--nats-tls-cert", pki.ClientCert, "--nats-tls-key", pki.ClientKey},
			secrets: []string{strings.TrimSpace(string(pemBody(clientKey)))},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			natsURL := tc.server(t)
			pgURL := pgtest.URL(t)
			var out outputs
			s := startServe(t, serveOpts{pgURL: pgURL, natsURL: natsURL, config: tc.config, args: tc.serve, env: tc.env})
			cenv := append(append([]string(nil), tc.env...), tc.cenv...)
			t.Cleanup(func() {
				s.stop()
				out.add(s.stdout.String(), s.stderr.String())
				out.noSecrets(t, tc.secrets...)
			})
			q, r := id(0xa00), id(0xa01)
			nats := append([]string{"--nats-url", natsURL}, tc.client...)
			if code, o := out.run(t, cenv, append([]string{"track", "--query-id", q, "--run-id", r, "--table", "auth"}, nats...)...); code != 0 {
				t.Fatalf("track: exit %d: %s", code, o)
			}
			events := writeFile(t, t.TempDir(), "events.jsonl",
				progressAt(q, r, "x", 1, "2026-09-28T13:10:00")+"\n"+progressAt(q, r, "x", 2, "2026-09-28T14:05:00")+"\n"+terminatedJSON(q, r)+"\n", 0o644)
			if code, o := out.run(t, cenv, append([]string{"publish", events}, nats...)...); code != 0 || !strings.Contains(o, "2 progress") {
				t.Fatalf("publish: exit %d: %s", code, o)
			}
			if code, o := out.run(t, cenv, append([]string{"join", "--run-id", r, "--timeout", "20s"}, nats...)...); code != 0 {
				t.Fatalf("join: exit %d: %s", code, o)
			}
			waitVerdict(t, pgURL, "auth", "2026-09-28T14:00:00Z")
			if strings.Contains(s.stderr.String(), "has no JetStream") {
				t.Error("the service runs without JetStream: its login cannot use the stream")
			}

			// Without the credential: a clear failure at once.
			began := time.Now()
			code, o := out.run(t, nil, "track", "--nats-url", natsURL, "--query-id", q, "--run-id", r, "--table", "auth")
			if code != 2 || !regexp.MustCompile(`(?i)authoriz|tls|certificate`).MatchString(o) {
				t.Errorf("track without the credential: exit %d: %s", code, o)
			}
			if d := time.Since(began); d > 8*time.Second {
				t.Errorf("track without the credential took %s to fail", d)
			}
		})
	}
}

// The embedded server with users, roles and TLS: publishers publish their
// events and nothing else, operators use the API, nobody gets in without a
// login or without TLS, and no password shows in the output.
func TestEmbeddedServerUsersAndTLS(t *testing.T) {
	pki := testpki.New(t)
	const sparkPW, opsPW = "spark-7d1e5c2a9f", "ops-4b8e1a6c3d"
	env := []string{"SPARK_PW=" + sparkPW, "OPS_PW=" + opsPW}
	config := `
nats:
  embedded:
    users:
      - {user: spark, password: "$SPARK_PW", role: publisher}
      - {user: ops, password: "${OPS_PW}", role: operator}
      - {nkey: ` + testNKeyPub + `, role: publisher}
    tls:
      cert_file: ` + pki.ServerCert + `
      key_file: ` + pki.ServerKey + `
`
	pgURL := pgtest.URL(t)
	s := startServe(t, serveOpts{pgURL: pgURL, config: config, env: env})
	if !strings.HasPrefix(s.natsBare, "tls://127.0.0.1:") || !strings.Contains(s.stdout.String(), ", and 3 users, TLS,") {
		t.Fatalf("banner:\n%s", s.stdout)
	}
	var out outputs
	t.Cleanup(func() {
		s.stop()
		out.add(s.stdout.String(), s.stderr.String())
		out.noSecrets(t, sparkPW, opsPW)
		// The service's own password is random; no 48-hex-digit run shows.
		if m := regexp.MustCompile(`[0-9a-f]{48}`).FindString(s.stdout.String() + s.stderr.String()); m != "" {
			t.Errorf("something like the service's own password shows in the output: %s", m)
		}
	})
	tlsCA := nats.RootCAs(pki.CACert)
	natsURL := s.natsBare

	if _, err := nats.Connect(natsURL, tlsCA); !errors.Is(err, nats.ErrAuthorization) {
		t.Errorf("anonymous connect: err = %v, want an authorization error", err)
	}
	if _, err := nats.Connect(natsURL, tlsCA, nats.UserInfo("spark", "wrong")); !errors.Is(err, nats.ErrAuthorization) {
		t.Errorf("wrong password: err = %v, want an authorization error", err)
	}
	if nc, err := nats.Connect(natsURL, nats.UserInfo("spark", sparkPW)); err == nil {
		nc.Close()
		t.Error("a client that does not trust the server's certificate connected")
	}

	// The operator tracks two runs with the CLI.
	ops := []string{"--nats-url", natsURL, "--nats-user", "ops", "--nats-tls-ca", pki.CACert}
	opsEnv := append([]string{"FINALIZER_NATS_PASSWORD=" + opsPW}, env...)
	q, r1, r2 := id(0xb00), id(0xb01), id(0xb02)
	for _, run := range []string{r1, r2} {
		if code, o := out.run(t, opsEnv, append([]string{"track", "--query-id", q, "--run-id", run, "--table", "sec." + run[:8]}, ops...)...); code != 0 {
			t.Fatalf("operator track: exit %d: %s", code, o)
		}
	}

	// A publisher (as a Spark driver) publishes events...
	var v natstest.Violations
	spark, err := nats.Connect(natsURL, tlsCA, nats.UserInfo("spark", sparkPW), nats.ErrorHandler(v.Handler))
	if err != nil {
		t.Fatalf("publisher connect: %v", err)
	}
	defer spark.Close()
	if err := spark.Publish("spark.progress."+q+"."+r1, []byte(progressAt(q, r1, "x", 1, "2026-09-28T13:10:00"))); err != nil {
		t.Fatal(err)
	}
	_ = spark.Flush()
	waitVerdict(t, pgURL, "sec."+r1[:8], "2026-09-28T13:00:00Z")
	// ...and nothing else: not the API, not other runs' events.
	if _, err := spark.Request("finalizer.api.track", []byte(`{"query_id":"`+q+`","run_id":"`+id(0xb03)+`","table":"stolen","spec":{}}`), time.Second); err == nil {
		t.Error("a publisher's track request was answered")
	}
	if _, err := spark.SubscribeSync("spark.>"); err != nil {
		t.Fatal(err)
	}
	_ = spark.Flush()
	eventually(t, "the publisher's violations reported", func() bool {
		return v.Has(`Publish to "finalizer.api.track"`) && v.Has(`Subscription to "spark.>"`)
	})
	if tracked(t, s.httpURL, id(0xb03)) {
		t.Error("the publisher's track request was served")
	}

	// An NKey publisher.
	seed := writeFile(t, t.TempDir(), "spark.nk", testNKeySeed+"\n", 0o600)
	nkOpt, err := nats.NkeyOptionFromSeed(seed)
	if err != nil {
		t.Fatal(err)
	}
	nk, err := nats.Connect(natsURL, tlsCA, nkOpt)
	if err != nil {
		t.Fatalf("nkey publisher: %v", err)
	}
	defer nk.Close()
	_ = nk.Publish("spark.progress."+q+"."+r2, []byte(progressAt(q, r2, "x", 1, "2026-09-28T13:10:00")))
	_ = nk.Flush()
	waitVerdict(t, pgURL, "sec."+r2[:8], "2026-09-28T13:00:00Z")

	// finalizer publish as a publisher: no JetStream API, so after a 1 s
	// stream lookup it publishes plainly.
	sparkEvents := writeFile(t, t.TempDir(), "spark.jsonl", progressAt(q, r2, "x", 2, "2026-09-28T14:05:00")+"\n", 0o644)
	began := time.Now()
	if code, o := out.run(t, append([]string{"FINALIZER_NATS_PASSWORD=" + sparkPW}, env...),
		"publish", "--nats-url", natsURL, "--nats-user", "spark", "--nats-tls-ca", pki.CACert, sparkEvents); code != 0 {
		t.Fatalf("publisher publish: exit %d: %s", code, o)
	}
	if d := time.Since(began); d > 5*time.Second {
		t.Errorf("publisher publish took %s", d)
	}
	waitVerdict(t, pgURL, "sec."+r2[:8], "2026-09-28T14:00:00Z")

	// The operator replays an event log with publish (through JetStream) and joins.
	events := writeFile(t, t.TempDir(), "events.jsonl",
		progressAt(q, r1, "x", 2, "2026-09-28T14:05:00")+"\n"+terminatedJSON(q, r1)+"\n", 0o644)
	began = time.Now()
	if code, o := out.run(t, opsEnv, append([]string{"publish", events}, ops...)...); code != 0 {
		t.Fatalf("operator publish: exit %d: %s", code, o)
	}
	if d := time.Since(began); d > 4*time.Second {
		t.Errorf("operator publish took %s: its stream lookup was refused?", d)
	}
	if code, o := out.run(t, opsEnv, append([]string{"join", "--run-id", r1, "--timeout", "20s"}, ops...)...); code != 0 {
		t.Fatalf("operator join: exit %d: %s", code, o)
	}
	waitVerdict(t, pgURL, "sec."+r1[:8], "2026-09-28T14:00:00Z")

	// A non-loopback listen without users is refused.
	code, o := out.run(t, nil, "serve", "--data-dir", t.TempDir(), "--postgres-url", pgURL, "--nats-listen", "0.0.0.0:0", "--http-listen", "off")
	if code != 2 || !strings.Contains(o, "nats.embedded.users") || !strings.Contains(o, "--nats-allow-anonymous") {
		t.Errorf("serve on 0.0.0.0 without users: exit %d: %s", code, o)
	}
}

// The HTTP API with a bearer token: everything but the probes needs it;
// status sends it; a non-loopback listen without one is refused.
func TestHTTPBearerToken(t *testing.T) {
	const token = "http-5e2b9d7c1a-token"
	pgURL := pgtest.URL(t)
	s := startServe(t, serveOpts{pgURL: pgURL, env: []string{"FINALIZER_HTTP_TOKEN=" + token}})
	var out outputs
	t.Cleanup(func() {
		s.stop()
		out.add(s.stdout.String(), s.stderr.String())
		out.noSecrets(t, token)
	})
	q, r := id(0xc00), id(0xc01)
	if code, o := out.run(t, nil, "track", "--nats-url", s.natsURL, "--query-id", q, "--run-id", r, "--table", "tok"); code != 0 {
		t.Fatalf("track: %d %s", code, o)
	}
	for _, tc := range []struct {
		path, token string
		want        int
	}{
		{"/v1/tables", "", 401}, {"/v1/tables", "wrong", 401}, {"/v1/tables", token, 200},
		{"/v1/runs", "", 401}, {"/v1/runs", token, 200},
		{"/v1/tables/tok/final?period_end=2026-09-28T14:00:00Z", "", 401},
		{"/metrics", "", 401}, {"/metrics", token, 200},
		{"/healthz", "", 200}, {"/readyz", "", 200},
	} {
		if code, body := httpGet(t, s.httpURL+tc.path, tc.token); code != tc.want {
			t.Errorf("GET %s with token %q: %d, want %d: %s", tc.path, tc.token, code, tc.want, body)
		}
	}
	code, o := out.run(t, []string{"FINALIZER_HTTP_TOKEN=" + token}, "status", "--postgres-url", pgURL, "--http-url", s.httpURL)
	if code != 0 || !strings.Contains(o, r) {
		t.Errorf("status with the token: exit %d:\n%s", code, o)
	}
	code, o = out.run(t, nil, "status", "--postgres-url", pgURL, "--http-url", s.httpURL)
	if code != 0 || !strings.Contains(o, "401") || strings.Contains(o, r) {
		t.Errorf("status without the token: exit %d, want the runs unknown (401):\n%s", code, o)
	}
	code, o = out.run(t, nil, "serve", "--data-dir", t.TempDir(), "--postgres-url", pgURL, "--nats-listen", "127.0.0.1:0", "--http-listen", "0.0.0.0:0")
	if code != 2 || !strings.Contains(o, "--http-token") || !strings.Contains(o, "--http-insecure") {
		t.Errorf("serve with HTTP on 0.0.0.0 and no token: exit %d: %s", code, o)
	}
}

// PostgreSQL over TLS with sslmode=verify-full: serve works through a URL
// that verifies the server's certificate, every one of its connections
// uses TLS, and a URL trusting another CA fails with a clear error.
func TestPostgresTLSVerifyFull(t *testing.T) {
	pki := testpki.New(t)
	base := openDir(t)
	certDir := filepath.Join(base, "certs")
	if err := os.Mkdir(certDir, 0o755); err != nil {
		t.Fatal(err)
	}
	cert, key := filepath.Join(certDir, "server.pem"), filepath.Join(certDir, "server-key.pem")
	for src, dst := range map[string]string{pki.ServerCert: cert, pki.ServerKey: key} {
		b, err := os.ReadFile(src)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(dst, b, 0o600); err != nil {
			t.Fatal(err)
		}
		chownToPostgres(t, dst)
	}
	settings := map[string]string{"ssl": "on", "ssl_cert_file": cert, "ssl_key_file": key}
	for k, v := range fastPG {
		settings[k] = v
	}
	pg := startCluster(t, filepath.Join(base, "pg"), 0, settings)
	pgURL := strings.Replace(pg.URL(), "sslmode=disable", "sslmode=verify-full&sslrootcert="+url.QueryEscape(pki.CACert), 1)

	s := startServe(t, serveOpts{pgURL: pgURL})
	pub := connect(t, s.natsURL)
	q, r := id(0xd00), id(0xd01)
	if code, out, e := cli(t, nil, "track", "--nats-url", s.natsURL, "--query-id", q, "--run-id", r, "--table", "tls"); code != 0 {
		t.Fatalf("track: %d %s %s", code, out, e)
	}
	pub.publish("progress", q, r, progressAt(q, r, "x", 1, "2026-09-28T13:10:00"))
	waitVerdict(t, pgURL, "tls", "2026-09-28T13:00:00Z")
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, pgURL)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	var total, encrypted int
	if err := conn.QueryRow(ctx, `SELECT count(*), count(*) FILTER (WHERE s.ssl) FROM pg_stat_activity a JOIN pg_stat_ssl s USING (pid)
WHERE a.application_name LIKE 'finalizer%'`).Scan(&total, &encrypted); err != nil {
		t.Fatal(err)
	}
	if total == 0 || encrypted != total {
		t.Errorf("%d of the service's %d connections use TLS", encrypted, total)
	}
	if code, out, e := cli(t, nil, "is-final", "--postgres-url", pgURL, "--table", "tls", "--period-end", "2026-09-28T13:00:00Z"); code != 0 {
		t.Errorf("is-final over verify-full: %d %s %s", code, out, e)
	}
	other := testpki.New(t)
	wrong := strings.Replace(pgURL, url.QueryEscape(pki.CACert), url.QueryEscape(other.CACert), 1)
	if code, out, e := cli(t, nil, "is-final", "--postgres-url", wrong, "--table", "tls", "--period-end", "2026-09-28T13:00:00Z"); code != 2 || !strings.Contains(e, "certificate") {
		t.Errorf("is-final trusting another CA: exit %d, want 2 naming the certificate: %s%s", code, out, e)
	}
}

// The least-privilege deployment: one serve with a role that may CREATE
// migrates; the service then runs with --no-migrate as a role that has only
// SELECT, INSERT, UPDATE on its tables (and SELECT on the schema table),
// and downstream jobs read with SELECT only.
func TestLeastPrivilegeRoles(t *testing.T) {
	adminURL := pgtest.URL(t)
	s := startServe(t, serveOpts{pgURL: adminURL}) // migrates as the owner
	s.stop()

	suffix := randomHex(t, 4)
	rw, ro := "finalizer_rw_"+suffix, "finalizer_ro_"+suffix
	ctx := context.Background()
	admin, err := pgx.Connect(ctx, adminURL)
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close(ctx)
	u, _ := url.Parse(adminURL)
	db := strings.TrimPrefix(u.Path, "/")
	// As README.md documents them.
	for _, stmt := range []string{
		`CREATE ROLE ` + rw + ` LOGIN PASSWORD 'rw-pass'`,
		`GRANT CONNECT ON DATABASE ` + db + ` TO ` + rw,
		`GRANT USAGE ON SCHEMA public TO ` + rw,
		`GRANT SELECT, INSERT, UPDATE ON public.table_finalization, public.table_finalization_tracks, public.table_finalization_feeds, public.table_finalization_rwpos TO ` + rw,
		`GRANT SELECT ON public.table_finalization_schema TO ` + rw,
		`GRANT SELECT, INSERT, UPDATE, DELETE ON public.table_finalization_acts, public.table_finalization_outbox,
    public.table_finalization_anno, public.table_finalization_sends TO ` + rw,
		`GRANT USAGE ON SEQUENCE public.table_finalization_sends_seq_seq TO ` + rw,
		`CREATE ROLE ` + ro + ` LOGIN PASSWORD 'ro-pass'`,
		`GRANT CONNECT ON DATABASE ` + db + ` TO ` + ro,
		`GRANT USAGE ON SCHEMA public TO ` + ro,
		`GRANT SELECT ON public.table_finalization, public.table_finalization_feeds, public.table_finalization_schema TO ` + ro,
	} {
		if _, err := admin.Exec(ctx, stmt); err != nil {
			t.Fatalf("%s: %v", stmt, err)
		}
	}
	t.Cleanup(func() { // best effort: a pgtest cluster of its own is removed whole anyway
		conn, err := pgx.Connect(context.Background(), adminURL)
		if err != nil {
			return
		}
		defer conn.Close(context.Background())
		for _, stmt := range []string{`DROP OWNED BY ` + rw + `, ` + ro, `DROP ROLE ` + rw, `DROP ROLE ` + ro} {
			_, _ = conn.Exec(context.Background(), stmt)
		}
	})
	as := func(role, pass string) string {
		v := *u
		v.User = url.UserPassword(role, pass)
		return v.String()
	}
	rwURL, roURL := as(rw, "rw-pass"), as(ro, "ro-pass")

	s2 := startServe(t, serveOpts{pgURL: rwURL, args: []string{"--no-migrate"}, dataDir: s.dataDir})
	pub := connect(t, s2.natsURL)
	q, r := id(0xe00), id(0xe01)
	if code, out, e := cli(t, nil, "track", "--nats-url", s2.natsURL, "--query-id", q, "--run-id", r, "--table", "lp"); code != 0 {
		t.Fatalf("track as %s: %d %s %s", rw, code, out, e)
	}
	pub.publish("progress", q, r, progressAt(q, r, "x", 1, "2026-09-28T13:10:00"))
	waitVerdict(t, adminURL, "lp", "2026-09-28T13:00:00Z")
	pub.publish("progress", q, r, progressAt(q, r, "x", 2, "2026-09-28T14:05:00"))
	pub.publish("terminated", q, r, terminatedJSON(q, r))
	if code, out, e := cli(t, nil, "join", "--nats-url", s2.natsURL, "--run-id", r, "--timeout", "20s"); code != 0 || e != "" {
		t.Fatalf("join as %s: %d %s %s", rw, code, out, e)
	}
	waitVerdict(t, adminURL, "lp", "2026-09-28T14:00:00Z")
	var done int
	if err := admin.QueryRow(ctx, `SELECT count(*) FROM public.table_finalization_tracks WHERE run_id = $1 AND done_at IS NOT NULL`, r).Scan(&done); err != nil || done != 1 {
		t.Errorf("the explicit track not marked done by %s: %d %v", rw, done, err)
	}
	if errs := errorLines(s2.stderr.String()); len(errs) > 0 {
		t.Errorf("errors as %s:\n%s", rw, strings.Join(errs, "\n"))
	}
	// The service role cannot delete or change the schema.
	rwConn, err := pgx.Connect(ctx, rwURL)
	if err != nil {
		t.Fatal(err)
	}
	defer rwConn.Close(ctx)
	for _, stmt := range []string{`DELETE FROM public.table_finalization`, `DROP TABLE public.table_finalization`, `CREATE TABLE public.x (y int)`} {
		if _, err := rwConn.Exec(ctx, stmt); err == nil || !strings.Contains(err.Error(), "42501") {
			t.Errorf("%s as %s: %v, want permission denied", stmt, rw, err)
		}
	}
	// Downstream jobs need SELECT only.
	if code, out, e := cli(t, nil, "is-final", "--postgres-url", roURL, "--table", "lp", "--period-end", "2026-09-28T14:00:00Z"); code != 0 {
		t.Errorf("is-final as %s: %d %s %s", ro, code, out, e)
	}
	if code, out, e := cli(t, nil, "wait", "--postgres-url", roURL, "--table", "lp", "--until", "2026-09-28T14:00:00Z", "--timeout", "5s"); code != 0 {
		t.Errorf("wait as %s: %d %s %s", ro, code, out, e)
	}
	// status too: the actions' tables it may not read are left out, not an
	// error (a read-only role, or the service role of an upgrade that kept
	// the old grants).
	if code, out, e := cli(t, nil, "status", "--postgres-url", roURL, "--http-url", "", "--table", "lp"); code != 0 || !strings.Contains(out, "lp") {
		t.Errorf("status as %s: %d %s %s", ro, code, out, e)
	}
	// The service role cannot migrate a fresh database, and --no-migrate
	// refuses one that is not migrated, both with a clear error.
	fresh, err := url.Parse(pgtest.URL(t))
	if err != nil {
		t.Fatal(err)
	}
	freshDB := strings.TrimPrefix(fresh.Path, "/")
	if _, err := admin.Exec(ctx, `GRANT CONNECT ON DATABASE `+freshDB+` TO `+rw); err != nil {
		t.Fatal(err)
	}
	fresh.User = url.UserPassword(rw, "rw-pass")
	code, out, e := cli(t, nil, "serve", "--data-dir", t.TempDir(), "--postgres-url", fresh.String(), "--nats-listen", "127.0.0.1:0", "--http-listen", "off")
	if code != 2 || !strings.Contains(e, "permission denied") {
		t.Errorf("serve migrating as %s: exit %d: %s%s", rw, code, out, e)
	}
	code, out, e = cli(t, nil, "serve", "--no-migrate", "--data-dir", t.TempDir(), "--postgres-url", fresh.String(), "--nats-listen", "127.0.0.1:0", "--http-listen", "off")
	if code != 2 || !strings.Contains(e, "--no-migrate") {
		t.Errorf("serve --no-migrate on a database not migrated: exit %d: %s%s", code, out, e)
	}
}

// startEmbedded starts an embedded NATS server on a random port for a
// test, with JetStream, and returns its URL.
func startEmbedded(t *testing.T, o embeddednats.Options) string {
	t.Helper()
	o.Port, o.StoreDir = embeddednats.RandomPort, t.TempDir()
	ns, err := embeddednats.Start(o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(ns.Shutdown)
	return ns.ClientURL()
}

// startRawNATS starts a nats-server with JetStream configured by opt.
func startRawNATS(t *testing.T, opt func(*server.Options)) string {
	t.Helper()
	o := &server.Options{Host: "127.0.0.1", Port: -1, JetStream: true, StoreDir: t.TempDir(), NoSigs: true, NoLog: true}
	opt(o)
	ns, err := server.NewServer(o)
	if err != nil {
		t.Fatal(err)
	}
	ns.Start()
	t.Cleanup(func() { ns.Shutdown(); ns.WaitForShutdown() })
	if !ns.ReadyForConnections(10 * time.Second) {
		t.Fatal("nats-server not ready")
	}
	return ns.ClientURL()
}

// startOperatorNATS starts a nats-server in operator (JWT) mode with the
// fixtures of testdata/ (see testdata/gencreds).
func startOperatorNATS(t *testing.T) string {
	t.Helper()
	read := func(name string) string {
		b, err := os.ReadFile(filepath.Join("testdata", name))
		if err != nil {
			t.Fatal(err)
		}
		return strings.TrimSpace(string(b))
	}
	op, err := server.ReadOperatorJWT(filepath.Join("testdata", "operator.jwt"))
	if err != nil {
		t.Fatal(err)
	}
	sysJWT, accJWT := read("sys_account.jwt"), read("account.jwt")
	resolver := &server.MemAccResolver{}
	for _, j := range []string{sysJWT, accJWT} {
		if err := resolver.Store(jwtSubject(t, j), j); err != nil {
			t.Fatal(err)
		}
	}
	return startRawNATS(t, func(o *server.Options) {
		o.TrustedOperators = append(o.TrustedOperators, op)
		o.AccountResolver = resolver
		o.SystemAccount = jwtSubject(t, sysJWT)
	})
}

// jwtSubject returns the "sub" claim of a JWT (an account's public key).
func jwtSubject(t *testing.T, token string) string {
	t.Helper()
	parts := strings.Split(token, ".")
	if len(parts) != 3 {
		t.Fatalf("not a JWT: %s", token)
	}
	b, err := base64.RawURLEncoding.DecodeString(parts[1])
	if err != nil {
		t.Fatal(err)
	}
	var claims struct {
		Sub string `json:"sub"`
	}
	if err := json.Unmarshal(b, &claims); err != nil {
		t.Fatal(err)
	}
	return claims.Sub
}

// credsSecrets returns the JWT and the seed of a credentials file.
func credsSecrets(t *testing.T, creds string) []string {
	t.Helper()
	var out []string
	for _, l := range strings.Split(creds, "\n") {
		l = strings.TrimSpace(l)
		if strings.HasPrefix(l, "eyJ") || strings.HasPrefix(l, "SU") {
			out = append(out, l)
		}
	}
	if len(out) != 2 {
		t.Fatalf("credentials file without a JWT and a seed")
	}
	return out
}

// pemBody returns the base64 body of the first PEM block, without line
// breaks' effect: its first line.
func pemBody(b []byte) string {
	lines := strings.Split(string(b), "\n")
	if len(lines) < 2 {
		return ""
	}
	return lines[1]
}

func randomHex(t *testing.T, n int) string {
	t.Helper()
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(b)
}

// chownToPostgres gives path to the postgres OS user when the tests run as
// root (the managed cluster runs as that user and must read its key).
func chownToPostgres(t *testing.T, path string) {
	t.Helper()
	if os.Geteuid() != 0 {
		return
	}
	u, err := user.Lookup("postgres")
	if err != nil {
		t.Fatal(err)
	}
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	if err := os.Chown(path, uid, gid); err != nil {
		t.Fatal(err)
	}
}

// An external PostgreSQL (a flag, or an exported FINALIZER_POSTGRES_URL,
// which is the same setting) is said on stdout, as an external NATS server
// is, with its password masked: a variable left exported never silently
// replaces the managed cluster.
func TestExternalPostgresIsSaid(t *testing.T) {
	u, err := url.Parse(pgtest.URL(t))
	if err != nil {
		t.Fatal(err)
	}
	const secret = "s3cret-pw-not-shown"
	if _, ok := u.User.Password(); !ok {
		// The test cluster may trust local connections: a password it
		// ignores still must not show.
		name := "postgres"
		if u.User != nil {
			name = u.User.Username()
		}
		u.User = url.UserPassword(name, secret)
	}
	pw, _ := u.User.Password()
	p := startServe(t, serveOpts{pgURL: u.String()})
	out := p.stdout.String()
	if !strings.Contains(out, "finalizer: connecting to the external PostgreSQL at ") {
		t.Fatalf("stdout does not say the external PostgreSQL:\n%s", out)
	}
	if strings.Contains(out, pw) || strings.Contains(p.stderr.String(), pw) {
		t.Fatalf("the password shows in the output:\n%s", out)
	}
}
