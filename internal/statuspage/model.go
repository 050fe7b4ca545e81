package statuspage

import (
	"fmt"
	"math"
	"time"

	"github.com/finalizer-dev/finalizer/control"
	"github.com/finalizer-dev/finalizer/finalizer"
)

// The states a run is shown in. Each has a colour on the page and is
// always written out as text.
const (
	RunRunning    = "running"    // events arrive, with new data
	RunIdle       = "idle"       // events arrive, without new data
	RunStale      = "stale"      // silent for longer than tracking.stale_after
	RunHeld       = "held"       // its newest progress gave no verdict: a guard holds it (ADR 0012)
	RunFailing    = "failing"    // its last advance failed after the retries
	RunTerminated = "terminated" // its termination arrived
	RunStopped    = "stopped"    // its tracker stopped without a termination (superseded, expired, shutdown)
	RunRetired    = "retired"    // a live run of a retired feeder of its table: its progress moves nothing
)

// The states a table is shown in: the state of what holds it back.
const (
	TableMoving    = "moving"    // a running run feeds it: the open period closes when its data passes the end
	TableIdle      = "idle"      // its run has no new data
	TableStale     = "stale"     // its run is silent
	TableHeld      = "held"      // its run's newest progress gives no verdict (a guard)
	TableFailing   = "failing"   // its run's advances fail
	TableUntracked = "untracked" // no live run feeds it: nothing moves it
	TableMarked    = "marked"    // its history may have changed under the verdict: an operator must look
)

// runState returns the state of a tracked run.
func runState(r finalizer.TrackerStatus) string {
	switch {
	case r.Terminated:
		return RunTerminated
	case r.Done:
		return RunStopped
	case r.Failures > 0:
		return RunFailing
	case r.Stale:
		return RunStale
	case r.Held != "":
		return RunHeld
	case r.Idle:
		return RunIdle
	default:
		return RunRunning
	}
}

// tableRow is one table as the page shows it. It is comparable: a row is
// sent to the browsers when it differs from the one they have.
type tableRow struct {
	Table     string
	Until     time.Time
	UpdatedAt time.Time
	RunID     string
	BatchID   int64
	State     string // Table*
	HeldBy    string // what holds the verdict back, in words
	RewoundAt time.Time
	// Moves and Last identify the history shown: its length and its
	// newest move (the slice itself is not comparable).
	Moves int
	Last  move
	First move
	ver   uint64
}

// runRow is one tracked run as the page shows it.
type runRow struct {
	Key       string // run id and table
	RunID     string
	QueryID   string
	Table     string
	State     string // Run*
	LastEvent time.Time
	NotHeard  bool // nothing heard live since the tracker started: LastEvent is its start
	Written   time.Time
	Failures  int
	LastError string
	Held      string // why its newest progress gave no verdict, "" when it gave one
	Explicit  bool
	ver       uint64
}

func newRunRow(r finalizer.TrackerStatus) runRow {
	return runRow{
		Key: r.RunID + " " + r.Table, RunID: r.RunID, QueryID: r.QueryID, Table: r.Table, State: runState(r),
		// To the minute: a run's every event must not resend its row.
		LastEvent: r.LastEvent.UTC().Truncate(time.Minute), NotHeard: r.NotHeard, Written: r.Written.UTC(),
		Failures: r.Failures, LastError: r.LastError, Held: r.Held, Explicit: r.Explicit,
	}
}

// severity orders run states by how much they explain a table held back.
var severity = map[string]int{RunFailing: 6, RunStale: 5, RunHeld: 4, RunIdle: 3, RunRunning: 2, RunRetired: 1, RunTerminated: 1, RunStopped: 0}

// retireRuns marks the live runs of retired feeders (feeders: by table)
// RunRetired: a retired query's progress moves nothing, so such a run
// must neither show as running nor make its table moving (a rewind that
// retired the table's sole feeder while its run still reported showed the
// table st-moving).
func retireRuns(runs []runRow, feeders map[string][]control.Feeder) {
	for i := range runs {
		r := &runs[i]
		if r.State == RunTerminated || r.State == RunStopped {
			continue
		}
		for _, f := range feeders[r.Table] {
			if f.Feeder == r.QueryID && f.Retired() {
				r.State = RunRetired
				break
			}
		}
	}
}

// holdsBack returns the state of a table and, in words, what holds its
// verdict back, from the runs that feed it. The worst run explains the
// table: a failing one before a stale one before an idle one.
//
// This is the one place that decides it: a source that knows more (a
// table fed by several queries, where the slowest one holds it) extends
// this function.
func holdsBack(v control.Verdict, runs []runRow, feeders []control.Feeder) (state, why string) {
	if v.Mark != "" {
		state, why = holdsBack(control.Verdict{Table: v.Table, FinalizedUntil: v.FinalizedUntil}, runs, feeders)
		return TableMarked, fmt.Sprintf("marked since %s (%d signs): %s; look, then finalizer rewind or acknowledge. And: %s",
			fmtTime(v.MarkedAt), v.Marks, v.Mark, why)
	}
	// Several feeders: the slowest one holds the table (ADR of issue 10);
	// its runs say why.
	if f, ok := slowest(feeders); ok {
		name := f.Name()
		var own []runRow
		for _, r := range runs {
			if r.QueryID == f.Feeder {
				own = append(own, r)
			}
		}
		if f.FinalizedUntil.IsZero() {
			// Its run reports but is held, failing or stale: say why,
			// not "not reported yet", as is-final and wait do.
			if state, why = holdsBack(control.Verdict{Table: v.Table}, own, nil); state == TableHeld || state == TableFailing || state == TableStale {
				return state, fmt.Sprintf("held by feeder %s, which has no verdict of its own yet: %s", name, why)
			}
			return TableHeld, fmt.Sprintf("held by feeder %s, which has not reported yet", name)
		}
		state, why = holdsBack(control.Verdict{Table: v.Table, FinalizedUntil: f.FinalizedUntil}, own, nil)
		return state, fmt.Sprintf("held by feeder %s at %s: %s", name, fmtVerdict(f.FinalizedUntil), why)
	}
	var worst *runRow
	for i := range runs {
		r := &runs[i]
		if worst == nil || severity[r.State] > severity[worst.State] {
			worst = r
		}
	}
	next := "the period from " + fmtVerdict(v.FinalizedUntil)
	switch {
	case worst == nil:
		return TableUntracked, "no tracked run: nothing moves it"
	case worst.State == RunFailing:
		return TableFailing, fmt.Sprintf("run %s is failing (%d in a row): %s", short(worst.RunID), worst.Failures, worst.LastError)
	case worst.State == RunStale:
		return TableStale, fmt.Sprintf("run %s is stale: no event since %s", short(worst.RunID), fmtTime(worst.LastEvent))
	case worst.State == RunHeld:
		return TableHeld, fmt.Sprintf("run %s's newest progress gives no verdict: %s", short(worst.RunID), worst.Held)
	case worst.State == RunIdle:
		return TableIdle, fmt.Sprintf("run %s has no new data; %s is open", short(worst.RunID), next)
	case worst.State == RunRunning:
		return TableMoving, fmt.Sprintf("run %s: %s closes when its data passes the period's end", short(worst.RunID), next)
	case worst.State == RunRetired:
		return TableUntracked, fmt.Sprintf("run %s is of a retired feeder: its progress moves nothing; no live run moves it", short(worst.RunID))
	default:
		return TableUntracked, fmt.Sprintf("run %s %s; no live run moves it", short(worst.RunID), worst.State)
	}
}

// fmtLastEvent prints a run's last event: its time, or, when nothing was
// heard live since its tracker started (a restart read its events from
// the stream), that it was heard of by none since then.
func fmtLastEvent(r runRow) string {
	if r.NotHeard {
		return "none since " + fmtTime(r.LastEvent) + " (start)"
	}
	return fmtTime(r.LastEvent)
}

// fmtVerdict prints a verdict time in UTC with its fraction when it has one:
// a stored 10:59:59.999999 must not read as 10:59:59, a second it does not
// cover.
func fmtVerdict(t time.Time) string {
	if t.IsZero() {
		return "never"
	}
	return t.UTC().Format("2006-01-02 15:04:05.999999999Z")
}

// fmtTime prints a time in UTC, to the second.
func fmtTime(t time.Time) string {
	if t.IsZero() {
		return "never"
	}
	return t.UTC().Format("2006-01-02 15:04:05Z")
}

// fmtLag prints a lag the way an operator reads it: 42s, 5m3s, 1h5m, 3d4h.
// The page's script prints it the same way.
func fmtLag(sec float64) string {
	if sec < 0 {
		sec = 0
	}
	s := int64(sec)
	switch {
	case s < 60:
		return fmt.Sprintf("%ds", s)
	case s < 3600:
		return fmt.Sprintf("%dm%ds", s/60, s%60)
	case s < 48*3600:
		return fmt.Sprintf("%dh%dm", s/3600, s%3600/60)
	default:
		return fmt.Sprintf("%dd%dh", s/86400, s%86400/3600)
	}
}

// lagBarMax is the lag of a full bar. The bar is logarithmic from one
// minute, so that 5 minutes and 3 days both read.
const lagBarMax = 7 * 24 * time.Hour

// lagBar returns the bar's length, 0 to 100, for a lag in seconds. The
// page's script computes it the same way.
func lagBar(sec float64) float64 {
	if sec <= 0 {
		return 0
	}
	f := math.Log1p(sec/60) / math.Log1p(lagBarMax.Minutes())
	return math.Round(min(f, 1)*1000) / 10
}

func short(id string) string {
	if len(id) > 8 {
		return id[:8]
	}
	return id
}

// slowest returns the feeder that holds a table fed by more than one
// (control.Holder: the earliest watermark, one that never reported first).
// It returns false for a table with one reporting feeder or none: its runs
// explain it.
func slowest(feeders []control.Feeder) (control.Feeder, bool) {
	live := 0
	for _, f := range feeders {
		if !f.Retired() {
			live++
		}
	}
	f, ok := control.Holder(feeders)
	if !ok || live < 2 && !f.FinalizedUntil.IsZero() {
		return control.Feeder{}, false
	}
	return f, true
}
