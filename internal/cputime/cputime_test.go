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

func TestSwitchesCountsWaits(t *testing.T) {
	if runtime.GOOS == "windows" {
		t.Skip("no getrusage")
	}
	before := cputime.Switches()
	for range 5 {
		time.Sleep(time.Millisecond) // every thread idle: one sleeps in the kernel
	}
	if after := cputime.Switches(); after <= before {
		t.Fatalf("context switches %d then %d after 5 sleeps", before, after)
	}
}
