package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
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

// TestWhyCapsNames: the names the why says were whole: five runs of
// queries named "L%d" and a thousand control characters (each escaped to
// six) made a 24 KB is-final line. Each name is escaped, then cut to
// whyNameLen runes with an ellipsis, as the reasons are to whyReasonLen.
func TestWhyCapsNames(t *testing.T) {
	const table = "load.names"
	var fs []control.Feeder
	var runs []finalizer.TrackerStatus
	for i := range 5 {
		name := fmt.Sprintf("L%d", i) + strings.Repeat("\x01", 1000)
		q := fmt.Sprintf("q-%d", i)
		fs = append(fs, control.Feeder{Table: table, Feeder: q, QueryName: name})
		runs = append(runs, finalizer.TrackerStatus{RunID: fmt.Sprintf("r-%d", i), QueryID: q, QueryName: name, Table: table,
			LastEvent: statusAt, Held: "no_time: " + strings.Repeat("\x01", 1000)})
	}
	got := holdWhy(control.Verdict{Table: table}, fs, runs, nil)
	// The holder, whyRuns runs (each name and reason capped), how many more.
	max := (whyRuns+1)*(whyNameLen+40) + whyRuns*(whyReasonLen+40) + 100
	if len(got) > max || strings.ContainsRune(got, '\x01') || !strings.Contains(got, "held by L0"+strings.Repeat(`\u0001`, 16)+`\u…`) ||
		!strings.Contains(got, "; 2 more held run(s)") {
		t.Errorf("why of 5 long names: %d bytes (at most %d): %.600q", len(got), max, got)
	}
	// A short name is left as it is.
	if w := whyName("orders-v1"); w != "orders-v1" {
		t.Errorf("whyName(orders-v1) = %q", w)
	}
}

// TestWhySaysTheServiceDidNotAnswer: with the service unreachable the why
// said "(held by orders-v1: no verdict of its own yet (unknown))", with no
// hint that the runs' reasons are missing because the service did not
// answer. It says so now, with the error's kind and the URL redacted; a
// service that answers an error status is said as such; an --http-url no
// request can be made to is a usage error (2).
func TestWhySaysTheServiceDidNotAnswer(t *testing.T) {
	url, s := controlDB(t)
	if _, err := s.JoinFeeder(context.Background(), "load.orders", "q-orders", "orders-v1"); err != nil {
		t.Fatal(err)
	}
	end := statusAt.Add(time.Hour).Format(time.RFC3339)
	isFinal := func(httpURL string) (int, string, string) {
		return runCLI(t, "is-final", "--table", "load.orders", "--period-end", end, "--postgres-url", url, "--http-url", httpURL)
	}
	code, out, errOut := isFinal("http://u:Hunter2Secret@127.0.0.1:1")
	want := "(held by orders-v1: no verdict of its own yet (unknown); the runs' reasons are not known: the service at http://u:xxxxx@127.0.0.1:1 did not answer (connection refused))"
	if code != exitNegative || !strings.Contains(out, want) || strings.Contains(out+errOut, "Hunter2Secret") {
		t.Errorf("is-final, service unreachable: exit %d, stdout %q, stderr %q; want 1 with %q", code, out, errOut, want)
	}
	denied := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		http.Error(w, "no", http.StatusUnauthorized)
	}))
	defer denied.Close()
	code, out, _ = isFinal(denied.URL)
	if want := "the runs' reasons are not known: the service at " + denied.URL + " answered 401 Unauthorized)"; code != exitNegative || !strings.Contains(out, want) {
		t.Errorf("is-final, service answers 401: exit %d, stdout %q; want 1 with %q", code, out, want)
	}
	for _, bad := range []string{"not a url", "127.0.0.1:8080", "ftp://127.0.0.1:1"} {
		code, out, errOut = isFinal(bad)
		if code != 2 || out != "" || !strings.Contains(errOut, "is not an http:// or https:// URL") {
			t.Errorf("is-final --http-url %q: exit %d, stdout %q, stderr %q; want a usage error (2)", bad, code, out, errOut)
		}
	}
	// wait notes it while it waits, and says it at its time-out.
	code, _, errOut = runCLI(t, "wait", "--table", "load.orders", "--until", end, "--timeout", "1500ms", "--postgres-url", url, "--http-url", "http://127.0.0.1:1")
	unknown := "held by orders-v1: no verdict of its own yet (unknown); the runs' reasons are not known: the service at http://127.0.0.1:1 did not answer (connection refused)"
	if code != exitNegative || strings.Count(errOut, "finalizer: still waiting for load.orders to reach "+end+": "+unknown+"\n") != 1 ||
		!strings.Contains(errOut, "within 1.5s ("+unknown+")") {
		t.Errorf("wait, service unreachable: exit %d, stderr %q; want 1, noted once and at the time-out", code, errOut)
	}
	code, _, errOut = runCLI(t, "wait", "--table", "load.orders", "--until", end, "--timeout", "1s", "--postgres-url", url, "--http-url", "not a url")
	if code != 2 || !strings.Contains(errOut, "is not an http:// or https:// URL") {
		t.Errorf("wait --http-url 'not a url': exit %d, stderr %q; want a usage error (2)", code, errOut)
	}
}

// TestWaitNotesAnOutage: wait, its PostgreSQL gone 3 s in, said nothing on
// stderr during the outage and ended with "not final ... within 20s" alone:
// no holder, no run's reason, nothing of PostgreSQL. Its PostgreSQL here is
// reached through a proxy the test cuts (every connection closed, the port
// refused), brings back, and cuts again: wait notes the outage once (again
// when its kind changes), notes the return, and its time-out line keeps
// the reason known before the outage and says that PostgreSQL did not
// answer at the end.
func TestWaitNotesAnOutage(t *testing.T) {
	url, s := controlDB(t)
	const table = "load.outage"
	advanceTo(t, s, table, "q-out", "outage", "r-out-0", statusAt)
	srv := runsServer(t, []finalizer.TrackerStatus{
		{RunID: "r-out-1", QueryID: "q-out", QueryName: "outage", Table: table, LastEvent: statusAt, Held: "future: an hour ahead"},
	})
	p := newPGProxy(t, url)
	end := statusAt.Add(time.Hour).Format(time.RFC3339)
	type result struct {
		code        int
		out, errOut string
	}
	done := make(chan result, 1)
	go func() {
		code, out, errOut := runCLI(t, "wait", "--table", table, "--until", end, "--timeout", "11s", "--postgres-url", p.url, "--http-url", srv.URL)
		done <- result{code, out, errOut}
	}()
	time.Sleep(2500 * time.Millisecond) // the first note, at 1 s
	p.cut(t)
	time.Sleep(3 * time.Second) // at least one look while it is gone
	p.listen(t)
	time.Sleep(2500 * time.Millisecond) // at least one look once it is back
	p.cut(t)
	var r result
	select {
	case r = <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("wait did not end")
	}
	held := "run r-out-1 (outage): held by future: an hour ahead"
	note := "finalizer: still waiting for " + table + " to reach " + end + ": "
	if r.code != exitNegative || strings.Count(r.errOut, note+held+"\n") != 1 ||
		!strings.Contains(r.errOut, note+"PostgreSQL does not answer (") ||
		strings.Count(r.errOut, note+"PostgreSQL answers again\n") != 1 ||
		!strings.Contains(r.errOut, "within 11s ("+held+"; PostgreSQL did not answer at the end (connection refused))") {
		t.Errorf("wait through outages: exit %d, stdout %q, stderr:\n%s\nwant 1, the held note once, the outage and the return noted, the reason and the outage at the time-out", r.code, r.out, r.errOut)
	}
	t.Logf("stderr:\n%s", r.errOut)
}

// pgProxy forwards TCP connections to a test database: cut closes its
// listener and every connection (the port then refuses), listen opens the
// same port again.
type pgProxy struct {
	url, addr, target string
	mu                sync.Mutex
	ln                net.Listener
	conns             []net.Conn
	wg                sync.WaitGroup
}

func newPGProxy(t *testing.T, dbURL string) *pgProxy {
	t.Helper()
	u, err := url.Parse(dbURL)
	if err != nil || u.Host == "" {
		t.Skipf("the test database's URL %q has no TCP host", dbURL)
	}
	p := &pgProxy{target: u.Host}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p.addr = ln.Addr().String()
	u.Host = p.addr
	p.url = u.String()
	p.serve(ln)
	t.Cleanup(func() { p.cut(t); p.wg.Wait() })
	return p
}

func (p *pgProxy) listen(t *testing.T) {
	t.Helper()
	ln, err := net.Listen("tcp", p.addr)
	if err != nil {
		t.Fatal(err)
	}
	p.serve(ln)
}

func (p *pgProxy) serve(ln net.Listener) {
	p.mu.Lock()
	p.ln = ln
	p.mu.Unlock()
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			d, err := net.Dial("tcp", p.target)
			if err != nil {
				c.Close()
				continue
			}
			p.mu.Lock()
			p.conns = append(p.conns, c, d)
			p.mu.Unlock()
			p.wg.Add(2)
			go func() { defer p.wg.Done(); _, _ = io.Copy(d, c); d.Close() }()
			go func() { defer p.wg.Done(); _, _ = io.Copy(c, d); c.Close() }()
		}
	}()
}

func (p *pgProxy) cut(t *testing.T) {
	t.Helper()
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.ln != nil {
		p.ln.Close()
		p.ln = nil
	}
	for _, c := range p.conns {
		c.Close()
	}
	p.conns = nil
}
