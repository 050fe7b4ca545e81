package statuspage

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/finalizer-dev/finalizer/control"
	"github.com/finalizer-dev/finalizer/finalizer"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// fakeSource is the verdicts and the runs, set by the test.
type fakeSource struct {
	mu       sync.Mutex
	verdicts []control.Verdict
	runs     []finalizer.TrackerStatus
	feeders  []control.Feeder
	waits    []finalizer.JoinWait
	err      error
	watch    func(control.Notification)
	lists    int           // calls of List
	delay    time.Duration // each List takes this long
	statuses int           // calls of Status
}

// calls returns the counts of List and Status calls.
func (f *fakeSource) calls() (lists, statuses int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.lists, f.statuses
}

// announce sends n as the LISTEN connection would.
func (f *fakeSource) announce(n control.Notification) {
	f.mu.Lock()
	fn := f.watch
	f.mu.Unlock()
	fn(n)
}

func (f *fakeSource) List(context.Context) ([]control.Verdict, error) {
	f.mu.Lock()
	d := f.delay
	f.mu.Unlock()
	time.Sleep(d)
	f.mu.Lock()
	defer f.mu.Unlock()
	f.lists++
	return append([]control.Verdict(nil), f.verdicts...), f.err
}

func (f *fakeSource) Feeders(context.Context, string) ([]control.Feeder, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]control.Feeder(nil), f.feeders...), f.err
}

func (f *fakeSource) Watch(fn func(control.Notification)) (func(), error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.watch = fn
	return func() {
		f.mu.Lock()
		f.watch = nil
		f.mu.Unlock()
	}, nil
}

func (f *fakeSource) Status() []finalizer.TrackerStatus {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.statuses++
	return append([]finalizer.TrackerStatus(nil), f.runs...)
}

func (f *fakeSource) JoinWaitsByTable() map[string][]finalizer.JoinWait {
	f.mu.Lock()
	defer f.mu.Unlock()
	var by map[string][]finalizer.JoinWait
	for _, w := range f.waits {
		if by == nil {
			by = map[string][]finalizer.JoinWait{}
		}
		by[w.Table] = append(by[w.Table], w)
	}
	return by
}

// move sets a table's verdict and announces it, as the control table's
// NOTIFY would.
func (f *fakeSource) move(table string, until time.Time) {
	f.mu.Lock()
	found := false
	for i := range f.verdicts {
		if f.verdicts[i].Table == table {
			f.verdicts[i].FinalizedUntil, f.verdicts[i].UpdatedAt = until, time.Now().UTC()
			found = true
		}
	}
	if !found {
		f.verdicts = append(f.verdicts, control.Verdict{Table: table, FinalizedUntil: until, UpdatedAt: time.Now().UTC(), RunID: runA, BatchID: 7})
	}
	fn := f.watch
	f.mu.Unlock()
	fn(control.Notification{Table: table, FinalizedUntil: until})
}

const (
	runA   = "e225d92f-2545-48f8-87a2-9c0309580f8a"
	runB   = "0f5b2b7c-6f0e-4d8e-9d42-3c1f2a7b9e11"
	queryA = "8d268dc2-bc9c-4be8-97a9-b135d2943028"
)

func utc(s string) time.Time {
	t, err := time.Parse(time.RFC3339, s)
	if err != nil {
		panic(err)
	}
	return t
}

func newPage(t testing.TB, src *fakeSource, o Options) (*Page, *httptest.Server) {
	t.Helper()
	o.Verdicts, o.Runs = src, src
	if o.RunsEvery == 0 {
		o.RunsEvery = 20 * time.Millisecond
	}
	if o.MinRefresh == 0 {
		o.MinRefresh = 5 * time.Millisecond
	}
	p, err := New(o)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewUnstartedServer(p.Handler())
	srv.Config.RegisterOnShutdown(p.CloseStreams)
	srv.Start()
	t.Cleanup(func() {
		p.CloseStreams()
		srv.Close()
		p.Close()
	})
	return p, srv
}

func get(t testing.TB, url string) (int, http.Header, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header, string(b)
}

func TestPageShowsTablesRunsAndWhatHoldsThemBack(t *testing.T) {
	now := time.Now().UTC()
	src := &fakeSource{
		verdicts: []control.Verdict{
			{Table: "bronze.orders", FinalizedUntil: now.Add(-90*time.Minute - 10*time.Second), UpdatedAt: now.Add(-time.Minute), RunID: runA, BatchID: 2},
			{Table: "bronze.<script>alert(1)</script>", FinalizedUntil: now.Add(-3 * time.Hour), UpdatedAt: now.Add(-time.Hour)},
			{Table: "silver.idle", FinalizedUntil: now.Add(-2 * time.Hour), UpdatedAt: now.Add(-time.Hour)},
		},
		runs: []finalizer.TrackerStatus{
			{RunID: runA, QueryID: queryA, Table: "bronze.orders", LastEvent: now, Failures: 3, LastError: "advance bronze.orders: postgresql unavailable"},
			{RunID: runB, QueryID: queryA, Table: "silver.idle", LastEvent: now.Add(-20 * time.Minute), Stale: true},
		},
	}
	_, srv := newPage(t, src, Options{})
	code, h, body := get(t, srv.URL+"/")
	if code != http.StatusOK || !strings.HasPrefix(h.Get("Content-Type"), "text/html") {
		t.Fatalf("GET / = %d %s", code, h.Get("Content-Type"))
	}
	if csp := h.Get("Content-Security-Policy"); !strings.Contains(csp, "default-src 'none'") {
		t.Errorf("no strict Content-Security-Policy: %q", csp)
	}
	for _, want := range []string{
		`<th scope="row" class="name">bronze.orders</th>`,
		`<span class="badge st-failing">failing</span>`,
		"run e225d92f is failing (3 in a row): advance bronze.orders: postgresql unavailable",
		"run 0f5b2b7c is stale: no event since",
		`<span class="badge st-stale">stale</span>`,
		"no tracked run: nothing moves it",
		`<span class="badge st-untracked">untracked</span>`,
		"bronze.&lt;script&gt;alert(1)&lt;/script&gt;",
		`<th scope="col">What holds it back</th>`,
		"1h30m", // the lag as a number
	} {
		if !strings.Contains(body, want) {
			t.Errorf("page lacks %q", want)
		}
	}
	if strings.Contains(body, "<script>alert") {
		t.Error("a table name reached the page unescaped")
	}
	for _, asset := range []string{"/status/assets/page.js", "/status/assets/page.css"} {
		if code, _, b := get(t, srv.URL+asset); code != http.StatusOK || len(b) < 100 {
			t.Errorf("GET %s = %d (%d bytes)", asset, code, len(b))
		}
	}
	if code, _, _ := get(t, srv.URL+"/nope"); code != http.StatusNotFound {
		t.Errorf("GET /nope = %d, want 404", code)
	}
}

// A table waiting for a new feeder's join that did not succeed does not
// move (its trackers hold their advances): the page says so, with the
// query, the run and the error, instead of a running run that does not
// move it.
func TestPageShowsATableWaitingForAJoin(t *testing.T) {
	now := time.Now().UTC()
	src := &fakeSource{
		verdicts: []control.Verdict{{Table: "silver.all", FinalizedUntil: now.Add(-2 * time.Hour), UpdatedAt: now.Add(-time.Hour)}},
		runs:     []finalizer.TrackerStatus{{RunID: runA, QueryID: queryA, Table: "silver.all", LastEvent: now}},
		waits: []finalizer.JoinWait{{Table: "silver.all", QueryID: "0b0b0b0b-bc9c-4be8-97a9-b135d2943028", QueryName: "region-eu",
			RunID: runB, Since: now.Add(-5 * time.Minute), LastError: "the table is locked by another session"}},
	}
	_, srv := newPage(t, src, Options{})
	_, _, body := get(t, srv.URL+"/")
	for _, want := range []string{
		`<span class="badge st-held">held</span>`,
		"held until query region-eu (run 0f5b2b7c) joins its feeders (waiting since",
		"retried: the table is locked by another session",
	} {
		if !strings.Contains(body, want) {
			t.Errorf("page lacks %q", want)
		}
	}
}

// A table held by a new feeder's join before its first verdict has no row
// in the control table: the page listed only the verdicts, and left it
// out. It is shown held, with the join it waits for.
func TestPageShowsATableHeldByAJoinBeforeItsFirstVerdict(t *testing.T) {
	now := time.Now().UTC()
	src := &fakeSource{
		verdicts: []control.Verdict{{Table: "silver.all", FinalizedUntil: now.Add(-2 * time.Hour), UpdatedAt: now.Add(-time.Hour)}},
		waits: []finalizer.JoinWait{{Table: "silver.new", QueryID: "0b0b0b0b-bc9c-4be8-97a9-b135d2943028", QueryName: "region-eu",
			RunID: runB, Since: now.Add(-5 * time.Minute), LastError: "the table is locked by another session"}},
	}
	_, srv := newPage(t, src, Options{})
	_, _, body := get(t, srv.URL+"/")
	for _, want := range []string{"silver.all", "silver.new", "held until query region-eu (run 0f5b2b7c) joins its feeders"} {
		if !strings.Contains(body, want) {
			t.Errorf("page lacks %q", want)
		}
	}
}

// event is one server-sent event.
type event struct {
	id   string
	data update
}

// events reads a stream's events into a channel, until the stream ends.
func events(t *testing.T, url, lastID string) (<-chan event, func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if lastID != "" {
		req.Header.Set("Last-Event-ID", lastID)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != "text/event-stream" {
		cancel()
		t.Fatalf("GET %s = %d %s", url, resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	ch := make(chan event, 100)
	done := make(chan struct{})
	go func() {
		defer close(done)
		defer close(ch)
		defer resp.Body.Close()
		sc := bufio.NewScanner(resp.Body)
		sc.Buffer(nil, 1<<24)
		var e event
		for sc.Scan() {
			line := sc.Text()
			switch {
			case strings.HasPrefix(line, "id: "):
				e.id = line[4:]
			case strings.HasPrefix(line, "data: "):
				if err := json.Unmarshal([]byte(line[6:]), &e.data); err != nil {
					t.Errorf("event data: %v", err)
				}
			case line == "" && e.id != "":
				ch <- e
				e = event{}
			}
		}
	}()
	return ch, func() { cancel(); <-done }
}

func next(t *testing.T, ch <-chan event, what string, ok func(update) bool) event {
	t.Helper()
	deadline := time.After(10 * time.Second)
	for {
		select {
		case e, open := <-ch:
			if !open {
				t.Fatalf("stream ended waiting for %s", what)
			}
			if ok(e.data) {
				return e
			}
		case <-deadline:
			t.Fatalf("no event with %s", what)
		}
	}
}

func rowsContain(p *part, s string) bool {
	if p == nil {
		return false
	}
	for _, r := range p.Rows {
		if strings.Contains(r, s) {
			return true
		}
	}
	return false
}

// A move announced by NOTIFY reaches a watching browser as the table's new
// row; a new run as a new run row; a reconnect with Last-Event-ID gets only
// what changed since, and an unknown id everything.
func TestStreamSendsWhatChanged(t *testing.T) {
	src := &fakeSource{}
	_, srv := newPage(t, src, Options{})
	ch, stop := events(t, srv.URL+"/status/events", "")
	defer stop()
	first := next(t, ch, "the first event", func(u update) bool { return true })
	if first.data.Tables == nil || len(first.data.Tables.Rows) != 0 || first.data.Tables.Order == nil && len(first.data.Tables.Rows) != 0 {
		t.Fatalf("first event on an empty page: %+v", first.data.Tables)
	}

	src.move("bronze.orders", utc("2026-09-28T13:00:00Z"))
	e := next(t, ch, "the new table", func(u update) bool { return rowsContain(u.Tables, "2026-09-28 13:00:00Z") })
	if e.data.Tables.Order == nil || e.data.Tables.Order[0] != "bronze.orders" {
		t.Errorf("a new table comes with the order: %+v", e.data.Tables.Order)
	}
	src.move("bronze.orders", utc("2026-09-28T14:00:00Z"))
	e = next(t, ch, "the move", func(u update) bool { return rowsContain(u.Tables, "2026-09-28 14:00:00Z") })
	if e.data.Tables.Order != nil {
		t.Errorf("a move of a known table resends the order: %+v", e.data.Tables.Order)
	}
	if !rowsContain(e.data.Tables, `data-moves="`) || strings.Count(e.data.Tables.Rows[0], ":") < 2 {
		t.Errorf("the row carries no timeline: %s", e.data.Tables.Rows[0])
	}
	lastID := e.id

	src.mu.Lock()
	src.runs = []finalizer.TrackerStatus{{RunID: runB, QueryID: queryA, Table: "silver.other", LastEvent: time.Now()}}
	src.mu.Unlock()
	next(t, ch, "the new run", func(u update) bool { return rowsContain(u.Runs, "0f5b2b7c") })
	stop()

	// Reconnecting from lastID brings the run, not the unchanged table.
	ch2, stop2 := events(t, srv.URL+"/status/events", lastID)
	defer stop2()
	e = next(t, ch2, "the catch-up", func(update) bool { return true })
	if !rowsContain(e.data.Runs, "0f5b2b7c") || len(e.data.Tables.Rows) != 0 || len(e.data.Tables.Order) != 1 {
		t.Errorf("catch-up from %s: tables %+v, runs %+v", lastID, e.data.Tables, e.data.Runs)
	}
	stop2()

	// An id from another start of the service: everything.
	ch3, stop3 := events(t, srv.URL+"/status/events", "ffff-1")
	defer stop3()
	e = next(t, ch3, "the full catch-up", func(update) bool { return true })
	if !rowsContain(e.data.Tables, "bronze.orders") || !rowsContain(e.data.Runs, "0f5b2b7c") {
		t.Errorf("full catch-up: tables %+v, runs %+v", e.data.Tables, e.data.Runs)
	}
}

// A failed read of the verdicts keeps the last ones and says so; the next
// successful read clears it.
func TestUnreadableVerdictsAreSaid(t *testing.T) {
	src := &fakeSource{verdicts: []control.Verdict{{Table: "t", FinalizedUntil: utc("2026-09-28T13:00:00Z")}}}
	_, srv := newPage(t, src, Options{})
	ch, stop := events(t, srv.URL+"/status/events", "")
	defer stop()
	next(t, ch, "the first event", func(update) bool { return true })
	src.mu.Lock()
	src.err = fmt.Errorf("list: %w", control.ErrUnavailable)
	src.mu.Unlock()
	src.watch(control.Notification{})
	next(t, ch, "the banner", func(u update) bool { return strings.Contains(u.Banner, "postgresql unavailable") })
	if _, _, body := get(t, srv.URL+"/"); !strings.Contains(body, "could not be read") || !strings.Contains(body, `data-key="t"`) {
		t.Error("the page lost the last verdicts or the banner")
	}
	src.mu.Lock()
	src.err = nil
	src.mu.Unlock()
	next(t, ch, "the banner gone", func(u update) bool { return u.Banner == "" })
}

// A browser that does not read its stream is dropped; the others keep
// getting every update.
func TestSlowStreamIsDroppedOthersKeepUp(t *testing.T) {
	src := &fakeSource{}
	p, srv := newPage(t, src, Options{})
	ch, stop := events(t, srv.URL+"/status/events", "")
	defer stop()
	next(t, ch, "the first event", func(update) bool { return true })
	// A stream registered directly, never read: its buffer fills.
	slow, _ := p.subscribe("")
	for i := range streamBuffer + 5 {
		src.move("t", utc("2026-09-28T00:00:00Z").Add(time.Duration(i+1)*time.Hour))
		want := fmt.Sprintf("2026-09-28 %02d:00:00Z", i+1)
		next(t, ch, want, func(u update) bool { return rowsContain(u.Tables, want) })
	}
	select {
	case <-slow.gone:
	default:
		t.Fatal("the slow stream was not dropped")
	}
}

func TestTooManyStreams(t *testing.T) {
	src := &fakeSource{}
	_, srv := newPage(t, src, Options{MaxStreams: 1})
	_, stop := events(t, srv.URL+"/status/events", "")
	defer stop()
	if code, _, _ := get(t, srv.URL+"/status/events"); code != http.StatusServiceUnavailable {
		t.Fatalf("second stream: %d, want 503", code)
	}
}

// Shutting the HTTP server down ends the streams (they never go idle).
func TestShutdownEndsStreams(t *testing.T) {
	src := &fakeSource{}
	p, err := New(Options{Verdicts: src, Runs: src})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	srv := httptest.NewUnstartedServer(p.Handler())
	srv.Config.RegisterOnShutdown(p.CloseStreams)
	srv.Start()
	ch, stop := events(t, srv.URL+"/status/events", "")
	defer stop()
	next(t, ch, "the first event", func(update) bool { return true })
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := srv.Config.Shutdown(ctx); err != nil {
		t.Fatalf("shutdown with a stream open: %v", err)
	}
	srv.Close()
}

// TestLongNameWraps: a table name of hundreds of characters with no space
// (seen: a 300-character query name under a bronze.{name} rule) wraps in
// its cell instead of pushing every other column off the page and
// stretching every row of the runs table. The name cells carry the class
// the stylesheet bounds and wraps anywhere.
func TestLongNameWraps(t *testing.T) {
	now := time.Now().UTC()
	long := "bronze.cdc_" + strings.Repeat("L", 300)
	src := &fakeSource{
		verdicts: []control.Verdict{{Table: long, FinalizedUntil: now.Add(-time.Hour), UpdatedAt: now}},
		runs:     []finalizer.TrackerStatus{{RunID: runA, QueryID: queryA, Table: long, LastEvent: now}},
	}
	_, srv := newPage(t, src, Options{})
	_, _, body := get(t, srv.URL+"/")
	for _, want := range []string{
		`<th scope="row" class="name">` + long + `</th>`,
		`<td class="name">` + long + `</td>`,
	} {
		if !strings.Contains(body, want) {
			t.Errorf("page lacks the bounded name cell %q", want[:40])
		}
	}
	_, _, css := get(t, srv.URL+"/status/assets/page.css")
	if !regexp.MustCompile(`tbody \.name \{[^}]*overflow-wrap: anywhere;[^}]*max-width:`).MatchString(css) {
		t.Error("page.css does not wrap and bound name cells")
	}
}

// settle gives the page's loop time to act on what it was sent.
func settle(o Options) { time.Sleep(10 * max(o.RunsEvery, o.MinRefresh, 20*time.Millisecond)) }

// Nobody watching: announcements are recorded in the timeline, nothing is
// read and nothing rebuilt, however many there are; a reconnect's "moves
// may be lost" costs one read of the verdicts, at most every
// ReconcileEvery.
func TestUnwatchedPageReadsNothing(t *testing.T) {
	src := &fakeSource{runs: []finalizer.TrackerStatus{{RunID: runA, QueryID: queryA, Table: "t0", LastEvent: time.Now()}}}
	o := Options{RunsEvery: 10 * time.Millisecond, MinRefresh: time.Millisecond, TablesEvery: 20 * time.Millisecond}
	_, srv := newPage(t, src, o)
	for i := range 2000 {
		src.move(fmt.Sprintf("t%d", i%50), utc("2026-09-28T00:00:00Z").Add(time.Duration(i)*time.Minute))
	}
	settle(o)
	if lists, statuses := src.calls(); lists != 0 || statuses != 0 {
		t.Fatalf("unwatched: %d reads of the verdicts, %d of the runs; want none", lists, statuses)
	}
	src.announce(control.Notification{Reconnected: true})
	settle(o)
	if lists, statuses := src.calls(); lists != 1 || statuses != 0 {
		t.Fatalf("after a reconnect: %d reads of the verdicts, %d of the runs; want 1, 0", lists, statuses)
	}
	src.announce(control.Notification{Reconnected: true})
	settle(o)
	if lists, _ := src.calls(); lists != 1 {
		t.Fatalf("a second reconnect within ReconcileEvery read the verdicts again (%d reads)", lists)
	}
	// The first viewer sees every table and the moves made meanwhile.
	_, _, body := get(t, srv.URL+"/")
	if !strings.Contains(body, `data-key="t49"`) || !strings.Contains(body, "2026-09-29 09:19:00Z") {
		t.Error("the first request lacks the tables or the last move")
	}
	if m := regexp.MustCompile(`data-key="t7" data-until="\d+" data-moves="([^"]*)"`).FindStringSubmatch(body); m == nil || strings.Count(m[1], ",") < 30 {
		t.Errorf("the timeline of t7 lost the moves made while nobody watched: %v", m)
	}
}

// The first request after nobody watched reads the verdicts and the runs
// as they are now; requests within RunsEvery of it are served the same
// model; an announced move is read by the next request after that.
func TestFirstRequestSeesFreshData(t *testing.T) {
	src := &fakeSource{}
	o := Options{RunsEvery: time.Second, MinRefresh: time.Millisecond}
	_, srv := newPage(t, src, o)
	time.Sleep(50 * time.Millisecond)
	src.mu.Lock()
	src.verdicts = []control.Verdict{{Table: "bronze.orders", FinalizedUntil: utc("2026-09-28T13:00:00Z"), UpdatedAt: time.Now()}}
	src.runs = []finalizer.TrackerStatus{{RunID: runA, QueryID: queryA, Table: "bronze.orders", LastEvent: time.Now()}}
	src.mu.Unlock()
	began := time.Now() // the model is built after it, by the first request
	_, _, body := get(t, srv.URL+"/")
	if !strings.Contains(body, "2026-09-28 13:00:00Z") || !strings.Contains(body, "e225d92f") {
		t.Fatal("the first request did not see the verdicts and runs as they are")
	}
	lists, statuses := src.calls()
	if lists != 1 || statuses != 1 {
		t.Fatalf("first request: %d reads of the verdicts, %d of the runs; want 1, 1", lists, statuses)
	}
	// Requests within RunsEvery of the build: a request answered before
	// began+RunsEvery was served within it. With a RunsEvery of 300 ms,
	// 20 requests took longer than that under the race detector on a
	// loaded machine (4 runs of 8), and a request after RunsEvery rightly
	// rebuilds the model: they are made in the first half of a second's
	// RunsEvery, and checked when the last was answered within it.
	n := 0
	for ; n < 20 && time.Since(began) < o.RunsEvery/2; n++ {
		get(t, srv.URL+"/")
	}
	if time.Since(began) < o.RunsEvery {
		if l, s := src.calls(); l != lists || s != statuses {
			t.Fatalf("%d requests within RunsEvery rebuilt the model: %d, %d reads", n, l-lists, s-statuses)
		}
	} else {
		t.Logf("the last of %d requests was answered %v after the first began, past RunsEvery: their reads not checked", n, time.Since(began))
		lists, statuses = src.calls()
	}
	src.move("bronze.orders", utc("2026-09-28T14:00:00Z"))
	time.Sleep(o.RunsEvery)
	if _, _, body := get(t, srv.URL+"/"); !strings.Contains(body, "2026-09-28 14:00:00Z") {
		t.Fatal("a move announced while nobody watched is not on the next page")
	}
	if l, s := src.calls(); l != lists+1 || s != statuses+1 {
		t.Fatalf("the request after RunsEvery: %d, %d reads; want 1, 1", l-lists, s-statuses)
	}
	// Not read again without an announcement, until TablesEvery.
	time.Sleep(o.RunsEvery)
	get(t, srv.URL+"/")
	if l, s := src.calls(); l != lists+1 || s != statuses+2 {
		t.Fatalf("a request with nothing announced: %d, %d reads; want the runs alone", l-lists-1, s-statuses-1)
	}
}

// A stream's viewer keeps the page live (the runs every RunsEvery, a flood
// of announcements debounced to a read every MinRefresh at most); once it
// leaves, the page goes quiet.
func TestStreamKeepsPageLiveThenQuiet(t *testing.T) {
	src := &fakeSource{}
	o := Options{RunsEvery: 20 * time.Millisecond, MinRefresh: 50 * time.Millisecond}
	p, srv := newPage(t, src, o)
	ch, stop := events(t, srv.URL+"/status/events", "")
	next(t, ch, "the first event", func(update) bool { return true })
	src.mu.Lock()
	src.runs = []finalizer.TrackerStatus{{RunID: runB, QueryID: queryA, Table: "silver.other", LastEvent: time.Now()}}
	src.mu.Unlock()
	next(t, ch, "the new run, unannounced", func(u update) bool { return rowsContain(u.Runs, "0f5b2b7c") })

	l0, _ := src.calls()
	start := time.Now()
	for i := range 5000 {
		src.move("t", utc("2026-09-28T00:00:00Z").Add(time.Duration(i+1)*time.Minute))
	}
	next(t, ch, "the flood's last move", func(u update) bool { return rowsContain(u.Tables, "2026-10-01 11:20:00Z") })
	l1, _ := src.calls()
	if bound := int(time.Since(start)/o.MinRefresh) + 2; l1-l0 > bound {
		t.Errorf("a flood of 5000 announcements cost %d reads of the verdicts in %v (MinRefresh %v)", l1-l0, time.Since(start), o.MinRefresh)
	}
	stop()
	// The stream is dropped once the server has seen the client go (its
	// request's context ends), which a loaded machine may take longer
	// for than any fixed sleep; then the loop's iteration begun while it
	// was watched ends.
	for deadline := time.Now().Add(10 * time.Second); p.watched(); time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the page still has the stream 10 s after its viewer left")
		}
	}
	time.Sleep(5 * o.RunsEvery)
	l2, s2 := src.calls()
	src.move("t", utc("2026-10-02T00:00:00Z"))
	settle(o)
	if l3, s3 := src.calls(); l3 != l2 || s3 != s2 {
		t.Fatalf("after the viewer left: %d reads of the verdicts, %d of the runs; want none", l3-l2, s3-s2)
	}
}

// Watched, the page spends at most about a tenth of its time refreshing:
// with reads that take 20 ms, a flood of announcements for a second costs
// a read every 200 ms, not every MinRefresh.
func TestWatchedPageBoundsItsShare(t *testing.T) {
	src := &fakeSource{delay: 20 * time.Millisecond}
	o := Options{RunsEvery: 5 * time.Millisecond, MinRefresh: time.Millisecond}
	_, srv := newPage(t, src, o)
	ch, stop := events(t, srv.URL+"/status/events", "")
	defer stop()
	next(t, ch, "the first event", func(update) bool { return true })
	l0, _ := src.calls()
	start := time.Now()
	for i := 0; time.Since(start) < time.Second; i++ {
		src.move("t", utc("2026-09-28T00:00:00Z").Add(time.Duration(i+1)*time.Minute))
		time.Sleep(time.Millisecond)
	}
	l1, _ := src.calls()
	if reads, bound := l1-l0, int(time.Since(start)/(10*src.delay))+2; reads > bound {
		t.Errorf("%d reads of 20 ms in %v; want at most %d", reads, time.Since(start), bound)
	}
	if l1-l0 < 2 {
		t.Errorf("%d reads in a second of moves; the page stopped following them", l1-l0)
	}
}

// TestFmtVerdictKeepsTheFraction: a verdict with a fraction of a second is
// shown with it, a whole second without one.
func TestFmtVerdictKeepsTheFraction(t *testing.T) {
	at := time.Date(2026, 9, 28, 10, 59, 59, 999999000, time.UTC)
	if got := fmtVerdict(at); got != "2026-09-28 10:59:59.999999Z" {
		t.Errorf("fmtVerdict = %s", got)
	}
	if got := fmtVerdict(at.Truncate(time.Second)); got != "2026-09-28 10:59:59Z" {
		t.Errorf("fmtVerdict of a whole second = %s", got)
	}
}

// TestPageGivesNoTimeForATableWithoutAVerdict: a table held before its
// first verdict had <time datetime="0001-01-01T00:00:00Z"> in its until
// cell: the zero time given as a machine-readable time. It says "never",
// with no time element.
func TestPageGivesNoTimeForATableWithoutAVerdict(t *testing.T) {
	now := time.Now().UTC()
	src := &fakeSource{
		waits: []finalizer.JoinWait{{Table: "silver.new", QueryID: "0b0b0b0b-bc9c-4be8-97a9-b135d2943028", QueryName: "region-eu",
			RunID: runB, Since: now.Add(-5 * time.Minute)}},
	}
	_, srv := newPage(t, src, Options{})
	_, _, body := get(t, srv.URL+"/")
	if !strings.Contains(body, "silver.new") || strings.Contains(body, "0001-01-01") {
		t.Errorf("page of a table without a verdict:\n%s", body)
	}
}
