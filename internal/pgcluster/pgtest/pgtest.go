// Package pgtest gives tests in any package a real, empty PostgreSQL
// database. TestMain calls Main, which starts one throwaway cluster (from
// the machine's installation, see pgcluster) for the whole test binary;
// each call to URL creates a fresh database on it.
//
//	func TestMain(m *testing.M) { pgtest.Main(m) }
//
//	func TestX(t *testing.T) {
//		url := pgtest.URL(t) // postgres://.../t_testx_1a2b3c?sslmode=disable
//	}
//
// Environment:
//
//   - FINALIZER_TEST_POSTGRES_URL: use that server (a URL with a user
//     allowed to CREATE DATABASE) instead of starting a cluster.
//   - FINALIZER_REQUIRE_POSTGRES=1 (set in CI): a missing installation
//     fails the tests instead of skipping them.
package pgtest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"go.uber.org/goleak"

	"github.com/finalizer-dev/finalizer/internal/pgcluster"
)

// Environment variables read by Main and URL.
const (
	// EnvURL names a server to use instead of starting a cluster.
	EnvURL = "FINALIZER_TEST_POSTGRES_URL"
	// EnvRequire, set to 1, turns a missing installation into a failure.
	EnvRequire = "FINALIZER_REQUIRE_POSTGRES"
)

// DefaultTimeout bounds starting and stopping the cluster and creating or
// dropping one database.
const DefaultTimeout = 2 * time.Minute

// dirPrefix names the cluster directories pgtest makes under os.TempDir;
// the pid that follows lets a later run remove the cluster of a test binary
// that died (a panic or a -timeout) without stopping it.
const dirPrefix = "pgtest-"

// settings make the throwaway cluster fast: nothing in it needs to survive
// a crash of the machine.
var settings = map[string]string{
	"fsync":              "off",
	"synchronous_commit": "off",
	"full_page_writes":   "off",
	"max_connections":    "300",
}

// server is the state Main sets up for URL.
var server struct {
	mu       sync.Mutex
	main     bool   // Main is running
	adminURL string // where to CREATE DATABASE
	external bool   // adminURL came from EnvURL: drop databases after use
	skip     string // why tests must skip (no installation)
	err      error  // why tests must fail (the cluster did not start)
	admin    *pgx.Conn
}

// Main runs the test binary's tests with a PostgreSQL server for URL: the
// one named by FINALIZER_TEST_POSTGRES_URL, else a throwaway cluster it
// starts now and removes afterwards. After a successful run it checks for
// leaked goroutines with goleak (opts as for goleak.VerifyTestMain), so a
// package needs no other TestMain. It exits the process with the tests'
// status, and never returns.
func Main(m *testing.M, opts ...goleak.Option) {
	os.Exit(run(m, opts))
}

// Run is Main without the exit: it returns the tests' status, so that a
// TestMain can clean up what it made before it exits.
func Run(m *testing.M, opts ...goleak.Option) int {
	return run(m, opts)
}

func run(m *testing.M, opts []goleak.Option) int {
	server.mu.Lock()
	server.main = true
	server.mu.Unlock()

	stop, err := setUp()
	if err != nil {
		fmt.Fprintln(os.Stderr, "pgtest:", err)
		return 1
	}
	code := m.Run()

	server.mu.Lock()
	if server.admin != nil {
		ctx, cancel := context.WithTimeout(context.Background(), DefaultTimeout)
		_ = server.admin.Close(ctx)
		cancel()
		server.admin = nil
	}
	server.mu.Unlock()
	if err := stop(); err != nil {
		fmt.Fprintln(os.Stderr, "pgtest:", err)
		if code == 0 {
			code = 1
		}
	}
	if code == 0 {
		if err := goleak.Find(opts...); err != nil {
			fmt.Fprintf(os.Stderr, "goleak: Errors on successful test run: %v\n", err)
			code = 1
		}
	}
	return code
}

// setUp finds or starts the server. It returns an error only when the run
// must fail at once (EnvRequire and no installation); other problems are
// left in server for URL to report per test.
func setUp() (stop func() error, err error) {
	noop := func() error { return nil }
	if u := os.Getenv(EnvURL); u != "" {
		server.adminURL, server.external = u, true
		return noop, nil
	}
	binDir, err := pgcluster.FindBinDir()
	if err != nil {
		if required() {
			return nil, fmt.Errorf("%s=1: %w", EnvRequire, err)
		}
		server.skip = err.Error()
		return noop, nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), DefaultTimeout)
	defer cancel()
	removeOrphans(ctx)
	dir, err := os.MkdirTemp("", dirPrefix+strconv.Itoa(os.Getpid())+"-")
	if err != nil {
		server.err = err
		return noop, nil
	}
	// MkdirTemp makes 0700 directories; when root, the server runs as the
	// postgres user, which must reach the cluster inside.
	if err := os.Chmod(dir, 0o711); err != nil {
		server.err = err
		return noop, nil
	}
	c, err := pgcluster.Start(ctx, pgcluster.Options{Dir: filepath.Join(dir, "cluster"), BinDir: binDir, Settings: settings})
	if err != nil {
		_ = os.RemoveAll(dir)
		server.err = err
		return noop, nil
	}
	server.adminURL = c.URL()
	return func() error {
		ctx, cancel := context.WithTimeout(context.Background(), DefaultTimeout)
		defer cancel()
		err := c.Stop(ctx)
		if rmErr := os.RemoveAll(dir); err == nil {
			err = rmErr
		}
		return err
	}, nil
}

// removeOrphans removes the clusters of earlier test binaries that died
// without stopping them. Failures are ignored: it is housekeeping.
func removeOrphans(ctx context.Context) {
	dirs, _ := filepath.Glob(filepath.Join(os.TempDir(), dirPrefix+"*"))
	for _, dir := range dirs {
		pidText, _, _ := strings.Cut(strings.TrimPrefix(filepath.Base(dir), dirPrefix), "-")
		pid, err := strconv.Atoi(pidText)
		if err != nil || pid == os.Getpid() || alive(pid) {
			continue
		}
		if err := pgcluster.Remove(ctx, filepath.Join(dir, "cluster")); err == nil {
			_ = os.RemoveAll(dir)
		}
	}
}

func required() bool { return os.Getenv(EnvRequire) == "1" }

// URL returns the URL of a new, empty database, created for this test on
// the server Main set up, under a unique name derived from the test's. On a
// server named by FINALIZER_TEST_POSTGRES_URL the database is dropped when
// the test ends; a cluster of pgtest's own is removed whole at the end. It
// skips the test when no PostgreSQL installation exists (fails instead with
// FINALIZER_REQUIRE_POSTGRES=1), and fails it when the server is not usable
// or Main is not in TestMain.
func URL(t testing.TB) string {
	t.Helper()
	server.mu.Lock()
	defer server.mu.Unlock()
	switch {
	case !server.main:
		t.Fatal("pgtest.URL needs pgtest.Main in the package's TestMain")
	case server.skip != "" && required():
		t.Fatalf("%s=1: %s", EnvRequire, server.skip)
	case server.skip != "":
		t.Skip("no PostgreSQL: " + server.skip)
	case server.err != nil:
		t.Fatalf("pgtest: the test cluster did not start: %v", server.err)
	}

	base, err := url.Parse(server.adminURL)
	if err != nil || (base.Scheme != "postgres" && base.Scheme != "postgresql") {
		t.Fatalf("pgtest: %s must be a postgres:// URL", EnvURL)
	}
	ctx, cancel := context.WithTimeout(context.Background(), DefaultTimeout)
	defer cancel()
	if server.admin == nil {
		server.admin, err = pgx.Connect(ctx, server.adminURL)
		if err != nil {
			t.Fatalf("pgtest: connect to the test server: %v", err)
		}
	}
	name := databaseName(t.Name())
	if _, err := server.admin.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize()); err != nil {
		t.Fatalf("pgtest: create database %s: %v", name, err)
	}
	if server.external {
		t.Cleanup(func() { drop(t, name) })
	}
	u := *base
	u.Path = "/" + name
	u.RawPath = ""
	return u.String()
}

// drop drops a test's database, disconnecting what the test left connected.
func drop(t testing.TB, name string) {
	server.mu.Lock()
	defer server.mu.Unlock()
	if server.admin == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), DefaultTimeout)
	defer cancel()
	q := "DROP DATABASE IF EXISTS " + pgx.Identifier{name}.Sanitize()
	if _, err := server.admin.Exec(ctx, q+" WITH (FORCE)"); err != nil {
		// Before PostgreSQL 13 there is no FORCE.
		if _, err2 := server.admin.Exec(ctx, q); err2 != nil {
			t.Logf("pgtest: drop database %s: %v", name, err)
		}
	}
}

// databaseName makes a unique, valid database name from a test name:
// "t_" + the name in lower case with anything but [a-z0-9] as "_",
// shortened, + "_" + 6 random hex digits (unique across test binaries
// sharing one server).
func databaseName(test string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(test) {
		if (r >= 'a' && r <= 'z') || (r >= '0' && r <= '9') {
			b.WriteRune(r)
		} else {
			b.WriteByte('_')
		}
	}
	s := b.String()
	if len(s) > 48 {
		s = s[:48]
	}
	var rnd [3]byte
	_, _ = rand.Read(rnd[:])
	return "t_" + s + "_" + hex.EncodeToString(rnd[:])
}
