package cputime_test

import (
	"runtime"
	"testing"
	"time"

	"github.com/finalizer-dev/finalizer/internal/cputime"
)

// TestProcessCountsWork: on a Unix system the process's CPU time grows
// while it works.
func TestProcessCountsWork(t *testing.T) {
	if runtime.GOOS == "windows" {
		t.Skip("no getrusage")
	}
	before := cputime.Process()
	deadline := time.Now().Add(50 * time.Millisecond)
	x := 0
	for time.Now().Before(deadline) {
		x++
	}
	if after := cputime.Process(); after <= before {
		t.Fatalf("CPU time %v then %v after 50 ms of work (%d loops)", before, after, x)
	}
}
