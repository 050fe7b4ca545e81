package main

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/finalizer-dev/finalizer/control"
	"github.com/finalizer-dev/finalizer/finalizer"
)

// TestWhyNamesTheHoldingRunsReasons: the gating answers' why (is-final,
// wait, GET /v1/tables/{t}/final) said only "held by F: no verdict of its
// own yet (reporting)", which reads as healthy, while the service held
// every progress of F's run. It names each run of a holding feeder that
// the service holds or whose advances fail, with the service's own text
// (status's LAST ERROR), at most whyRuns of them and then how many more;
// not the runs of a feeder ahead of the holder, nor of a retired one; a
// solo run (no feeder row) is named; nothing is claimed without the runs.
func TestWhyNamesTheHoldingRunsReasons(t *testing.T) {
	at := statusAt
	const table = "load.t"
	noTime := `no_time: source 0: pointer "/commit_ts" finds nothing in endOffset`
	run := func(id, query, name, held string) finalizer.TrackerStatus {
		return finalizer.TrackerStatus{RunID: id, QueryID: query, QueryName: name, Table: table, LastEvent: at, Held: held}
	}

	// One feeder with no verdict of its own, its run held.
	f := control.Feeder{Table: table, Feeder: "q-n", QueryName: "load-notime-1"}
	runs := []finalizer.TrackerStatus{run("r-notime-0000", "q-n", "load-notime-1", noTime)}
	got := holdWhy(control.Verdict{Table: table}, []control.Feeder{f}, runs, nil)
	want := "held by load-notime-1: no verdict of its own yet (reporting); run r-notime (load-notime-1): held by " + noTime
	if got != want {
		t.Errorf("why:\n got %q\nwant %q", got, want)
	}
	// The same text as status's run line.
	if w := runWhy(runs[0]); !strings.HasSuffix(got, w) {
		t.Errorf("why %q does not end with status's %q", got, w)
	}
	// Runs not known: the feeder's line alone, as before.
	if got := holdWhy(control.Verdict{Table: table}, []control.Feeder{f}, nil, nil); got != "held by load-notime-1: no verdict of its own yet (unknown)" {
		t.Errorf("runs unknown: why %q", got)
	}

	// A verdict: the feeder at 12:00 holds it; the one ahead, whose newer
	// progress is held, and the retired one are not named. A failing
	// advance is named with its error.
	v := control.Verdict{Table: table, FinalizedUntil: at.Add(-2 * time.Hour)}
	low := control.Feeder{Table: table, Feeder: "q-low", QueryName: "low", FinalizedUntil: at.Add(-2 * time.Hour)}
	ahead := control.Feeder{Table: table, Feeder: "q-ahead", QueryName: "ahead", FinalizedUntil: at}
	gone := control.Feeder{Table: table, Feeder: "q-gone", QueryName: "gone", FinalizedUntil: at.Add(-3 * time.Hour), RetiredAt: at}
	failing := run("r-low", "q-low", "low", "")
	failing.LastError, failing.Failures = "advance: postgresql unavailable", 3
	runs = []finalizer.TrackerStatus{failing, run("r-ahead", "q-ahead", "ahead", "future: the time is ahead"), run("r-gone", "q-gone", "gone", noTime)}
	got = holdWhy(v, []control.Feeder{low, ahead, gone}, runs, nil)
	if !strings.HasPrefix(got, "held by low at ") || !strings.Contains(got, "run r-low (low): advance: postgresql unavailable") ||
		strings.Contains(got, "r-ahead") || strings.Contains(got, "r-gone") {
		t.Errorf("why with a verdict: %q", got)
	}

	// A solo run (no feeder row) held: named, with nothing else.
	if got := holdWhy(v, nil, []finalizer.TrackerStatus{run("r-solo", "q-solo", "", noTime)}, nil); got != "run r-solo (q-solo): held by "+noTime {
		t.Errorf("solo: why %q", got)
	}

	// Many feeders, none with a verdict, every run held: bounded.
	var fs []control.Feeder
	runs = nil
	for _, n := range []string{"a", "b", "c", "d", "e"} {
		fs = append(fs, control.Feeder{Table: table, Feeder: "q-" + n, QueryName: "load-" + n})
		runs = append(runs, run("r-"+n, "q-"+n, "load-"+n, noTime))
	}
	got = holdWhy(control.Verdict{Table: table}, fs, runs, nil)
	if strings.Count(got, "held by no_time") != whyRuns || !strings.HasSuffix(got, "; 2 more held run(s): finalizer status --table "+table) {
		t.Errorf("5 held runs: why %q", got)
	}

	// A long reason is cut; a control character in it escaped.
	long := run("r-long", "q-n", "load-notime-1", "no_time: "+strings.Repeat("x", 2*whyReasonLen)+"\x1b[2J")
	got = holdWhy(control.Verdict{Table: table}, []control.Feeder{f}, []finalizer.TrackerStatus{long}, nil)
	if len([]rune(got)) > 200+whyReasonLen || !strings.HasSuffix(got, "…") || strings.ContainsRune(got, '\x1b') {
		t.Errorf("long reason: %d runes: %q", len([]rune(got)), got)
	}
}

// TestIsFinalAndWaitSayWhy: through the commands, on a real control
// table with the service's runs served over HTTP: a row without a verdict
// (its solo run held), a table with no row (--allow-missing), and a
// verdict behind the period; wait notes why while it waits, once per
// change, and again at its time-out; the exit codes stay 1.
func TestIsFinalAndWaitSayWhy(t *testing.T) {
	url, s := controlDB(t)
	ctx := context.Background()
	execSQL(t, url, `INSERT INTO `+control.DefaultTable+` (table_name) VALUES ('load.null')`)
	advanceTo(t, s, "load.behind", "q-behind", "behind", "r-behind-0", statusAt)
	if _, err := s.JoinFeeder(ctx, "load.joined", "q-joined", "joined"); err != nil {
		t.Fatal(err)
	}
	noTime := `no_time: source 0: pointer "/commit_ts" finds nothing in endOffset`
	srv := runsServer(t, []finalizer.TrackerStatus{
		{RunID: "r-null-00", QueryID: "q-null", QueryName: "null", Table: "load.null", LastEvent: statusAt, Held: noTime},
		{RunID: "r-behind-1", QueryID: "q-behind", QueryName: "behind", Table: "load.behind", LastEvent: statusAt, Held: "future: an hour ahead"},
		{RunID: "r-joined-0", QueryID: "q-joined", QueryName: "joined", Table: "load.joined", LastEvent: statusAt, Held: noTime},
		{RunID: "r-nowhere", QueryID: "q-nowhere", QueryName: "nowhere", Table: "load.norow", LastEvent: statusAt, Held: noTime},
	})
	end := statusAt.Add(time.Hour).Format(time.RFC3339)
	flags := []string{"--postgres-url", url, "--http-url", srv.URL}
	for _, c := range []struct {
		table string
		extra []string
		line  string
	}{
		{"load.null", nil, "load.null: no verdict yet (run r-null-0 (null): held by " + noTime + "); period ending"},
		{"load.norow", nil, "load.norow: no verdict yet (run r-nowher (nowhere): held by " + noTime + "); period ending"},
		{"load.norow", []string{"--allow-missing"}, "load.norow: no verdict yet (run r-nowher (nowhere): held by " + noTime + "); period ending"},
		{"load.behind", nil, "is not final (final until 2026-09-28T14:30:00Z; run r-behind (behind): held by future: an hour ahead)"},
		{"load.joined", nil, "no verdict yet (held by joined: no verdict of its own yet (reporting); run r-joined (joined): held by " + noTime + ")"},
	} {
		code, out, errOut := runCLI(t, append(append([]string{"is-final", "--table", c.table, "--period-end", end}, flags...), c.extra...)...)
		if code != exitNegative || !strings.Contains(out, c.line) {
			t.Errorf("is-final %s %v: exit %d, stdout %q, stderr %q; want 1 with %q", c.table, c.extra, code, out, errOut, c.line)
		}
	}
	code, _, errOut := runCLI(t, append([]string{"wait", "--table", "load.joined", "--until", end, "--timeout", "2500ms"}, flags...)...)
	note := "finalizer: still waiting for load.joined to reach " + end + ": held by joined: no verdict of its own yet (reporting); run r-joined (joined): held by " + noTime + "\n"
	if code != exitNegative || strings.Count(errOut, note) != 1 || !strings.Contains(errOut, "within 2.5s (held by joined") {
		t.Errorf("wait: exit %d, stderr %q; want 1, one note and the reason at the time-out", code, errOut)
	}
	// A table final at once: no note, no question.
	code, _, errOut = runCLI(t, append([]string{"wait", "--table", "load.behind", "--until", statusAt.Format(time.RFC3339), "--timeout", "2s"}, flags...)...)
	if code != exitOK || errOut != "" {
		t.Errorf("wait on a final table: exit %d, stderr %q", code, errOut)
	}
}
