package pgcluster

import (
	"context"
	"errors"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// needInstallation skips the test when there is no PostgreSQL installation,
// unless FINALIZER_REQUIRE_POSTGRES=1 (CI), where it fails.
func needInstallation(t *testing.T) string {
	t.Helper()
	dir, err := FindBinDir()
	if err != nil {
		if os.Getenv("FINALIZER_REQUIRE_POSTGRES") == "1" {
			t.Fatalf("FINALIZER_REQUIRE_POSTGRES=1: %v", err)
		}
		t.Skip(err)
	}
	return dir
}

// clusterDir returns a directory for a cluster that the postgres OS user
// can reach when the test runs as root: t.TempDir makes 0700 directories.
func clusterDir(t *testing.T) string {
	t.Helper()
	base := t.TempDir()
	if os.Geteuid() == 0 {
		for _, d := range []string{filepath.Dir(base), base} {
			if err := os.Chmod(d, 0o711); err != nil {
				t.Fatal(err)
			}
		}
	}
	return filepath.Join(base, "pg")
}

// startCluster starts a cluster and stops it at cleanup.
func startCluster(t *testing.T, o Options) *Cluster {
	t.Helper()
	c, err := Start(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := c.Stop(context.Background()); err != nil {
			t.Error(err)
		}
	})
	return c
}

// psql runs a query against url and returns its unaligned output.
func psql(t *testing.T, binDir, url, query string) string {
	t.Helper()
	out, err := exec.Command(filepath.Join(binDir, "psql"), "-X", "-tA", "-d", url, "-c", query).CombinedOutput()
	if err != nil {
		t.Fatalf("psql %q: %v: %s", query, err, out)
	}
	return strings.TrimSpace(string(out))
}

func TestParseMajor(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want int
	}{
		{"pg_ctl (PostgreSQL) 15.10 (Debian 15.10-0+deb12u1)\n", 15},
		{"pg_ctl (PostgreSQL) 17.2\n", 17},
		{"pg_ctl (PostgreSQL) 9.6.24\n", 9},
		{"something else", 0},
	} {
		t.Run(tc.in, func(t *testing.T) {
			if got := parseMajor(tc.in); got != tc.want {
				t.Errorf("parseMajor(%q) = %d, want %d", tc.in, got, tc.want)
			}
		})
	}
}

func TestFindBinDirNone(t *testing.T) {
	t.Setenv("PATH", t.TempDir())
	old := searchGlobs
	searchGlobs = []string{filepath.Join(t.TempDir(), "*", "bin")}
	t.Cleanup(func() { searchGlobs = old })

	_, err := FindBinDir()
	if !errors.Is(err, ErrNoInstallation) {
		t.Fatalf("err = %v, want ErrNoInstallation", err)
	}
	if !strings.Contains(err.Error(), "--postgres-url") {
		t.Errorf("error %q does not name --postgres-url", err)
	}
	_, err = Start(context.Background(), Options{Dir: clusterDir(t)})
	if !errors.Is(err, ErrNoInstallation) {
		t.Fatalf("Start: err = %v, want ErrNoInstallation", err)
	}
}

func TestFindBinDirPrefersNewest(t *testing.T) {
	root := t.TempDir()
	for _, v := range []string{"9", "16", "13"} {
		bin := filepath.Join(root, "postgresql", v, "bin")
		if err := os.MkdirAll(bin, 0o755); err != nil {
			t.Fatal(err)
		}
		for _, p := range []string{"initdb", "pg_ctl", "postgres"} {
			if err := os.WriteFile(filepath.Join(bin, p), []byte("#!/bin/sh\n"), 0o755); err != nil {
				t.Fatal(err)
			}
		}
	}
	t.Setenv("PATH", t.TempDir())
	old := searchGlobs
	searchGlobs = []string{filepath.Join(root, "postgresql", "*", "bin")}
	t.Cleanup(func() { searchGlobs = old })

	got, err := FindBinDir()
	if err != nil {
		t.Fatal(err)
	}
	if want := filepath.Join(root, "postgresql", "16", "bin"); got != want {
		t.Errorf("FindBinDir = %s, want %s", got, want)
	}
	if got, err := binDirFor(13); err != nil || got != filepath.Join(root, "postgresql", "13", "bin") {
		t.Errorf("binDirFor(13) = %s, %v", got, err)
	}
	if _, err := binDirFor(14); !errors.Is(err, ErrNoInstallation) {
		t.Errorf("binDirFor(14): err = %v, want ErrNoInstallation", err)
	}
}

// TestLifecycle runs one cluster through first start, a refused second
// start, stop, restart on the remembered port, and restart after that port
// was taken.
func TestLifecycle(t *testing.T) {
	binDir := needInstallation(t)
	dir := clusterDir(t)
	ctx := context.Background()
	core, logs := observer.New(zap.InfoLevel)
	o := Options{Dir: dir, Logger: zap.New(core), Settings: map[string]string{"fsync": "off"}}

	// A scratch directory left by an interrupted initdb is redone.
	if err := os.MkdirAll(filepath.Join(dir, initDirName), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, initDirName, "junk"), []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}

	began := time.Now()
	c, err := Start(ctx, o)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("first start (initdb): %v", time.Since(began))
	t.Cleanup(func() { _ = c.Stop(context.Background()) })
	url := c.URL()
	if !strings.HasPrefix(url, "postgres://finalizer:") || !strings.HasSuffix(url, "@127.0.0.1:"+strconv.Itoa(c.Port())+"/finalizer?sslmode=disable") {
		t.Fatalf("URL = %s", url)
	}
	if strings.Contains(c.RedactedURL(), c.password) {
		t.Errorf("RedactedURL shows the password: %s", c.RedactedURL())
	}
	if got := psql(t, binDir, url, "SELECT current_database()"); got != "finalizer" {
		t.Errorf("current_database() = %q", got)
	}
	if got := psql(t, binDir, url, "SHOW listen_addresses"); got != "127.0.0.1" {
		t.Errorf("listen_addresses = %q", got)
	}
	if got := psql(t, binDir, url, "SHOW fsync"); got != "off" {
		t.Errorf("fsync = %q, want the extra setting off", got)
	}
	psql(t, binDir, url, "CREATE TABLE kept (x int); INSERT INTO kept VALUES (42)")

	fi, err := os.Stat(filepath.Join(dir, passwordName))
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o600 {
		t.Errorf("password file mode %04o, want 0600", fi.Mode().Perm())
	}
	bad := strings.Replace(url, c.password, "wrong", 1)
	if out, err := exec.Command(filepath.Join(binDir, "psql"), "-X", "-w", "-d", bad, "-c", "SELECT 1").CombinedOutput(); err == nil {
		t.Errorf("a wrong password was accepted: %s", out)
	}

	t.Run("second start is refused", func(t *testing.T) {
		_, err := Start(ctx, Options{Dir: dir})
		if !errors.Is(err, ErrInUse) {
			t.Fatalf("err = %v, want ErrInUse", err)
		}
		if got := psql(t, binDir, url, "SELECT x FROM kept"); got != "42" {
			t.Errorf("after the refused start: %q", got)
		}
	})

	t.Run("orphaned postmaster is stopped and started afresh", func(t *testing.T) {
		orphan := runningPostmaster(c.dataDir)
		if orphan == 0 {
			t.Fatal("no postmaster running")
		}
		c.lock.unlock() // as if the process holding it had been killed with -9
		logs.TakeAll()
		c2, err := Start(ctx, o)
		if err != nil {
			t.Fatalf("start over an orphaned postmaster: %v", err)
		}
		defer func() {
			if err := c2.Stop(ctx); err != nil {
				t.Error(err)
			}
		}()
		if logs.FilterMessageSnippet("no finalizer holding it").Len() != 1 {
			t.Errorf("no warning about the orphaned postmaster; logs: %v", logs.All())
		}
		if pid := runningPostmaster(c2.dataDir); pid == 0 || pid == orphan {
			t.Errorf("postmaster pid %d after the start, orphan was %d: want a new one", pid, orphan)
		}
		if c2.URL() != url {
			t.Errorf("URL changed: %s, was %s", c2.URL(), url)
		}
		if got := psql(t, binDir, c2.URL(), "SELECT x FROM kept"); got != "42" {
			t.Errorf("data after restarting the orphan: %q", got)
		}
		if _, err := Start(ctx, Options{Dir: dir}); !errors.Is(err, ErrInUse) {
			t.Errorf("a start while the new Cluster holds the directory: err = %v, want ErrInUse", err)
		}
	})

	if err := c.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	if err := c.Stop(ctx); err != nil {
		t.Fatalf("second Stop: %v", err)
	}
	if pid := runningPostmaster(c.dataDir); pid != 0 {
		t.Fatalf("postmaster %d still running after Stop", pid)
	}

	t.Run("restart keeps the port and the data", func(t *testing.T) {
		began := time.Now()
		c2 := startCluster(t, o)
		t.Logf("second start: %v", time.Since(began))
		if c2.URL() != url {
			t.Errorf("URL changed across restart: %s, was %s", c2.URL(), url)
		}
		if got := psql(t, binDir, c2.URL(), "SELECT x FROM kept"); got != "42" {
			t.Errorf("data after restart: %q", got)
		}
		if err := c2.Stop(ctx); err != nil {
			t.Fatal(err)
		}
	})

	t.Run("restart moves off a taken port", func(t *testing.T) {
		l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(c.Port())))
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		logs.TakeAll()
		c3 := startCluster(t, o)
		if c3.Port() == c.Port() {
			t.Fatalf("started on the taken port %d", c.Port())
		}
		if logs.FilterMessageSnippet("port is taken").Len() != 1 {
			t.Errorf("no warning about the taken port; logs: %v", logs.All())
		}
		if got := psql(t, binDir, c3.URL(), "SELECT x FROM kept"); got != "42" {
			t.Errorf("data after moving port: %q", got)
		}
		if err := c3.Stop(ctx); err != nil {
			t.Fatal(err)
		}
		_ = l.Close()
		// The new port is the one remembered now.
		c4 := startCluster(t, o)
		if c4.Port() != c3.Port() {
			t.Errorf("port %d after restart, want the remembered %d", c4.Port(), c3.Port())
		}

		if err := Remove(ctx, dir); !errors.Is(err, ErrInUse) {
			t.Fatalf("Remove of a held cluster: err = %v, want ErrInUse", err)
		}
		c4.lock.unlock() // as if the test binary holding it had panicked
		if err := Remove(ctx, dir); err != nil {
			t.Fatal(err)
		}
		if exists(dir) {
			t.Errorf("%s still exists after Remove", dir)
		}
		if !portFree(c4.Port()) {
			t.Errorf("port %d still taken after Remove: the orphan postmaster runs on", c4.Port())
		}
	})
}

func TestUnreachableDirAsRoot(t *testing.T) {
	needInstallation(t)
	if os.Geteuid() != 0 {
		t.Skip("only root runs PostgreSQL as another user")
	}
	base := t.TempDir() // 0700, root's
	_, err := Start(context.Background(), Options{Dir: filepath.Join(base, "pg")})
	if err == nil || !strings.Contains(err.Error(), "cannot reach") {
		t.Fatalf("err = %v, want one saying the postgres user cannot reach the directory", err)
	}
}

func TestRunningPostmasterStale(t *testing.T) {
	dir := t.TempDir()
	// Our own pid is alive but is not PostgreSQL.
	if err := os.WriteFile(filepath.Join(dir, "postmaster.pid"), []byte(strconv.Itoa(os.Getpid())+"\n/x\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if pid := runningPostmaster(dir); pid != 0 {
		t.Errorf("runningPostmaster = %d for a pid that is not postgres", pid)
	}
	// A dead pid.
	cmd := exec.Command("true")
	if err := cmd.Run(); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "postmaster.pid"), []byte(strconv.Itoa(cmd.Process.Pid)+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if pid := runningPostmaster(dir); pid != 0 {
		t.Errorf("runningPostmaster = %d for a dead pid", pid)
	}
}
