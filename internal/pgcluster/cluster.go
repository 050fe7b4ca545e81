package pgcluster

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"go.uber.org/zap"
)

// Defaults of the managed cluster.
const (
	// DefaultDatabase is the database Start creates and URL names.
	DefaultDatabase = "finalizer"
	// DefaultUser is the superuser initdb creates.
	DefaultUser = "finalizer"
	// DefaultStartTimeout bounds pg_ctl start -w and pg_ctl stop -w.
	DefaultStartTimeout = 60 * time.Second
)

// Names of the files inside Options.Dir.
const (
	dataDirName  = "data"         // the PostgreSQL data directory
	initDirName  = "data.initdb"  // initdb's work in progress, renamed to data when done
	passwordName = "password"     // the superuser's password, 0600
	portName     = "port"         // the port chosen on first start
	logName      = "postgres.log" // the server log
	lockName     = "lock"         // flock held from Start to Stop
	confName     = "finalizer.conf"
	maxLogSize   = 16 << 20 // postgres.log is rotated to postgres.log.1 at start beyond this
	maxSocketLen = 100      // sun_path is 108 bytes on Linux, 104 on BSDs; keep room
)

// The errors this package returns, wrapped with context. Callers test them
// with errors.Is.
var (
	// ErrNoInstallation means no PostgreSQL installation (initdb and
	// pg_ctl) was found, or none of the version that initialised the
	// cluster. The message names --postgres-url as the way out.
	ErrNoInstallation = errors.New("no PostgreSQL installation found")
	// ErrInUse means the cluster directory is in use: another Cluster holds
	// it, or its orphaned postmaster could not be stopped.
	ErrInUse = errors.New("postgres cluster directory is in use")
	// ErrUnreachable means the OS user that runs PostgreSQL (postgres, when
	// this process is root) cannot traverse the way to the cluster
	// directory, e.g. a data dir under root's 0700 home.
	ErrUnreachable = errors.New("cluster directory not reachable by the postgres OS user")
)

// Reachable reports, with an error wrapping ErrUnreachable, whether the OS
// user that would run a cluster in dir can reach it. It returns nil when
// this process does not run as root (its own user runs PostgreSQL).
func Reachable(dir string) error {
	o, err := lookupOwner()
	if err != nil {
		return err
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		return err
	}
	return o.checkReachable(abs)
}

// Options configure Start.
type Options struct {
	// Dir holds the cluster: data directory, password, port, log, socket.
	// It is created if missing. Required.
	Dir string
	// Port is the TCP port on 127.0.0.1. Zero picks a free port on first
	// start and reuses it on later starts (a new one, with a warning, if it
	// has been taken meanwhile).
	Port int
	// Logger receives start and stop messages; nil discards them.
	Logger *zap.Logger
	// BinDir holds initdb and pg_ctl; empty means FindBinDir (or, for an
	// existing cluster, the installation of the version that made it).
	BinDir string
	// Settings are extra server settings (name = value) written into the
	// cluster's configuration at every start, e.g. "fsync": "off" for
	// throwaway test clusters. Values are quoted.
	Settings map[string]string
}

// Cluster is a running managed cluster. Its methods are safe for
// concurrent use.
type Cluster struct {
	dir      string
	dataDir  string
	binDir   string
	port     int
	password string
	log      *zap.Logger
	owner    *owner
	lock     *lockFile

	mu      sync.Mutex
	stopped bool
}

// Start starts the cluster in o.Dir, initialising it with initdb on first
// start, and returns once it accepts connections and the database
// "finalizer" exists. It fails with ErrInUse when another Cluster (in any
// process) holds the directory, and with ErrNoInstallation when there is
// nothing to run it with. A postmaster left running on the directory by a
// Cluster whose process died (kill -9) is stopped and started again.
// Canceling ctx abandons the start; a half-started server is stopped.
func Start(ctx context.Context, o Options) (*Cluster, error) {
	if o.Dir == "" {
		return nil, errors.New("start postgres: no directory")
	}
	dir, err := filepath.Abs(o.Dir)
	if err != nil {
		return nil, fmt.Errorf("start postgres: %w", err)
	}
	c := &Cluster{dir: dir, dataDir: filepath.Join(dir, dataDirName), log: o.Logger}
	if c.log == nil {
		c.log = zap.NewNop()
	}
	c.log = c.log.With(zap.String("dir", dir))
	if err := c.start(ctx, o); err != nil {
		c.lock.unlock()
		return nil, fmt.Errorf("start postgres in %s: %w", dir, err)
	}
	return c, nil
}

func (c *Cluster) start(ctx context.Context, o Options) error {
	var err error
	if c.owner, err = lookupOwner(); err != nil {
		return err
	}
	if err := c.claimDir(true); err != nil {
		return err
	}
	if pid := runningPostmaster(c.dataDir); pid != 0 {
		if err := c.stopOrphan(ctx, o.BinDir, pid); err != nil {
			return err
		}
	}

	fresh := !exists(filepath.Join(c.dataDir, "PG_VERSION"))
	if c.binDir, err = c.pickBinDir(o.BinDir, fresh); err != nil {
		return err
	}
	if fresh {
		began := time.Now()
		if err := c.initdb(ctx); err != nil {
			return fmt.Errorf("initdb: %w", err)
		}
		c.log.Info("postgres cluster initialised", zap.String("bin_dir", c.binDir), zap.Duration("took", time.Since(began)))
	} else if c.password, err = readPassword(filepath.Join(c.dir, passwordName)); err != nil {
		return err
	}

	if c.port, err = c.pickPort(o.Port); err != nil {
		return err
	}
	if err := c.writeConf(o.Settings); err != nil {
		return err
	}
	began := time.Now()
	if err := c.pgctlStart(ctx); err != nil {
		return err
	}
	if err := c.createDatabase(ctx); err != nil {
		c.abandon()
		return err
	}
	c.log.Info("postgres started", zap.String("url", c.RedactedURL()), zap.Duration("took", time.Since(began)))
	return nil
}

// stopOrphan stops the postmaster pid that runs on the data directory
// while nobody holds the directory's lock: the Cluster that started it
// died without Stop (kill -9, OOM killer, a crash), and the postmaster,
// a daemon of its own, outlived it. It is this directory's server, so it
// is stopped cleanly (pg_ctl stop -m fast, then -m immediate, which is
// crash-safe) and started again by the caller with the current settings,
// rather than adopted with whatever port and settings it had.
func (c *Cluster) stopOrphan(ctx context.Context, binDir string, pid int) error {
	c.log.Warn("a postmaster of this cluster is running with no finalizer holding it (its finalizer died); stopping it to start afresh",
		zap.Int("pid", pid))
	var err error
	if c.binDir, err = c.pickBinDir(binDir, false); err != nil {
		return fmt.Errorf("%w: its postmaster (pid %d) is running with no finalizer holding it: %w", ErrInUse, pid, err)
	}
	_, err = c.run(ctx, "pg_ctl", "stop", "-w", "-s", "-m", "fast",
		"-t", strconv.Itoa(int(DefaultStartTimeout/time.Second)), "-D", c.dataDir)
	if err != nil && runningPostmaster(c.dataDir) != 0 && ctx.Err() == nil {
		_, err = c.run(ctx, "pg_ctl", "stop", "-w", "-s", "-m", "immediate", "-D", c.dataDir)
	}
	if runningPostmaster(c.dataDir) != 0 {
		return fmt.Errorf("%w: its postmaster (pid %d) is running with no finalizer holding it, and stopping it failed (%v); stop it with: pg_ctl stop -D %s",
			ErrInUse, pid, err, c.dataDir)
	}
	c.log.Info("stopped the orphaned postmaster", zap.Int("pid", pid))
	return nil
}

// pickBinDir chooses the installation: the one given, the newest for a
// fresh cluster, or the one of the version that made an existing cluster.
func (c *Cluster) pickBinDir(given string, fresh bool) (string, error) {
	if given != "" {
		if !isInstallation(given) {
			return "", fmt.Errorf("%w: %s does not hold initdb, pg_ctl and postgres", ErrNoInstallation, given)
		}
		return given, nil
	}
	if fresh {
		return FindBinDir()
	}
	b, err := os.ReadFile(filepath.Join(c.dataDir, "PG_VERSION"))
	if err != nil {
		return "", err
	}
	major, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		return FindBinDir()
	}
	return binDirFor(major)
}

// initdb initialises the data directory in a scratch directory and renames
// it into place only when it is complete, so an interrupted first start is
// redone, never half-used.
func (c *Cluster) initdb(ctx context.Context) error {
	work := filepath.Join(c.dir, initDirName)
	if err := os.RemoveAll(work); err != nil {
		return err
	}
	password, err := newPassword()
	if err != nil {
		return err
	}
	pwfile := filepath.Join(c.dir, passwordName)
	if err := c.writeFile(pwfile, []byte(password+"\n")); err != nil {
		return err
	}
	if _, err := c.run(ctx, "initdb",
		"-D", work,
		"-U", DefaultUser,
		"--pwfile="+pwfile,
		"--auth-host=scram-sha-256",
		"--auth-local=scram-sha-256",
		"-E", "UTF8",
		"--no-locale",
	); err != nil {
		_ = os.RemoveAll(work)
		return err
	}
	include := "\n# Added by finalizer: settings it rewrites at every start.\ninclude_if_exists = '" + confName + "'\n"
	f, err := os.OpenFile(filepath.Join(work, "postgresql.conf"), os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		return err
	}
	if _, err := f.WriteString(include); err != nil {
		_ = f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	if err := os.Rename(work, c.dataDir); err != nil {
		return err
	}
	c.password = password
	return nil
}

// pickPort returns the port to start on: the one asked for, else the one
// remembered from an earlier start if it is still free, else a new free
// one, which is then remembered.
func (c *Cluster) pickPort(asked int) (int, error) {
	if asked != 0 {
		return asked, nil
	}
	portFile := filepath.Join(c.dir, portName)
	if b, err := os.ReadFile(portFile); err == nil {
		if port, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil && port > 0 {
			if portFree(port) {
				return port, nil
			}
			c.log.Warn("the cluster's port is taken; moving to a new one, so its URL changes", zap.Int("port", port))
		}
	}
	port, err := freePort()
	if err != nil {
		return 0, err
	}
	if err := c.writeFile(portFile, []byte(strconv.Itoa(port)+"\n")); err != nil {
		return 0, err
	}
	return port, nil
}

// writeConf writes the settings that may change between starts (port,
// socket directory) and the caller's extra settings.
func (c *Cluster) writeConf(extra map[string]string) error {
	var b bytes.Buffer
	b.WriteString("# Written by finalizer at every start: edits here are lost.\n")
	settings := map[string]string{
		"listen_addresses":        "127.0.0.1",
		"port":                    strconv.Itoa(c.port),
		"unix_socket_directories": c.dir,
		"password_encryption":     "scram-sha-256",
	}
	if len(c.dir)+len("/.s.PGSQL.65535.lock") > maxSocketLen {
		c.log.Warn("cluster directory path too long for a unix socket; serving TCP only")
		settings["unix_socket_directories"] = ""
	}
	for k, v := range extra {
		settings[k] = v
	}
	keys := make([]string, 0, len(settings))
	for k := range settings {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		fmt.Fprintf(&b, "%s = '%s'\n", k, strings.ReplaceAll(settings[k], "'", "''"))
	}
	return c.writeFile(filepath.Join(c.dataDir, confName), b.Bytes())
}

// pgctlStart starts the server and waits until it accepts connections. On
// failure it stops whatever did start and returns the end of the server log.
func (c *Cluster) pgctlStart(ctx context.Context) error {
	logFile := filepath.Join(c.dir, logName)
	if fi, err := os.Stat(logFile); err == nil && fi.Size() > maxLogSize {
		_ = os.Rename(logFile, logFile+".1")
	}
	_, err := c.run(ctx, "pg_ctl", "start", "-w", "-s",
		"-t", strconv.Itoa(int(DefaultStartTimeout/time.Second)),
		"-D", c.dataDir, "-l", logFile)
	if err != nil {
		c.abandon()
		return fmt.Errorf("pg_ctl start: %w%s", err, logTail(logFile))
	}
	return nil
}

// createDatabase creates DefaultDatabase if it is missing, using psql.
func (c *Cluster) createDatabase(ctx context.Context) error {
	script := "SELECT 'CREATE DATABASE " + DefaultDatabase + "' WHERE NOT EXISTS (SELECT FROM pg_database WHERE datname = '" + DefaultDatabase + "')\n\\gexec\n"
	psql := filepath.Join(c.binDir, "psql")
	if !exists(psql) {
		if p, err := exec.LookPath("psql"); err == nil {
			psql = p
		}
	}
	cmd := exec.CommandContext(ctx, psql,
		"-X", "-q", "-v", "ON_ERROR_STOP=1",
		"-h", "127.0.0.1", "-p", strconv.Itoa(c.port), "-U", DefaultUser, "-d", "postgres")
	cmd.Stdin = strings.NewReader(script)
	cmd.Env = append(cleanEnv(), "PGPASSWORD="+c.password, "PGCONNECT_TIMEOUT=10")
	cmd.Dir = c.dir
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("create database %s: %w: %s", DefaultDatabase, err, strings.TrimSpace(string(out)))
	}
	return nil
}

// abandon stops a server that started but cannot be used, ignoring errors:
// it runs after the failure that is reported.
func (c *Cluster) abandon() {
	ctx, cancel := context.WithTimeout(context.Background(), DefaultStartTimeout)
	defer cancel()
	if runningPostmaster(c.dataDir) != 0 {
		_, _ = c.run(ctx, "pg_ctl", "stop", "-w", "-s", "-m", "immediate", "-D", c.dataDir)
	}
}

// URL returns the connection URL of the database "finalizer", password
// included: postgres://finalizer:PASSWORD@127.0.0.1:PORT/finalizer?sslmode=disable.
func (c *Cluster) URL() string {
	return c.url(url.UserPassword(DefaultUser, c.password))
}

// RedactedURL returns URL with the password masked, for logs and banners.
func (c *Cluster) RedactedURL() string {
	return c.url(url.UserPassword(DefaultUser, "xxxxx"))
}

func (c *Cluster) url(user *url.Userinfo) string {
	u := url.URL{
		Scheme:   "postgres",
		User:     user,
		Host:     net.JoinHostPort("127.0.0.1", strconv.Itoa(c.port)),
		Path:     "/" + DefaultDatabase,
		RawQuery: "sslmode=disable",
	}
	return u.String()
}

// Port returns the TCP port the cluster listens on.
func (c *Cluster) Port() int { return c.port }

// Dir returns the cluster's directory (absolute).
func (c *Cluster) Dir() string { return c.dir }

// Stop stops the server (pg_ctl stop -m fast: sessions are disconnected,
// the cluster shuts down cleanly) and releases the directory. It blocks until
// the server is down or ctx is done, in which case it stops it with -m
// immediate (crash-safe; recovery runs at the next start). Calling it again
// returns nil.
func (c *Cluster) Stop(ctx context.Context) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.stopped {
		return nil
	}
	c.stopped = true
	defer c.lock.unlock()
	_, err := c.run(ctx, "pg_ctl", "stop", "-w", "-s", "-m", "fast",
		"-t", strconv.Itoa(int(DefaultStartTimeout/time.Second)), "-D", c.dataDir)
	if err != nil && runningPostmaster(c.dataDir) != 0 {
		c.abandon()
	}
	if err != nil && runningPostmaster(c.dataDir) != 0 {
		return fmt.Errorf("stop postgres in %s: %w", c.dir, err)
	}
	c.log.Info("postgres stopped")
	return nil
}

// run runs one of the installation's programs as the cluster's owner, in
// the cluster directory, and returns its output; the error holds the output.
func (c *Cluster) run(ctx context.Context, program string, args ...string) ([]byte, error) {
	cmd := exec.CommandContext(ctx, filepath.Join(c.binDir, program), args...)
	cmd.Dir = c.dir
	cmd.Env = cleanEnv()
	cmd.SysProcAttr = c.owner.sysProcAttr()
	cmd.WaitDelay = 5 * time.Second
	out, err := cmd.CombinedOutput()
	if err != nil {
		if msg := strings.TrimSpace(string(out)); msg != "" {
			return out, fmt.Errorf("%s: %w: %s", program, err, msg)
		}
		return out, fmt.Errorf("%s: %w", program, err)
	}
	return out, nil
}

// writeFile writes a 0600 file owned by the cluster's owner, atomically.
func (c *Cluster) writeFile(path string, data []byte) error {
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, data, 0o600); err != nil {
		return err
	}
	if err := c.owner.chown(tmp); err != nil {
		_ = os.Remove(tmp)
		return err
	}
	return os.Rename(tmp, path)
}

// cleanEnv is this process's environment without PG* variables, which
// would otherwise redirect the installation's programs (PGDATA, PGPORT,
// PGOPTIONS, ...), and with a C locale.
func cleanEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		if strings.HasPrefix(kv, "PG") || strings.HasPrefix(kv, "LC_") || strings.HasPrefix(kv, "LANG=") {
			continue
		}
		env = append(env, kv)
	}
	return append(env, "LC_ALL=C")
}

// readPassword reads the password file of an initialised cluster.
func readPassword(path string) (string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return "", fmt.Errorf("read the cluster's password: %w", err)
	}
	p := strings.TrimSpace(string(b))
	if p == "" {
		return "", fmt.Errorf("read the cluster's password: %s is empty", path)
	}
	return p, nil
}

// newPassword returns 32 random hex characters.
func newPassword() (string, error) {
	b := make([]byte, 16)
	if _, err := rand.Read(b); err != nil {
		return "", err
	}
	return hex.EncodeToString(b), nil
}

// freePort returns a TCP port on 127.0.0.1 that was free a moment ago.
func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("pick a free port: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// portFree reports whether port can be bound on 127.0.0.1 now.
func portFree(port int) bool {
	l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
	if err != nil {
		return false
	}
	_ = l.Close()
	return true
}

// logTail returns the last lines of the server log, for an error message.
func logTail(path string) string {
	b, err := os.ReadFile(path)
	if err != nil || len(b) == 0 {
		return ""
	}
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	if len(lines) > 5 {
		lines = lines[len(lines)-5:]
	}
	return "; server log " + path + " ends:\n" + strings.Join(lines, "\n")
}

func exists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

// Remove deletes the cluster directory dir, first stopping (with pg_ctl
// stop -m immediate) a postmaster left running there by a process that died
// without calling Stop. It fails with ErrInUse while a Cluster holds dir,
// and returns nil when dir does not exist. Data is lost: it is meant for
// throwaway clusters such as those of pgtest.
func Remove(ctx context.Context, dir string) error {
	dir, err := filepath.Abs(dir)
	if err != nil {
		return fmt.Errorf("remove postgres cluster: %w", err)
	}
	if !exists(dir) {
		return nil
	}
	c := &Cluster{dir: dir, dataDir: filepath.Join(dir, dataDirName), log: zap.NewNop()}
	if c.owner, err = lookupOwner(); err != nil {
		return fmt.Errorf("remove postgres cluster %s: %w", dir, err)
	}
	lk, holder, err := lock(filepath.Join(dir, lockName))
	if errors.Is(err, errLocked) {
		return fmt.Errorf("remove postgres cluster %s: %w: held by process %d", dir, ErrInUse, holder)
	}
	if err != nil {
		return fmt.Errorf("remove postgres cluster %s: %w", dir, err)
	}
	defer lk.unlock()
	if runningPostmaster(c.dataDir) != 0 {
		if c.binDir, err = c.pickBinDir("", false); err != nil {
			return fmt.Errorf("remove postgres cluster %s: %w", dir, err)
		}
		if _, err := c.run(ctx, "pg_ctl", "stop", "-w", "-s", "-m", "immediate", "-D", c.dataDir); err != nil {
			return fmt.Errorf("remove postgres cluster %s: %w", dir, err)
		}
	}
	if err := os.RemoveAll(dir); err != nil {
		return fmt.Errorf("remove postgres cluster: %w", err)
	}
	return nil
}

// claimDir makes the cluster's directory (an existing one only when reuse
// is true), hands it to the cluster's owner, checks the owner can reach it,
// and takes its lock: ErrInUse names the process that holds it.
func (c *Cluster) claimDir(reuse bool) error {
	if err := os.MkdirAll(filepath.Dir(c.dir), 0o755); err != nil {
		return err
	}
	if err := os.Mkdir(c.dir, 0o700); err != nil && (!reuse || !errors.Is(err, os.ErrExist)) {
		return err
	}
	if err := c.owner.chown(c.dir); err != nil {
		return err
	}
	if err := c.owner.checkReachable(c.dir); err != nil {
		return err
	}
	lk, holder, err := lock(filepath.Join(c.dir, lockName))
	if errors.Is(err, errLocked) {
		return fmt.Errorf("%w: held by process %d", ErrInUse, holder)
	}
	if err != nil {
		return err
	}
	c.lock = lk
	return nil
}
