//go:build unix

package service

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

// lockFile is the data dir's lock, holding the pid of the serve that has it.
const lockFile = "finalizer.lock"

// lockDataDir takes an exclusive lock on dir so that a second serve on the
// same data dir fails with a clear message instead of sharing its NATS
// store and PostgreSQL cluster. The lock dies with the process, so a
// kill -9 leaves nothing to clean up.
func lockDataDir(dir string) (func(), error) {
	path := filepath.Join(dir, lockFile)
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, fmt.Errorf("lock data dir: %w", err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		pid, _ := os.ReadFile(path)
		f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, fmt.Errorf("data dir %s is in use by another finalizer serve (pid %s); stop it or use another --data-dir",
				dir, strings.TrimSpace(string(pid)))
		}
		return nil, fmt.Errorf("lock data dir: %w", err)
	}
	_ = f.Truncate(0)
	_, _ = f.WriteAt([]byte(strconv.Itoa(os.Getpid())+"\n"), 0)
	return func() {
		_ = f.Truncate(0) // a clean stop leaves no pid for RunningServe to find
		_ = syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
		f.Close()
	}, nil
}

// RunningServe returns the pid of the serve that holds dir's lock, read
// from the lock file, when a process of that pid is alive: the client
// commands tell "the serve is stopped" from "the serve runs, but its
// managed PostgreSQL does not answer (starting, or stopped under it)". It
// takes no lock, so it never makes a serve starting at that moment fail.
// A serve killed with -9 leaves its pid behind; a process that took that
// pid since reads as a serve (a hint in an error message, nothing more).
func RunningServe(dir string) (int, bool) {
	raw, err := os.ReadFile(filepath.Join(dir, lockFile))
	if err != nil {
		return 0, false
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(raw)))
	if err != nil || pid <= 0 {
		return 0, false
	}
	if err := syscall.Kill(pid, 0); err != nil && !errors.Is(err, syscall.EPERM) {
		return 0, false
	}
	return pid, true
}
