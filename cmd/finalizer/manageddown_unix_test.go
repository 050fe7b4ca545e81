//go:build unix

package main

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// TestManagedDownSaysWhetherServeRuns: status, is-final and wait, finding
// the managed PostgreSQL of a data dir unreachable, do not say its serve is
// stopped while the data dir's lock names a live one (starting, or its
// PostgreSQL stopped under it), so that no one starts a second serve there.
func TestManagedDownSaysWhetherServeRuns(t *testing.T) {
	dir := t.TempDir()
	stopped := managedDown(dir).Error()
	if !strings.Contains(stopped, "is not running (its serve is stopped)") || !strings.Contains(stopped, "finalizer serve --data-dir") {
		t.Errorf("no lock file: %q", stopped)
	}
	if err := os.WriteFile(filepath.Join(dir, "finalizer.lock"), []byte(strconv.Itoa(os.Getpid())+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	running := managedDown(dir).Error()
	if want := "although its serve runs (pid " + strconv.Itoa(os.Getpid()) + ")"; !strings.Contains(running, want) || strings.Contains(running, "serve is stopped") {
		t.Errorf("the lock names this process: %q, want %q", running, want)
	}
}
