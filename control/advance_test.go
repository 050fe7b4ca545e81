package control

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	neturl "net/url"

	"github.com/finalizer-dev/finalizer/internal/pgcluster/pgtest"
)

func TestAdvanceFirstInserts(t *testing.T) {
	s, _ := newStore(t, Options{})
	ctx := context.Background()
	if _, err := s.Get(ctx, "bronze.orders"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("Get before any advance: err = %v, want ErrNotFound", err)
	}
	minus3 := time.FixedZone("UTC-3", -3*3600)
	a := Advance{
		Table:          "bronze.orders",
		FinalizedUntil: at(14, 0).In(minus3),
		EndTime:        time.Date(2026, 9, 28, 14, 37, 12, 345_678_900, time.UTC),
		EndOffset:      json.RawMessage(`{"lsn": "0x00000027000001a8", "commit_ts": "2026-09-28T14:37:12.345"}`),
		QueryID:        "8a9c2f2e-1b1e-4c8e-9d8f-4a1d2b3c4d5e",
		RunID:          "0b1c2d3e-4f50-6172-8394-a5b6c7d8e9f0",
		BatchID:        1 << 40,
	}
	before := time.Now()
	v, moved, err := s.Advance(ctx, a)
	if err != nil {
		t.Fatal(err)
	}
	if !moved {
		t.Error("first advance did not report a move")
	}
	want := Verdict{
		Table:          a.Table,
		FinalizedUntil: at(14, 0),
		EndTime:        time.Date(2026, 9, 28, 14, 37, 12, 345_678_000, time.UTC), // microseconds
		QueryID:        a.QueryID,
		RunID:          a.RunID,
		BatchID:        a.BatchID,
	}
	checkVerdict(t, v, want, a.EndOffset)
	if v.UpdatedAt.Location() != time.UTC || v.UpdatedAt.Before(before.Add(-time.Minute)) {
		t.Errorf("UpdatedAt = %v, want a recent UTC time", v.UpdatedAt)
	}
	got, err := s.Get(ctx, a.Table)
	if err != nil {
		t.Fatal(err)
	}
	checkVerdict(t, got, want, a.EndOffset)
	if !got.UpdatedAt.Equal(v.UpdatedAt) {
		t.Errorf("Get UpdatedAt = %v, Advance returned %v", got.UpdatedAt, v.UpdatedAt)
	}
}

// checkVerdict compares v with want (UpdatedAt aside) and its EndOffset
// with the JSON offset.
func checkVerdict(t *testing.T, v, want Verdict, offset json.RawMessage) {
	t.Helper()
	gotOffset := v.EndOffset
	v.EndOffset, v.UpdatedAt = nil, time.Time{}
	if !v.FinalizedUntil.Equal(want.FinalizedUntil) || v.FinalizedUntil.Location() != time.UTC ||
		!v.EndTime.Equal(want.EndTime) || (!v.EndTime.IsZero() && v.EndTime.Location() != time.UTC) ||
		v.Table != want.Table || v.QueryID != want.QueryID || v.RunID != want.RunID || v.BatchID != want.BatchID {
		t.Errorf("verdict = %+v\nwant      %+v", v, want)
	}
	if !jsonEqual(t, gotOffset, offset) {
		t.Errorf("EndOffset = %s, want %s", gotOffset, offset)
	}
}

func jsonEqual(t *testing.T, a, b json.RawMessage) bool {
	t.Helper()
	if len(a) == 0 || len(b) == 0 {
		return len(a) == len(b)
	}
	var x, y any
	if err := json.Unmarshal(a, &x); err != nil {
		t.Fatalf("%s: %v", a, err)
	}
	if err := json.Unmarshal(b, &y); err != nil {
		t.Fatalf("%s: %v", b, err)
	}
	return fmt.Sprint(x) == fmt.Sprint(y)
}

func TestAdvanceIsMonotonic(t *testing.T) {
	s, _ := newStore(t, Options{})
	ctx := context.Background()
	first := Advance{Table: "t", FinalizedUntil: at(14, 0), EndTime: at(14, 37), QueryID: "q", RunID: "r1", BatchID: 7,
		EndOffset: json.RawMessage(`{"commit_ts": "2026-09-28T14:37:00"}`)}
	standing, moved, err := s.Advance(ctx, first)
	if err != nil || !moved {
		t.Fatalf("first advance: moved %v, err %v", moved, err)
	}
	for _, tc := range []struct {
		name  string
		until time.Time
	}{
		{"older period", at(13, 0)},
		{"same period", at(14, 0)},
		{"same instant in another zone", at(14, 0).In(time.FixedZone("UTC+5:30", 5*3600+1800))},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v, moved, err := s.Advance(ctx, Advance{Table: "t", FinalizedUntil: tc.until, EndTime: tc.until, QueryID: "q", RunID: "r2", BatchID: 99})
			if err != nil {
				t.Fatal(err)
			}
			if moved {
				t.Error("moved")
			}
			checkVerdict(t, v, Verdict{Table: "t", FinalizedUntil: at(14, 0), EndTime: at(14, 37), QueryID: "q", RunID: "r1", BatchID: 7}, first.EndOffset)
			if !v.UpdatedAt.Equal(standing.UpdatedAt) {
				t.Errorf("UpdatedAt changed from %v to %v", standing.UpdatedAt, v.UpdatedAt)
			}
		})
	}
	t.Run("later period", func(t *testing.T) {
		v, moved, err := s.Advance(ctx, Advance{Table: "t", FinalizedUntil: at(15, 0), QueryID: "q", RunID: "r2", BatchID: 8})
		if err != nil || !moved {
			t.Fatalf("moved %v, err %v", moved, err)
		}
		// Provenance is replaced whole: no end time or offset given, none kept.
		checkVerdict(t, v, Verdict{Table: "t", FinalizedUntil: at(15, 0), QueryID: "q", RunID: "r2", BatchID: 8}, nil)
	})
}

// TestNoopAdvanceIsARead checks that offering the standing period again
// neither writes nor locks the row (no transaction id, no WAL flush).
func TestNoopAdvanceIsARead(t *testing.T) {
	s, url := newStore(t, Options{})
	ctx := context.Background()
	advance := func() {
		t.Helper()
		if _, _, err := s.Advance(ctx, Advance{Table: "t", FinalizedUntil: at(14, 0)}); err != nil {
			t.Fatal(err)
		}
	}
	advance()
	conn := connect(t, url)
	row := func() (xmin, xmax string) {
		t.Helper()
		if err := conn.QueryRow(ctx, "SELECT xmin::text, xmax::text FROM "+s.n.table+" WHERE table_name = 't'").Scan(&xmin, &xmax); err != nil {
			t.Fatal(err)
		}
		return xmin, xmax
	}
	xmin, xmax := row()
	advance()
	if xmin2, xmax2 := row(); xmin2 != xmin || xmax2 != xmax {
		t.Errorf("a no-op advance touched the row: xmin %s -> %s, xmax %s -> %s", xmin, xmin2, xmax, xmax2)
	}
}

func TestAdvanceRejectsInvalid(t *testing.T) {
	s, _ := newStore(t, Options{})
	ctx := context.Background()
	for name, a := range map[string]Advance{
		"no table":        {FinalizedUntil: at(14, 0)},
		"no time":         {Table: "t"},
		"offset not JSON": {Table: "t", FinalizedUntil: at(14, 0), EndOffset: json.RawMessage(`{"lsn":`)},
	} {
		t.Run(name, func(t *testing.T) {
			if _, _, err := s.Advance(ctx, a); !errors.Is(err, ErrInvalidAdvance) {
				t.Fatalf("err = %v, want ErrInvalidAdvance", err)
			}
		})
	}
	if vs, err := s.List(ctx); err != nil || len(vs) != 0 {
		t.Errorf("List = %v, %v; want nothing written", vs, err)
	}
}

// TestAdvanceNotifiesOnlyOnMove listens on the channel: a move is
// announced with its table and time, a non-move is not.
func TestAdvanceNotifiesOnlyOnMove(t *testing.T) {
	s, url := newStore(t, Options{})
	ctx := context.Background()
	lc := connect(t, url)
	if _, err := lc.Exec(ctx, "LISTEN "+NotifyChannel); err != nil {
		t.Fatal(err)
	}
	sender := connect(t, url)

	next := func() string {
		t.Helper()
		wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		n, err := lc.WaitForNotification(wctx)
		if err != nil {
			t.Fatalf("no notification: %v", err)
		}
		if n.Channel != NotifyChannel {
			t.Fatalf("channel %q", n.Channel)
		}
		return n.Payload
	}
	// noneBefore checks that nothing was announced: a marker sent after
	// the statements under test must be the next notification, because
	// notifications are delivered in commit order.
	noneBefore := func() {
		t.Helper()
		if _, err := sender.Exec(ctx, "SELECT pg_notify($1, 'marker')", NotifyChannel); err != nil {
			t.Fatal(err)
		}
		if got := next(); got != "marker" {
			t.Fatalf("unexpected notification %s", got)
		}
	}

	advance := func(table string, until time.Time) bool {
		t.Helper()
		_, moved, err := s.Advance(ctx, Advance{Table: table, FinalizedUntil: until})
		if err != nil {
			t.Fatal(err)
		}
		return moved
	}

	if !advance(`bronze."odd" name`, at(14, 0).In(time.FixedZone("UTC-3", -3*3600))) {
		t.Fatal("first advance did not move")
	}
	var got map[string]any
	if err := json.Unmarshal([]byte(next()), &got); err != nil {
		t.Fatal(err)
	}
	if len(got) != 3 || got["control_table"] != "public.table_finalization" || got["table"] != `bronze."odd" name` || got["finalized_until"] != "2026-09-28T14:00:00Z" {
		t.Errorf("payload = %v", got)
	}
	noneBefore()

	advance(`bronze."odd" name`, at(13, 0))
	advance(`bronze."odd" name`, at(14, 0))
	noneBefore()

	if !advance(`bronze."odd" name`, at(15, 0)) {
		t.Fatal("did not move")
	}
	if p := next(); p != `{"table":"bronze.\"odd\" name","finalized_until":"2026-09-28T15:00:00Z","control_table":"public.table_finalization"}` {
		t.Errorf("payload = %s", p)
	}
	noneBefore()
}

// TestConcurrentAdvanceOneTable has 16 writers advance one table through
// the same increasing hours, as replicas or restarted runs would.
func TestConcurrentAdvanceOneTable(t *testing.T) {
	s, url := newStore(t, Options{MaxConns: 16})
	ctx := context.Background()
	lc := connect(t, url)
	if _, err := lc.Exec(ctx, "LISTEN "+NotifyChannel); err != nil {
		t.Fatal(err)
	}

	const writers, hours = 16, 24
	var (
		mu    sync.Mutex
		moves = map[time.Time]int{}
		wg    sync.WaitGroup
		errs  = make(chan error, writers+1)
		stop  = make(chan struct{})
	)
	// A reader that must never see the verdict go back.
	var readerDone sync.WaitGroup
	readerDone.Add(1)
	go func() {
		defer readerDone.Done()
		var last time.Time
		for {
			select {
			case <-stop:
				return
			default:
			}
			v, err := s.Get(ctx, "t")
			if errors.Is(err, ErrNotFound) {
				continue
			}
			if err != nil {
				errs <- err
				return
			}
			if v.FinalizedUntil.Before(last) {
				errs <- fmt.Errorf("reader saw %v after %v", v.FinalizedUntil, last)
				return
			}
			last = v.FinalizedUntil
		}
	}()
	for w := 0; w < writers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var last time.Time
			for h := 0; h < hours; h++ {
				cand := at(0, 0).Add(time.Duration(h) * time.Hour)
				v, moved, err := s.Advance(ctx, Advance{Table: "t", FinalizedUntil: cand, BatchID: int64(w)})
				if err != nil {
					errs <- err
					return
				}
				if v.FinalizedUntil.Before(cand) {
					errs <- fmt.Errorf("writer %d: advance to %v returned %v, behind its own candidate", w, cand, v.FinalizedUntil)
					return
				}
				if v.FinalizedUntil.Before(last) {
					errs <- fmt.Errorf("writer %d: saw %v after %v", w, v.FinalizedUntil, last)
					return
				}
				if moved && !v.FinalizedUntil.Equal(cand) {
					errs <- fmt.Errorf("writer %d: moved to %v, returned %v", w, cand, v.FinalizedUntil)
					return
				}
				last = v.FinalizedUntil
				if moved {
					mu.Lock()
					moves[cand]++
					mu.Unlock()
				}
			}
		}()
	}
	wg.Wait()
	close(stop)
	readerDone.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	for h := 0; h < hours; h++ {
		cand := at(0, 0).Add(time.Duration(h) * time.Hour)
		if moves[cand] != 1 {
			t.Errorf("%v moved %d times, want exactly once", cand, moves[cand])
		}
	}
	v, err := s.Get(ctx, "t")
	if err != nil {
		t.Fatal(err)
	}
	if want := at(23, 0); !v.FinalizedUntil.Equal(want) {
		t.Errorf("final verdict %v, want %v", v.FinalizedUntil, want)
	}
	// One notification per move, in increasing order.
	var prev time.Time
	for i := 0; i < hours; i++ {
		wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		n, err := lc.WaitForNotification(wctx)
		cancel()
		if err != nil {
			t.Fatalf("notification %d of %d: %v", i+1, hours, err)
		}
		var p notification
		if err := json.Unmarshal([]byte(n.Payload), &p); err != nil {
			t.Fatal(err)
		}
		ts, err := time.Parse(time.RFC3339, p.FinalizedUntil)
		if err != nil {
			t.Fatal(err)
		}
		if !ts.After(prev) {
			t.Errorf("notification %v after %v", ts, prev)
		}
		prev = ts
	}
	if _, err := lc.Exec(ctx, "SELECT pg_notify($1, 'marker')", NotifyChannel); err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if n, err := lc.WaitForNotification(wctx); err != nil || n.Payload != "marker" {
		t.Errorf("after %d moves: notification %v, %v; want only the marker", hours, n, err)
	}
}

// TestConcurrentAdvanceManyTables has 16 writers advance 8 tables each.
func TestConcurrentAdvanceManyTables(t *testing.T) {
	s, _ := newStore(t, Options{MaxConns: 16})
	ctx := context.Background()
	const writers, tables, hours = 16, 8, 6
	type key struct {
		table string
		until time.Time
	}
	var (
		mu    sync.Mutex
		moves = map[key]int{}
		wg    sync.WaitGroup
		errs  = make(chan error, writers)
	)
	for w := 0; w < writers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for h := 0; h < hours; h++ {
				for i := 0; i < tables; i++ {
					table := fmt.Sprintf("silver.t%d", (i+w)%tables) // writers start on different tables
					cand := at(h, 0)
					v, moved, err := s.Advance(ctx, Advance{Table: table, FinalizedUntil: cand})
					if err != nil {
						errs <- err
						return
					}
					if v.FinalizedUntil.Before(cand) || v.Table != table {
						errs <- fmt.Errorf("advance %s to %v returned %+v", table, cand, v)
						return
					}
					if moved {
						mu.Lock()
						moves[key{table, cand}]++
						mu.Unlock()
					}
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	vs, err := s.List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(vs) != tables {
		t.Fatalf("List has %d verdicts, want %d", len(vs), tables)
	}
	for i, v := range vs {
		if want := fmt.Sprintf("silver.t%d", i); v.Table != want {
			t.Errorf("List[%d] = %s, want %s (ordered by name)", i, v.Table, want)
		}
		if !v.FinalizedUntil.Equal(at(hours-1, 0)) {
			t.Errorf("%s at %v, want %v", v.Table, v.FinalizedUntil, at(hours-1, 0))
		}
		for h := 0; h < hours; h++ {
			if n := moves[key{v.Table, at(h, 0)}]; n != 1 {
				t.Errorf("%s to %v moved %d times, want once", v.Table, at(h, 0), n)
			}
		}
	}
}

// TestAdvanceReadsBackConcurrentInsert holds a concurrent first verdict
// open (another replica's, under the table's lock as every first verdict
// is) while Advance runs: Advance waits for it and must then return the
// other writer's row.
func TestAdvanceReadsBackConcurrentInsert(t *testing.T) {
	s, url := newStore(t, Options{})
	ctx := context.Background()
	other := connect(t, url)
	tx, err := other.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	if _, err := tx.Exec(ctx, s.sql.lockKeys, []string{"t"}, s.n.table); err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, "INSERT INTO "+s.n.table+" (table_name, finalized_until, run_id) VALUES ('t', $1, 'other')", at(16, 0)); err != nil {
		t.Fatal(err)
	}
	type result struct {
		v     Verdict
		moved bool
		err   error
	}
	done := make(chan result, 1)
	go func() {
		v, moved, err := s.Advance(ctx, Advance{Table: "t", FinalizedUntil: at(14, 0), RunID: "mine"})
		done <- result{v, moved, err}
	}()
	// Advance is blocked on the other transaction's row.
	monitor := connect(t, url)
	eventually(t, "advance to wait for the other writer", func() bool {
		var waiting bool
		if err := monitor.QueryRow(ctx, `SELECT EXISTS (SELECT FROM pg_stat_activity WHERE datname = current_database()
			AND wait_event_type = 'Lock' AND application_name = $1)`, DefaultApplicationName).Scan(&waiting); err != nil {
			t.Fatal(err)
		}
		return waiting
	})
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	r := <-done
	if r.err != nil {
		t.Fatal(r.err)
	}
	if r.moved || !r.v.FinalizedUntil.Equal(at(16, 0)) || r.v.RunID != "other" {
		t.Errorf("Advance = %+v, moved %v; want the other writer's 16:00, not moved", r.v, r.moved)
	}
}

func TestIsFinal(t *testing.T) {
	s, _ := newStore(t, Options{})
	ctx := context.Background()
	if _, _, err := s.Advance(ctx, Advance{Table: "t", FinalizedUntil: at(14, 0)}); err != nil {
		t.Fatal(err)
	}
	minus3 := time.FixedZone("UTC-3", -3*3600)
	for _, tc := range []struct {
		name      string
		table     string
		periodEnd time.Time
		want      bool
	}{
		{"11:00 at UTC-3 is 14:00Z", "t", time.Date(2026, 9, 28, 11, 0, 0, 0, minus3), true},
		{"12:00 at UTC-3 is 15:00Z", "t", time.Date(2026, 9, 28, 12, 0, 0, 0, minus3), false},
		{"13:00Z", "t", at(13, 0), true},
		{"14:00Z", "t", at(14, 0), true},
		{"a microsecond later", "t", at(14, 0).Add(time.Microsecond), false},
		{"no verdict", "other", at(1, 0), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := s.IsFinal(ctx, tc.table, tc.periodEnd)
			if err != nil {
				t.Fatal(err)
			}
			if got != tc.want {
				t.Errorf("IsFinal(%s, %v) = %v, want %v", tc.table, tc.periodEnd, got, tc.want)
			}
		})
	}
}

// TestUnavailable runs the store through a proxy and then takes the
// server away: every operation says ErrUnavailable, keeping the cause.
func TestUnavailable(t *testing.T) {
	url := pgtestURLVia(t)
	ctx := context.Background()
	s := openStore(t, url.viaProxy, Options{})
	if err := s.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.Advance(ctx, Advance{Table: "t", FinalizedUntil: at(14, 0)}); err != nil {
		t.Fatal(err)
	}
	url.proxy.Close() // open connections break, new ones are refused

	_, _, err := s.Advance(ctx, Advance{Table: "t", FinalizedUntil: at(15, 0)})
	if !errors.Is(err, ErrUnavailable) {
		t.Fatalf("Advance on a broken connection: err = %v, want ErrUnavailable", err)
	}
	_, _, err = s.Advance(ctx, Advance{Table: "t", FinalizedUntil: at(15, 0)})
	if !errors.Is(err, ErrUnavailable) {
		t.Fatalf("Advance with the server gone: err = %v, want ErrUnavailable", err)
	}
	var pgErr interface{ Unwrap() error }
	if !errors.As(err, &pgErr) {
		t.Errorf("the cause is not kept: %v", err)
	}
	if _, err := s.Get(ctx, "t"); !errors.Is(err, ErrUnavailable) {
		t.Errorf("Get: err = %v, want ErrUnavailable", err)
	}
	if err := s.Ping(ctx); !errors.Is(err, ErrUnavailable) {
		t.Errorf("Ping: err = %v, want ErrUnavailable", err)
	}
	if _, err := s.Wait(ctx, "t", at(15, 0)); !errors.Is(err, ErrUnavailable) {
		t.Errorf("Wait: err = %v, want ErrUnavailable", err)
	}
	// The row was not moved behind our back.
	direct := openStore(t, url.direct, Options{})
	if v, err := direct.Get(ctx, "t"); err != nil || !v.FinalizedUntil.Equal(at(14, 0)) {
		t.Errorf("Get directly = %+v, %v; want 14:00", v, err)
	}
}

func TestOpenIsLazy(t *testing.T) {
	// Nothing listens on the port: Open succeeds, use fails.
	p := newProxy(t, "127.0.0.1:1")
	addr := p.Addr()
	p.Close()
	s := openStore(t, "postgres://u:p@"+addr+"/db?sslmode=disable", Options{})
	_, _, err := s.Advance(context.Background(), Advance{Table: "t", FinalizedUntil: at(14, 0)})
	if !errors.Is(err, ErrUnavailable) {
		t.Fatalf("err = %v, want ErrUnavailable", err)
	}
}

func TestClosedStore(t *testing.T) {
	s, _ := newStore(t, Options{})
	s.Close()
	s.Close()
	ctx := context.Background()
	if _, _, err := s.Advance(ctx, Advance{Table: "t", FinalizedUntil: at(14, 0)}); !errors.Is(err, ErrClosed) {
		t.Errorf("Advance: err = %v, want ErrClosed", err)
	}
	if _, err := s.Wait(ctx, "t", at(14, 0)); !errors.Is(err, ErrClosed) {
		t.Errorf("Wait: err = %v, want ErrClosed", err)
	}
}

// urls are a database's URL directly and through a proxy.
type urls struct {
	direct, viaProxy string
	proxy            *proxy
}

func pgtestURLVia(t *testing.T) urls {
	t.Helper()
	direct := pgtest.URL(t)
	u, err := neturl.Parse(direct)
	if err != nil {
		t.Fatal(err)
	}
	p := newProxy(t, u.Host)
	u.Host = p.Addr()
	return urls{direct: direct, viaProxy: u.String(), proxy: p}
}

// EachFinalizedUntil gives what List gives of finalized_until, for the
// tables that have one (a row without one, as a mark may leave, is not
// given), in UTC.
func TestEachFinalizedUntilIsListsUntils(t *testing.T) {
	s, url := newStore(t, Options{})
	ctx := context.Background()
	for i, table := range []string{"silver.a", "silver.b", "silver.c"} {
		if _, _, err := s.Advance(ctx, Advance{Table: table, FinalizedUntil: at(10+i, 0)}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := connect(t, url).Exec(ctx, "INSERT INTO "+s.Table()+" (table_name) VALUES ('silver.none')"); err != nil {
		t.Fatal(err)
	}
	vs, err := s.List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]time.Time{}
	for _, v := range vs {
		if !v.FinalizedUntil.IsZero() {
			want[v.Table] = v.FinalizedUntil
		}
	}
	if len(vs) != 4 || len(want) != 3 {
		t.Fatalf("List gave %d verdicts, %d with finalized_until; want 4 and 3", len(vs), len(want))
	}
	got := map[string]time.Time{}
	if err := s.EachFinalizedUntil(ctx, func(table string, until time.Time) {
		if until.Location() != time.UTC {
			t.Errorf("%s: %v not in UTC", table, until)
		}
		got[table] = until
	}); err != nil {
		t.Fatal(err)
	}
	if len(got) != len(want) {
		t.Errorf("EachFinalizedUntil gave %v, want %v", got, want)
	}
	for table, w := range want {
		if !got[table].Equal(w) {
			t.Errorf("%s: %v, want %v", table, got[table], w)
		}
	}
	s.Close()
	if err := s.EachFinalizedUntil(ctx, func(string, time.Time) {}); !errors.Is(err, ErrClosed) {
		t.Errorf("after Close: %v, want ErrClosed", err)
	}
}
