package control

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	neturl "net/url"

	"github.com/jackc/pgx/v5"
)

// waitResult is what a Wait in a goroutine returned.
type waitResult struct {
	v   Verdict
	err error
}

// goWait runs Wait in a goroutine owned by the test: at cleanup its ctx
// is canceled and the goroutine waited for.
func goWait(t *testing.T, ctx context.Context, s *Store, table string, until time.Time) <-chan waitResult {
	t.Helper()
	ctx, cancel := context.WithCancel(ctx)
	ch := make(chan waitResult, 1)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		v, err := s.Wait(ctx, table, until)
		ch <- waitResult{v, err}
	}()
	t.Cleanup(func() {
		cancel()
		wg.Wait()
	})
	return ch
}

// result waits for a Wait's result, failing after a deadline.
func result(t *testing.T, ch <-chan waitResult) waitResult {
	t.Helper()
	select {
	case r := <-ch:
		return r
	case <-time.After(10 * time.Second):
		t.Fatal("Wait did not return")
		return waitResult{}
	}
}

// listening waits until the Store's LISTEN connection is up and every
// waiter registered.
func listening(t *testing.T, s *Store, waiters int) {
	t.Helper()
	eventually(t, "the LISTEN connection and the waiters", func() bool {
		s.lis.mu.Lock()
		n := 0
		for _, ws := range s.lis.waiters {
			n += len(ws)
		}
		s.lis.mu.Unlock()
		return s.lis.backendPID() != 0 && n == waiters
	})
}

func advance(t *testing.T, s *Store, table string, until time.Time) {
	t.Helper()
	if _, _, err := s.Advance(context.Background(), Advance{Table: table, FinalizedUntil: until}); err != nil {
		t.Fatal(err)
	}
}

func TestWaitReturnsAtOnceWhenFinal(t *testing.T) {
	s, _ := newStore(t, Options{})
	advance(t, s, "t", at(14, 0))
	for _, until := range []time.Time{at(13, 0), at(14, 0), time.Date(2026, 9, 28, 11, 0, 0, 0, time.FixedZone("UTC-3", -3*3600))} {
		v, err := s.Wait(context.Background(), "t", until)
		if err != nil {
			t.Fatal(err)
		}
		if !v.FinalizedUntil.Equal(at(14, 0)) {
			t.Errorf("Wait(%v) = %v", until, v.FinalizedUntil)
		}
	}
}

func TestWaitReturnsOnMove(t *testing.T) {
	s, _ := newStore(t, Options{})
	advance(t, s, "t", at(13, 0))
	ch := goWait(t, context.Background(), s, "t", at(15, 0))
	fresh := goWait(t, context.Background(), s, "new", at(1, 0)) // no row yet
	listening(t, s, 2)

	advance(t, s, "t", at(14, 0)) // not far enough
	advance(t, s, "new", at(1, 0))
	advance(t, s, "t", at(16, 0))
	r := result(t, ch)
	if r.err != nil {
		t.Fatal(r.err)
	}
	if !r.v.FinalizedUntil.Equal(at(16, 0)) {
		t.Errorf("Wait returned %v, want 16:00 (not the 14:00 move, which is short of 15:00)", r.v.FinalizedUntil)
	}
	if r := result(t, fresh); r.err != nil || !r.v.FinalizedUntil.Equal(at(1, 0)) {
		t.Errorf("Wait on a new table = %+v, %v", r.v, r.err)
	}
}

func TestWaitReturnsOnCancel(t *testing.T) {
	s, _ := newStore(t, Options{})
	ctx, cancel := context.WithCancel(context.Background())
	ch := goWait(t, ctx, s, "t", at(15, 0))
	listening(t, s, 1)
	cancel()
	if r := result(t, ch); !errors.Is(r.err, context.Canceled) {
		t.Fatalf("err = %v, want context.Canceled", r.err)
	}
	eventually(t, "the waiter to unregister", func() bool {
		s.lis.mu.Lock()
		defer s.lis.mu.Unlock()
		return len(s.lis.waiters) == 0
	})
}

func TestWaitReturnsOnClose(t *testing.T) {
	s, _ := newStore(t, Options{})
	ch := goWait(t, context.Background(), s, "t", at(15, 0))
	listening(t, s, 1)
	s.Close()
	if r := result(t, ch); !errors.Is(r.err, ErrClosed) {
		t.Fatalf("err = %v, want ErrClosed", r.err)
	}
}

// TestWaitSharesOneListenConnection has many waiters, as HTTP long polls
// would, on one LISTEN connection.
func TestWaitSharesOneListenConnection(t *testing.T) {
	s, url := newStore(t, Options{})
	const waiters = 40
	var chans []<-chan waitResult
	for i := 0; i < waiters; i++ {
		chans = append(chans, goWait(t, context.Background(), s, fmt.Sprintf("t%d", i%4), at(14, 0)))
	}
	listening(t, s, waiters)
	var n int
	if err := connect(t, url).QueryRow(context.Background(),
		"SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND application_name = $1",
		DefaultApplicationName+"-listen").Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != 1 {
		t.Errorf("%d LISTEN connections, want 1", n)
	}
	for i := 0; i < 4; i++ {
		advance(t, s, fmt.Sprintf("t%d", i), at(14, 0))
	}
	for _, ch := range chans {
		if r := result(t, ch); r.err != nil {
			t.Fatal(r.err)
		}
	}
}

// TestWaitSurvivesTerminatedListener kills the LISTEN connection's
// backend and moves the verdict while the listener is reconnecting: the
// notification is lost, and the re-check after reconnecting must release
// the waiter.
func TestWaitSurvivesTerminatedListener(t *testing.T) {
	s, url := newStore(t, Options{})
	// Hold the listener's reconnects until the test lets them through.
	gate := make(chan struct{})
	connects := make(chan struct{}, 10)
	orig := s.lis.connect
	first := true
	s.lis.connect = func(ctx context.Context) (*pgx.Conn, error) {
		if !first {
			connects <- struct{}{}
			select {
			case <-gate:
			case <-ctx.Done():
				return nil, ctx.Err()
			}
		}
		first = false
		return orig(ctx)
	}

	ch := goWait(t, context.Background(), s, "t", at(15, 0))
	listening(t, s, 1)
	pid := s.lis.backendPID()
	admin := connect(t, url)
	var ok bool
	if err := admin.QueryRow(context.Background(), "SELECT pg_terminate_backend($1)", pid).Scan(&ok); err != nil || !ok {
		t.Fatalf("pg_terminate_backend(%d) = %v, %v", pid, ok, err)
	}
	select {
	case <-connects: // the listener noticed and is trying to reconnect
	case <-time.After(10 * time.Second):
		t.Fatal("the listener did not try to reconnect")
	}
	advance(t, s, "t", at(15, 0)) // announced to nobody
	select {
	case r := <-ch:
		t.Fatalf("Wait returned %+v, %v before the listener reconnected", r.v, r.err)
	default:
	}
	close(gate)
	r := result(t, ch)
	if r.err != nil {
		t.Fatal(r.err)
	}
	if !r.v.FinalizedUntil.Equal(at(15, 0)) {
		t.Errorf("Wait returned %v", r.v.FinalizedUntil)
	}
	if newPID := s.lis.backendPID(); newPID == 0 || newPID == pid {
		t.Errorf("listener backend pid %d after reconnect (was %d)", newPID, pid)
	}

	// And notifications work again on the new connection.
	ch = goWait(t, context.Background(), s, "t", at(16, 0))
	listening(t, s, 1)
	advance(t, s, "t", at(16, 0))
	if r := result(t, ch); r.err != nil || !r.v.FinalizedUntil.Equal(at(16, 0)) {
		t.Errorf("second Wait = %+v, %v", r.v, r.err)
	}
}

// TestWaitSurvivesSilentListener silences the LISTEN connection without
// closing it (a dropped network path) and moves the verdict: the idle ping
// must notice, and the re-check after reconnecting release the waiter.
func TestWaitSurvivesSilentListener(t *testing.T) {
	s, p := listenViaProxy(t)
	s.lis.ping, s.lis.pingWait = 50*time.Millisecond, 50*time.Millisecond

	ch := goWait(t, context.Background(), s, "t", at(15, 0))
	listening(t, s, 1)
	pid := s.lis.backendPID()
	p.Freeze()
	advance(t, s, "t", at(15, 0)) // the notification goes into the void
	r := result(t, ch)
	if r.err != nil {
		t.Fatal(r.err)
	}
	if !r.v.FinalizedUntil.Equal(at(15, 0)) {
		t.Errorf("Wait returned %v", r.v.FinalizedUntil)
	}
	// The waiter may also have been released by its own first check, if
	// that ran after the advance; either way the idle ping must replace the
	// silenced connection.
	eventually(t, "a new LISTEN connection", func() bool {
		newPID := s.lis.backendPID()
		return newPID != 0 && newPID != pid
	})
}

// TestWatchSeesEveryMove: a watcher gets each move with its table and
// time, a zero Notification when the LISTEN connection is re-established
// (moves announced meanwhile are lost), and nothing after stop.
func TestWatchSeesEveryMove(t *testing.T) {
	s, url := newStore(t, Options{})
	seen, stop := watchAll(t, s)
	eventually(t, "the first connect's re-read", func() bool { return len(seen()) == 1 })
	if n := seen()[0]; n != (Notification{Reconnected: true}) {
		t.Fatalf("first notification %+v, want the zero re-read", n)
	}
	advance(t, s, "a", at(13, 0))
	advance(t, s, "b", at(14, 0))
	advance(t, s, "a", at(13, 0)) // no move, no announcement
	advance(t, s, "a", at(15, 0))
	eventually(t, "three moves", func() bool { return len(seen()) == 4 })
	want := []Notification{{}, {Table: "a", FinalizedUntil: at(13, 0)}, {Table: "b", FinalizedUntil: at(14, 0)}, {Table: "a", FinalizedUntil: at(15, 0)}}
	for i, n := range seen() {
		if n.Table != want[i].Table || !n.FinalizedUntil.Equal(want[i].FinalizedUntil) {
			t.Errorf("notification %d = %+v, want %+v", i, n, want[i])
		}
	}

	// A lost connection: the watcher is told to re-read when it is back.
	admin := connect(t, url)
	if _, err := admin.Exec(context.Background(), "SELECT pg_terminate_backend($1)", s.lis.backendPID()); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the re-read after the reconnect", func() bool { return len(seen()) == 5 })
	if n := seen()[4]; n != (Notification{Reconnected: true}) {
		t.Fatalf("after the reconnect: %+v, want the zero re-read", n)
	}

	stop()
	// A Wait woken by the announcement proves it was dispatched: the
	// watcher would have been called before the waiter.
	ch := goWait(t, context.Background(), s, "a", at(16, 0))
	listening(t, s, 1)
	advance(t, s, "a", at(16, 0))
	if r := result(t, ch); r.err != nil {
		t.Fatal(r.err)
	}
	if n := len(seen()); n != 5 {
		t.Errorf("%d notifications after stop, want 5", n)
	}
}

// TestAWatchOfAConnectionUpAlreadyIsToldItIsUp: a Watch made while the
// LISTEN connection is up already (a Wait opened it) waited for the next
// reconnect to hear that it was up, which may never come: the service
// waits for that first notification before its recovery, and would have
// waited its whole bound. Watch tells it at once, once.
func TestAWatchOfAConnectionUpAlreadyIsToldItIsUp(t *testing.T) {
	s, _ := newStore(t, Options{})
	ctx, cancel := context.WithCancel(context.Background())
	ch := goWait(t, ctx, s, "t", at(15, 0))
	listening(t, s, 1)
	seen, stop := watchAll(t, s)
	defer stop()
	if got := seen(); len(got) != 1 || got[0] != (Notification{Reconnected: true}) {
		t.Fatalf("Watch of a connection up already: %+v, want one re-read, said before Watch returned", got)
	}
	advance(t, s, "a", at(13, 0))
	eventually(t, "the move", func() bool { return len(seen()) == 2 })
	if got := seen(); got[1].Table != "a" || got[1].Reconnected {
		t.Errorf("after the move: %+v, want the one re-read, then the move", got)
	}
	cancel()
	<-ch
}

func TestWatchOnClosedStore(t *testing.T) {
	s, _ := newStore(t, Options{})
	s.Close()
	if _, err := s.Watch(func(Notification) {}); !errors.Is(err, ErrClosed) {
		t.Fatalf("Watch on a closed store: %v, want ErrClosed", err)
	}
}

// Two control tables in one database (--control-table: two deployments, a
// staging one beside production) share the notification channel. A
// store's watchers must hear only its own table's moves and rewinds: a
// watcher takes a move as "the table reached this" (the ownership of
// tables then skips writing what it holds; the lag gauge follows it) and a
// rewind as "forget what you wrote", so a move of the other control
// table's "t" would leave this one's "t" behind when its owner dies.
func TestWatchHearsOnlyItsControlTable(t *testing.T) {
	s, url := newStore(t, Options{})
	other := openStore(t, url, Options{Table: "staging.table_finalization"})
	if _, err := connect(t, url).Exec(context.Background(), "CREATE SCHEMA staging"); err != nil {
		t.Fatal(err)
	}
	if err := other.Migrate(context.Background()); err != nil {
		t.Fatal(err)
	}
	seen, stop := watchAll(t, s)
	defer stop()
	eventually(t, "the first connect's re-read", func() bool { return len(seen()) == 1 })

	advance(t, other, "t", at(13, 0))                                // one advance: the single-row statement
	advance(t, other, "t", at(16, 0))                                //
	if _, err := other.AdvanceBatch(context.Background(), []Advance{ // the batch statement
		{Table: "t", FinalizedUntil: at(17, 0)}, {Table: "u", FinalizedUntil: at(17, 0)},
	}); err != nil {
		t.Fatal(err)
	}
	if _, err := other.Rewind(context.Background(), Rewind{Table: "t", To: at(12, 0), Reason: "test", By: "test"}); err != nil {
		t.Fatal(err)
	}
	advance(t, s, "t", at(14, 0)) // this store's own move, the last one sent
	eventually(t, "this store's own move", func() bool {
		n := seen()
		return len(n) > 0 && n[len(n)-1].Table == "t" && n[len(n)-1].FinalizedUntil.Equal(at(14, 0))
	})
	for _, n := range seen()[1:] {
		if n.Table != "t" || !n.FinalizedUntil.Equal(at(14, 0)) || n.Rewound {
			t.Errorf("heard %+v: a move or rewind of another control table", n)
		}
	}
}

// watchAll watches s and returns what the watcher got so far (a copy, in
// order) and the watch's stop.
func watchAll(t *testing.T, s *Store) (seen func() []Notification, stop func()) {
	t.Helper()
	var mu sync.Mutex
	var got []Notification
	stop, err := s.Watch(func(n Notification) {
		mu.Lock()
		got = append(got, n)
		mu.Unlock()
	})
	if err != nil {
		t.Fatal(err)
	}
	return func() []Notification {
		mu.Lock()
		defer mu.Unlock()
		return append([]Notification(nil), got...)
	}, stop
}

// TestListenerKeepsALiveConnectionAcrossPings: the LISTEN connection's
// wait is bounded by a read deadline the ping interval after the last
// message, not by a context per notification. Through silences longer
// than the interval (each a ping) and notifications arriving faster than
// it, the live connection is kept (no reconnect, no re-read) and every
// move is heard, in order.
func TestListenerKeepsALiveConnectionAcrossPings(t *testing.T) {
	s, _ := newStore(t, Options{})
	s.lis.ping = 40 * time.Millisecond
	seen, stop := watchAll(t, s)
	defer stop()
	eventually(t, "the first connect's re-read", func() bool { return len(seen()) == 1 })
	pid := s.lis.backendPID()
	want := []Notification{{Reconnected: true}}
	for i := range 4 {
		time.Sleep(130 * time.Millisecond) // silent: about three pings
		for j := range 10 {                // faster than the interval
			until := at(12, 0).Add(time.Duration(i*10+j+1) * time.Minute)
			advance(t, s, "t", until)
			want = append(want, Notification{Table: "t", FinalizedUntil: until})
			time.Sleep(5 * time.Millisecond)
		}
	}
	eventually(t, "every move", func() bool { return len(seen()) == len(want) })
	for i, n := range seen() {
		if n.Reconnected != want[i].Reconnected || n.Table != want[i].Table || !n.FinalizedUntil.Equal(want[i].FinalizedUntil) {
			t.Errorf("notification %d = %+v, want %+v", i, n, want[i])
		}
	}
	if got := s.lis.backendPID(); got != pid {
		t.Errorf("LISTEN backend %d, was %d: a live connection was replaced", got, pid)
	}
}

// TestListenerKeepsASlowConnection: a ping that takes longer than the
// ping interval (a server slow to answer on a loaded machine) does not
// give the live connection up: a ping's answer is bounded by pingWait,
// not by the interval. Before, the tests' 40 ms interval was also the
// ping's deadline, and TestListenerHearsBurstsAcrossDeadlines lost a
// third of its moves to reconnects on a machine under disk load ("ping:
// timeout").
func TestListenerKeepsASlowConnection(t *testing.T) {
	s, p := listenViaProxy(t)
	s.lis.ping = 40 * time.Millisecond
	seen, stop := watchAll(t, s)
	defer stop()
	eventually(t, "the first connect's re-read", func() bool { return len(seen()) == 1 })
	pid := s.lis.backendPID()
	p.Lag(100 * time.Millisecond) // a ping's round trip: 200 ms, five intervals
	time.Sleep(time.Second)       // silent: pings
	advance(t, s, "t", at(13, 0))
	eventually(t, "the move", func() bool { return len(seen()) == 2 })
	p.Lag(0)
	if n := seen()[1]; n.Reconnected || n.Table != "t" || !n.FinalizedUntil.Equal(at(13, 0)) {
		t.Errorf("after the slow pings: %+v, want the move of t to 13:00", n)
	}
	if got := s.lis.backendPID(); got != pid {
		t.Errorf("LISTEN backend %d, was %d: a live connection was given up while its pings were slow", got, pid)
	}
}

// TestListenerHearsBurstsAcrossDeadlines: bursts of notifications of long
// table names (a group of 1,000 tables per statement, more than a read's
// buffer) arriving while the read deadline of a short ping interval
// passes, some straight after a silence of a ping or more: a deadline
// that cuts a message in two leaves the connection usable, and every
// move is heard once, on the same connection.
func TestListenerHearsBurstsAcrossDeadlines(t *testing.T) {
	s, _ := newStore(t, Options{})
	s.lis.ping = 40 * time.Millisecond
	seen, stop := watchAll(t, s)
	defer stop()
	eventually(t, "the first connect's re-read", func() bool { return len(seen()) == 1 })
	pid := s.lis.backendPID()
	const tables, rounds = 1000, 8
	want := make(map[string]int)
	for i := range rounds {
		until := at(12, 0).Add(time.Duration(i+1) * time.Hour)
		as := make([]Advance, tables)
		for k := range as {
			as[k] = Advance{Table: fmt.Sprintf("deadline.%s_%04d", strings.Repeat("x", 40), k), FinalizedUntil: until}
			want[fmt.Sprintf("%s@%s", as[k].Table, until.Format(time.RFC3339))]++
		}
		res, err := s.AdvanceBatch(context.Background(), as)
		if err != nil {
			t.Fatal(err)
		}
		for k, r := range res {
			if r.Err != nil || !r.Moved {
				t.Fatalf("round %d, %s: %+v", i, as[k].Table, r)
			}
		}
		time.Sleep(time.Duration(i%3) * 30 * time.Millisecond) // none, most of a ping, more than one
	}
	eventually(t, "every move", func() bool { return len(seen()) == 1+tables*rounds })
	got := make(map[string]int)
	for _, n := range seen()[1:] {
		if n.Reconnected {
			t.Fatalf("reconnected: %+v", n)
		}
		got[fmt.Sprintf("%s@%s", n.Table, n.FinalizedUntil.UTC().Format(time.RFC3339))]++
	}
	for k, n := range want {
		if got[k] != n {
			t.Errorf("%s heard %d times, want %d", k, got[k], n)
		}
	}
	if got := s.lis.backendPID(); got != pid {
		t.Errorf("LISTEN backend %d, was %d: a live connection was replaced", got, pid)
	}
}

// listenViaProxy returns a store whose LISTEN connection goes through a
// proxy the test can freeze or slow, and the proxy.
func listenViaProxy(t *testing.T) (*Store, *proxy) {
	t.Helper()
	s, url := newStore(t, Options{})
	u, err := neturl.Parse(url)
	if err != nil {
		t.Fatal(err)
	}
	p := newProxy(t, u.Host)
	u.Host = p.Addr()
	cfg, err := pgx.ParseConfig(u.String())
	if err != nil {
		t.Fatal(err)
	}
	s.lis.connect = func(ctx context.Context) (*pgx.Conn, error) { return pgx.ConnectConfig(ctx, cfg) }
	return s, p
}
