package statuspage

import (
	"strings"
	"testing"
	"time"

	"github.com/finalizer-dev/finalizer/control"
	"github.com/finalizer-dev/finalizer/finalizer"
)

func TestHistoryIsBoundedByWindowAndCount(t *testing.T) {
	now := utc("2026-09-28T20:00:00Z")
	h := newHistory(6*time.Hour, 4)
	// One move an hour, from 10:00 to 19:00: the window starts at 14:00.
	for hr := 10; hr <= 19; hr++ {
		at := utc("2026-09-28T00:00:00Z").Add(time.Duration(hr) * time.Hour)
		h.record("t", at.Add(5*time.Minute), at, now, false)
	}
	ms := h.moves("t")
	if len(ms) != 4 {
		t.Fatalf("%d moves kept, want the bound 4: %v", len(ms), ms)
	}
	if last := time.Unix(ms[3].until, 0).UTC(); !last.Equal(utc("2026-09-28T19:00:00Z")) {
		t.Errorf("newest move %v", last)
	}
	h = newHistory(6*time.Hour, 100)
	for hr := 10; hr <= 19; hr++ {
		at := utc("2026-09-28T00:00:00Z").Add(time.Duration(hr) * time.Hour)
		h.record("t", at.Add(5*time.Minute), at, now, false)
	}
	ms = h.moves("t")
	// 13:05 is the last move before the window (14:00): kept as its start.
	if first := time.Unix(ms[0].at, 0).UTC(); !first.Equal(utc("2026-09-28T13:05:00Z")) || len(ms) != 7 {
		t.Errorf("window: first move at %v, %d moves; want 13:05 and 7", first, len(ms))
	}
	// Not forward: ignored.
	h.record("t", now, utc("2026-09-28T18:00:00Z"), now, false)
	h.record("t", now, utc("2026-09-28T19:00:00Z"), now, true)
	if len(h.moves("t")) != 7 {
		t.Error("a repeated or older announcement was recorded")
	}
	// A rewind goes back, and the lag then rises by as much.
	h.record("t", now, utc("2026-09-28T16:00:00Z"), now, true)
	if ms := h.moves("t"); len(ms) != 8 || ms[7].until != utc("2026-09-28T16:00:00Z").Unix() {
		t.Errorf("a rewind was not recorded: %v", ms)
	}
	h.keep(map[string]bool{"other": true})
	if h.moves("t") != nil {
		t.Error("a table gone from the control table kept its history")
	}
}

// The sparkline is the lag: it rises with the clock and drops at a move.
func TestSparklineIsTheLag(t *testing.T) {
	now := utc("2026-09-28T06:00:00Z")
	ms := []move{
		{at: utc("2026-09-28T00:00:00Z").Unix(), until: utc("2026-09-27T23:00:00Z").Unix()},
		{at: utc("2026-09-28T03:00:00Z").Unix(), until: utc("2026-09-28T02:00:00Z").Unix()},
	}
	sp := sparkline(ms, 6*time.Hour, now)
	if sp.start != ms[0].at {
		t.Errorf("start %d, want the first move %d", sp.start, ms[0].at)
	}
	// 00:00 lag 1h (the least); 03:00 lag 4h (the largest) then 1h; 06:00 lag 4h.
	if want := "0,230 600,10 600,230 1200,10"; sp.points != want {
		t.Errorf("points %q, want %q", sp.points, want)
	}
	if sp.low != 3600 || sp.high != 4*3600 {
		t.Errorf("lag from %d to %d, want 1h to 4h", sp.low, sp.high)
	}
	// A window shorter than what is known starts at the window.
	if sp := sparkline(ms, time.Hour, now); sp.start != now.Add(-time.Hour).Unix() {
		t.Errorf("start %d, want the window's", sp.start)
	}
	if sp := sparkline(nil, time.Hour, now); sp.points != "" {
		t.Errorf("no moves: %q", sp.points)
	}
	if got := movesAttr(ms); got != "1790553600:1790550000,1790564400:1790560800" {
		t.Errorf("movesAttr %q", got)
	}
}

func TestHoldsBack(t *testing.T) {
	v := control.Verdict{Table: "t", FinalizedUntil: utc("2026-09-28T13:00:00Z")}
	run := func(st finalizer.TrackerStatus) runRow {
		st.RunID, st.Table = runA, "t"
		return newRunRow(st)
	}
	for _, c := range []struct {
		name  string
		runs  []runRow
		state string
		says  string
	}{
		{"no run", nil, TableUntracked, "no tracked run"},
		{"running", []runRow{run(finalizer.TrackerStatus{})}, TableMoving, "the period from 2026-09-28 13:00:00Z closes"},
		{"idle", []runRow{run(finalizer.TrackerStatus{Idle: true})}, TableIdle, "has no new data"},
		{"stale", []runRow{run(finalizer.TrackerStatus{Stale: true, LastEvent: utc("2026-09-28T13:20:00Z")})}, TableStale, "no event since 2026-09-28 13:20:00Z"},
		{"held", []runRow{run(finalizer.TrackerStatus{Held: "no_time: the source's endOffset has no /commit_ts"})}, TableHeld, "gives no verdict: no_time: the source"},
		{"failing", []runRow{run(finalizer.TrackerStatus{Failures: 2, LastError: "boom"})}, TableFailing, "failing (2 in a row): boom"},
		{"terminated", []runRow{run(finalizer.TrackerStatus{Terminated: true, Done: true})}, TableUntracked, "terminated; no live run"},
		{"worst wins", []runRow{run(finalizer.TrackerStatus{}), run(finalizer.TrackerStatus{Stale: true})}, TableStale, "stale"},
	} {
		t.Run(c.name, func(t *testing.T) {
			state, why := holdsBack(v, c.runs, nil)
			if state != c.state || !strings.Contains(why, c.says) {
				t.Errorf("holdsBack = %s %q, want %s and %q", state, why, c.state, c.says)
			}
			// A mark comes first, and keeps what the runs say.
			marked := v
			marked.Mark, marked.Marks = "source 0 offset went back", 2
			state, why = holdsBack(marked, c.runs, nil)
			if state != TableMarked || !strings.Contains(why, "(2 signs): source 0 offset went back") || !strings.Contains(why, c.says) {
				t.Errorf("marked: holdsBack = %s %q", state, why)
			}
		})
	}
}

// A table with several feeders is held by the slowest, and that feeder's
// runs say why; one expected but silent holds it from the start.
func TestHoldsBackWithFeeders(t *testing.T) {
	v := control.Verdict{Table: "silver.all", FinalizedUntil: utc("2026-09-28T12:00:00Z")}
	us := control.Feeder{Table: "silver.all", Feeder: queryA, QueryName: "region-us", FinalizedUntil: utc("2026-09-28T12:00:00Z")}
	eu := control.Feeder{Table: "silver.all", Feeder: "q-eu", QueryName: "region-eu", FinalizedUntil: utc("2026-09-28T14:00:00Z")}
	runs := []runRow{
		newRunRow(finalizer.TrackerStatus{RunID: runA, QueryID: queryA, Table: "silver.all", Stale: true, LastEvent: utc("2026-09-28T12:31:00Z")}),
		newRunRow(finalizer.TrackerStatus{RunID: runB, QueryID: "q-eu", Table: "silver.all"}),
	}
	state, why := holdsBack(v, runs, []control.Feeder{eu, us})
	if state != TableStale || !strings.Contains(why, "held by feeder region-us at 2026-09-28 12:00:00Z: run e225d92f is stale") {
		t.Errorf("two feeders: %s %q", state, why)
	}
	// Retired: region-eu alone explains the table, as a single feeder.
	us.RetiredAt = utc("2026-09-28T15:00:00Z")
	if state, why := holdsBack(v, runs[1:], []control.Feeder{eu, us}); state != TableMoving || strings.Contains(why, "feeder") {
		t.Errorf("one live feeder: %s %q", state, why)
	}
	expected := control.Feeder{Table: "silver.all", Feeder: "region-ap", Expected: true}
	if state, why := holdsBack(v, runs, []control.Feeder{expected}); state != TableHeld || !strings.Contains(why, "region-ap, which has not reported yet") {
		t.Errorf("expected feeder: %s %q", state, why)
	}
	// A feeder with no verdict of its own whose run reports, every
	// progress held: its run's reason, not "not reported yet" (outside
	// review: the gating answers said "(reporting)", which read healthy).
	joined := control.Feeder{Table: "silver.all", Feeder: "q-ap", QueryName: "region-ap"}
	held := newRunRow(finalizer.TrackerStatus{RunID: "r-ap", QueryID: "q-ap", Table: "silver.all",
		Held: `no_time: source 0: pointer "/commit_ts" finds nothing in endOffset`})
	if state, why := holdsBack(v, append(runs, held), []control.Feeder{eu, joined}); state != TableHeld ||
		why != `held by feeder region-ap, which has no verdict of its own yet: run r-ap's newest progress gives no verdict: no_time: source 0: pointer "/commit_ts" finds nothing in endOffset` {
		t.Errorf("joined feeder, its run held: %s %q", state, why)
	}
	if state, why := holdsBack(v, runs, []control.Feeder{eu, joined}); state != TableHeld || !strings.Contains(why, "region-ap, which has not reported yet") {
		t.Errorf("joined feeder, no run: %s %q", state, why)
	}
}

func TestFmtLagAndBar(t *testing.T) {
	for sec, want := range map[float64]string{-5: "0s", 42: "42s", 303: "5m3s", 3900: "1h5m", 50 * 3600: "2d2h"} {
		if got := fmtLag(sec); got != want {
			t.Errorf("fmtLag(%v) = %q, want %q", sec, got, want)
		}
	}
	if lagBar(0) != 0 || lagBar(30*24*3600) != 100 || lagBar(3600) <= lagBar(300) {
		t.Error("lagBar is not 0 at 0, full past 7 days, rising")
	}
}

// A live run of a retired feeder moves nothing: after rewind
// --retire-feeder of a table's sole feeder, its still-running run showed
// as running and the table as moving. The run is retired and the table
// untracked, whether the retired feeder was its only one or one of two;
// another live run (a solo query without a feeder row) still moves it.
func TestARetiredFeedersRunMovesNothing(t *testing.T) {
	v := control.Verdict{Table: "silver.all", FinalizedUntil: utc("2026-09-28T12:00:00Z")}
	old := control.Feeder{Table: "silver.all", Feeder: queryA, QueryName: "orders-v1", FinalizedUntil: utc("2026-09-28T12:00:00Z"),
		RetiredAt: utc("2026-09-28T13:00:00Z")}
	other := control.Feeder{Table: "silver.all", Feeder: "q-x", QueryName: "other", FinalizedUntil: utc("2026-09-28T12:00:00Z"),
		RetiredAt: utc("2026-09-28T13:00:00Z")}
	for _, feeders := range [][]control.Feeder{{old}, {old, other}} {
		runs := []runRow{newRunRow(finalizer.TrackerStatus{RunID: runA, QueryID: queryA, Table: "silver.all"})}
		retireRuns(runs, map[string][]control.Feeder{"silver.all": feeders})
		if runs[0].State != RunRetired {
			t.Fatalf("%d feeders: the retired feeder's run is %s, want %s", len(feeders), runs[0].State, RunRetired)
		}
		if state, why := holdsBack(v, runs, feeders); state != TableUntracked || !strings.Contains(why, "retired feeder") {
			t.Errorf("%d feeders: table %s %q, want untracked", len(feeders), state, why)
		}
		solo := append(runs, newRunRow(finalizer.TrackerStatus{RunID: runB, QueryID: "q-new", Table: "silver.all"}))
		if state, _ := holdsBack(v, solo, feeders); state != TableMoving {
			t.Errorf("%d feeders and a new query's run: table %s, want moving", len(feeders), state)
		}
	}
	ended := []runRow{newRunRow(finalizer.TrackerStatus{RunID: runA, QueryID: queryA, Table: "silver.all", Terminated: true})}
	retireRuns(ended, map[string][]control.Feeder{"silver.all": {old}})
	if ended[0].State != RunTerminated {
		t.Errorf("a terminated run of a retired feeder is %s", ended[0].State)
	}
}
