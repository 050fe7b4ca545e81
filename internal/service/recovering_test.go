package service

import (
	"testing"
	"time"

	"github.com/finalizer-dev/finalizer/control"
	"github.com/finalizer-dev/finalizer/listener"
)

// TestRecoveringCountsEachRunOnce: the runs a restart tells the memory
// limit to expect (memlimit.Limiter.Expect) are the explicit tracks not
// done and the retained runs, a run that is both counted once, so that
// the limit never counts more runs than will be tracked.
func TestRecoveringCountsEachRunOnce(t *testing.T) {
	tracks := []control.Track{{RunID: "a"}, {RunID: "b"}, {RunID: "c", DoneAt: time.Now()}}
	runs := []listener.Run{{RunID: "a"}, {RunID: "c"}, {RunID: "d"}}
	if got := recovering(tracks, runs); got != 4 {
		t.Fatalf("recovering = %d, want 4 (a, b, c retained, d)", got)
	}
	if got := recovering(tracks, nil); got != 2 {
		t.Fatalf("recovering of the tracks alone = %d, want 2", got)
	}
}
