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

// TestATableHeldByAFeederWhoseRunIsHeldByTheRewindSaysSo (review nit
// 4): the table's line said "held by t_b: no verdict of its own yet"
// while t_b's run showed its progress held as posted before the table's
// rewind; it says that now, with or without a verdict of the feeder's
// own, and only when the feeder's run is so held.
func TestATableHeldByAFeederWhoseRunIsHeldByTheRewindSaysSo(t *testing.T) {
	at := statusAt
	v := control.Verdict{Table: "bronze.orders", FinalizedUntil: at.Add(-time.Hour), UpdatedAt: at, RewoundAt: at}
	a := control.Feeder{Table: "bronze.orders", Feeder: "q-a", QueryName: "t_a", FinalizedUntil: at.Add(-time.Hour)}
	b := control.Feeder{Table: "bronze.orders", Feeder: "q-b", QueryName: "t_b"}
	held := finalizer.TrackerStatus{RunID: "r-b", QueryID: "q-b", Table: "bronze.orders", LastEvent: at,
		Held: "before_rewind: the run's progress was stored by the stream at sequence 10"}
	runs := []finalizer.TrackerStatus{{RunID: "r-a", QueryID: "q-a", Table: "bronze.orders", LastEvent: at}, held}
	ts := toTableStatus(v, at, runs, []control.Feeder{a, b})
	if !strings.HasPrefix(ts.HeldBy, "held by t_b: its run's progress is held as before the table's rewind") {
		t.Errorf("held_by %q does not say t_b's run is held by the rewind", ts.HeldBy)
	}
	runs[1].Held = ""
	ts = toTableStatus(v, at, runs, []control.Feeder{a, b})
	if !strings.HasPrefix(ts.HeldBy, "held by t_b: no verdict of its own yet") {
		t.Errorf("held_by %q, want the plain no-verdict line when t_b's run is not held", ts.HeldBy)
	}
}
