package main

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/finalizer-dev/finalizer/control"
	"github.com/finalizer-dev/finalizer/finalizer"
)

// TestStatusShowsARetiredFeedersRunMovesNothing: after rewind
// --retire-feeder of a table's sole feeder, that query's still-running
// run posts; status showed it as plain "running", with no feeders and no
// hold, though it moves nothing. It shows the run as retired, the feeders
// with "retired but reporting", and the table as not moving, whether the
// retired feeder was the only one or one of several retired; a live run
// of another query (solo, no feeder row) still feeds the table.
func TestStatusShowsARetiredFeedersRunMovesNothing(t *testing.T) {
	at := statusAt
	v := control.Verdict{Table: "bronze.orders", FinalizedUntil: at.Add(-time.Hour), UpdatedAt: at, RewoundAt: at}
	old := control.Feeder{Table: "bronze.orders", Feeder: "8d268dc2-bc9c-4be8-97a9-b135d2943028", QueryName: "orders-v1",
		FinalizedUntil: at.Add(-time.Hour), RetiredAt: at}
	gone := control.Feeder{Table: "bronze.orders", Feeder: "q-gone", QueryName: "backfill", FinalizedUntil: at.Add(-time.Hour), RetiredAt: at}
	run := finalizer.TrackerStatus{RunID: "a1b2c3d4-0000-0000-0000-000000000000", QueryID: old.Feeder, Table: "bronze.orders", LastEvent: at}
	for _, feeders := range [][]control.Feeder{{old}, {old, gone}} {
		runs := []finalizer.TrackerStatus{run}
		ts := toTableStatus(v, at, runs, feeders)
		if !strings.HasPrefix(ts.HeldBy, "not moving: the run of retired feeder orders-v1 (run a1b2c3d4) still reports") {
			t.Errorf("%d feeders: held_by %q", len(feeders), ts.HeldBy)
		}
		var out bytes.Buffer
		printStatus(&out, []tableStatus{ts}, runs, nil, "")
		text := out.String()
		for _, want := range []string{"retired but reporting", "bronze.orders is not moving", "RETIRED, reporting (moves nothing)"} {
			if !strings.Contains(text, want) {
				t.Errorf("%d feeders: status lacks %q:\n%s", len(feeders), want, text)
			}
		}
		for _, l := range strings.Split(text, "\n") {
			if strings.HasPrefix(l, run.RunID) && strings.Contains(l, " running") {
				t.Errorf("%d feeders: the run shows as running: %q", len(feeders), l)
			}
		}
		// A new query's run (solo: no feeder row) feeds it.
		solo := append(runs, finalizer.TrackerStatus{RunID: "r-new", QueryID: "q-new", Table: "bronze.orders", LastEvent: at})
		if ts := toTableStatus(v, at, solo, feeders); ts.HeldBy != "" {
			t.Errorf("%d feeders and a new query's run: held_by %q, want none", len(feeders), ts.HeldBy)
		}
	}
	// Runs unknown (no --http-url): nothing is claimed.
	if ts := toTableStatus(v, at, nil, []control.Feeder{old}); ts.HeldBy != "" {
		t.Errorf("runs unknown: held_by %q", ts.HeldBy)
	}
}
