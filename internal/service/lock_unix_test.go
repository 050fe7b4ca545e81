//go:build unix

package service

import (
	"os"
	"path/filepath"
	"strconv"
	"testing"
)

// TestRunningServeFollowsTheLock: the data dir's lock names a live serve
// while it is held; a clean release leaves no pid behind, and a pid that
// names no process (a serve killed long ago) is no serve either.
func TestRunningServeFollowsTheLock(t *testing.T) {
	dir := t.TempDir()
	if _, ok := RunningServe(dir); ok {
		t.Fatal("a data dir without a lock file has a running serve")
	}
	unlock, err := lockDataDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	if pid, ok := RunningServe(dir); !ok || pid != os.Getpid() {
		t.Fatalf("while the lock is held: RunningServe = %d, %v; want %d, true", pid, ok, os.Getpid())
	}
	unlock()
	if pid, ok := RunningServe(dir); ok {
		t.Fatalf("after a clean release: RunningServe = %d, true", pid)
	}
	// The highest pid Linux hands out is 4194304: this one names no process.
	if err := os.WriteFile(filepath.Join(dir, lockFile), []byte(strconv.Itoa(1<<23)+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if pid, ok := RunningServe(dir); ok {
		t.Fatalf("a pid of no process: RunningServe = %d, true", pid)
	}
}
