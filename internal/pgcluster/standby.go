package pgcluster

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"go.uber.org/zap"
)

// StartStandby makes a streaming standby of c in o.Dir, with
// pg_basebackup -R (a base backup that streams the WAL it needs and writes
// primary_conninfo and standby.signal), and starts it. The standby shares
// c's installation and password, listens on o.Port (0: a free port) and
// applies o.Settings; its database is read-only until Promote. It is meant
// for tests of a failover: the production standby of a deployment is the
// operator's (see docs/deployment.md).
func (c *Cluster) StartStandby(ctx context.Context, o Options) (*Cluster, error) {
	if o.Dir == "" {
		return nil, errors.New("start standby: no directory")
	}
	dir, err := filepath.Abs(o.Dir)
	if err != nil {
		return nil, fmt.Errorf("start standby: %w", err)
	}
	s := &Cluster{dir: dir, dataDir: filepath.Join(dir, dataDirName), binDir: c.binDir, password: c.password, owner: c.owner, log: o.Logger}
	if s.log == nil {
		s.log = zap.NewNop()
	}
	s.log = s.log.With(zap.String("dir", dir))
	if err := s.startStandby(ctx, c, o); err != nil {
		s.lock.unlock()
		return nil, fmt.Errorf("start standby in %s: %w", dir, err)
	}
	return s, nil
}

func (s *Cluster) startStandby(ctx context.Context, primary *Cluster, o Options) error {
	// A standby is made afresh, never over an existing directory.
	if err := s.claimDir(false); err != nil {
		return err
	}
	if err := s.writeFile(filepath.Join(s.dir, passwordName), []byte(s.password+"\n")); err != nil {
		return err
	}
	began := time.Now()
	if _, err := s.runEnv(ctx, []string{"PGPASSWORD=" + s.password}, "pg_basebackup",
		"-D", s.dataDir, "-R", "-X", "stream", "-c", "fast", "-w",
		"-h", "127.0.0.1", "-p", strconv.Itoa(primary.port), "-U", DefaultUser); err != nil {
		return fmt.Errorf("pg_basebackup: %w", err)
	}
	port, err := s.pickPort(o.Port)
	if err != nil {
		return err
	}
	s.port = port
	if err := s.writeConf(o.Settings); err != nil {
		return err
	}
	if err := s.pgctlStart(ctx); err != nil {
		return err
	}
	s.log.Info("postgres standby started", zap.Int("port", s.port), zap.Int("primary_port", primary.port),
		zap.Duration("took", time.Since(began)))
	return nil
}

// Promote ends the standby's recovery: it becomes a primary that accepts
// writes. It waits until the promotion is complete.
func (c *Cluster) Promote(ctx context.Context) error {
	if _, err := c.run(ctx, "pg_ctl", "promote", "-w", "-s",
		"-t", strconv.Itoa(int(DefaultStartTimeout/time.Second)), "-D", c.dataDir); err != nil {
		return fmt.Errorf("promote %s: %w", c.dir, err)
	}
	c.log.Info("postgres standby promoted")
	return nil
}

// DetachStandby stops the standby's WAL receiver: it keeps serving reads
// of what it has, and receives nothing more from its primary. A test uses
// it to make a commit on the primary that the standby never sees, as
// asynchronous replication can lose the newest commits in a failover.
// It returns once the receiver has stopped (detachPoll): pg_ctl reload
// only signals the server, whose startup process stops the receiver in
// its own time, and a commit made before that is still streamed.
func (c *Cluster) DetachStandby(ctx context.Context) error {
	auto := filepath.Join(c.dataDir, "postgresql.auto.conf")
	b, err := os.ReadFile(auto)
	if err != nil {
		return fmt.Errorf("detach standby: %w", err)
	}
	var keep []string
	for _, line := range strings.Split(string(b), "\n") {
		if !strings.HasPrefix(strings.TrimSpace(line), "primary_conninfo") {
			keep = append(keep, line)
		}
	}
	if err := c.writeFile(auto, []byte(strings.Join(keep, "\n"))); err != nil {
		return fmt.Errorf("detach standby: %w", err)
	}
	if _, err := c.run(ctx, "pg_ctl", "reload", "-s", "-D", c.dataDir); err != nil {
		return fmt.Errorf("detach standby: %w", err)
	}
	// Detached once a new session sees the setting gone (the postmaster
	// reloaded) and no WAL receiver runs (the startup process stopped it,
	// and starts none without primary_conninfo).
	var last error
	for {
		detached, err := c.detached(ctx)
		if err == nil && detached {
			return nil
		}
		if err != nil {
			last = err
		}
		t := time.NewTimer(detachPoll)
		select {
		case <-ctx.Done():
			t.Stop()
			if last != nil {
				return fmt.Errorf("detach standby: the WAL receiver did not stop: %w (last check: %w)", ctx.Err(), last)
			}
			return fmt.Errorf("detach standby: the WAL receiver did not stop: %w", ctx.Err())
		case <-t.C:
		}
	}
}

// detachPoll is how often DetachStandby checks whether the WAL receiver
// has stopped.
const detachPoll = 20 * time.Millisecond

// detached reports whether a new session of the standby sees no
// primary_conninfo and no WAL receiver.
func (c *Cluster) detached(ctx context.Context) (bool, error) {
	conn, err := pgx.Connect(ctx, c.URL())
	if err != nil {
		return false, err
	}
	defer conn.Close(ctx)
	var detached bool
	err = conn.QueryRow(ctx, `SELECT current_setting('primary_conninfo') = '' AND NOT EXISTS (SELECT FROM pg_stat_wal_receiver)`).Scan(&detached)
	return detached, err
}

// Crash stops the server with pg_ctl stop -m immediate, as a crash would
// (recovery runs at the next start), and releases the directory.
func (c *Cluster) Crash(ctx context.Context) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.stopped {
		return nil
	}
	c.stopped = true
	defer c.lock.unlock()
	if _, err := c.run(ctx, "pg_ctl", "stop", "-w", "-s", "-m", "immediate", "-D", c.dataDir); err != nil {
		return fmt.Errorf("crash postgres in %s: %w", c.dir, err)
	}
	c.log.Info("postgres stopped (immediate)")
	return nil
}

// runEnv is run with extra environment variables.
func (c *Cluster) runEnv(ctx context.Context, env []string, program string, args ...string) ([]byte, error) {
	cmd := exec.CommandContext(ctx, filepath.Join(c.binDir, program), args...)
	cmd.Dir = c.dir
	cmd.Env = append(cleanEnv(), env...)
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
