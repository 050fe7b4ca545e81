package control

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"testing"
	"time"
)

// TestJoinFeedersOneBadAmongGood: a batch of joins where the database
// refuses one row (a query name with a NUL byte, which a text column
// cannot hold) joins every other query, and only the bad one carries an
// error; a duplicate join reports Added once; an invalid join is refused
// before the batch is sent; a retired feeder among them says so.
func TestJoinFeedersOneBadAmongGood(t *testing.T) {
	s, _ := newStore(t, Options{})
	ctx := context.Background()
	// A retired feeder, and a solo table that another query joins.
	feed(t, s, "silver.retired", "q-old", "old", at(12, 0))
	if _, _, _, err := s.RetireFeeder(ctx, "silver.retired", "q-old", "moved away"); err != nil {
		t.Fatal(err)
	}
	feed(t, s, "silver.solo", "q-solo", "solo", at(12, 0))

	var js []FeederJoin
	for i := range 40 {
		js = append(js, FeederJoin{Table: fmt.Sprintf("silver.t%02d", i), Query: fmt.Sprintf("q%02d", i), Name: fmt.Sprintf("name-%02d", i)})
	}
	const bad, invalid, dup, retired, joinsSolo = 17, 40, 41, 42, 43
	js[bad].Name = "bad\x00name"
	js = append(js,
		FeederJoin{Table: "silver.t99", Query: "bad\x00id"},               // invalid: refused before sending
		FeederJoin{Table: js[3].Table, Query: js[3].Query, Name: "other"}, // the same query and table again
		FeederJoin{Table: "silver.retired", Query: "q-old", Name: "old"},
		FeederJoin{Table: "silver.solo", Query: "q-new", Name: "new"},
	)
	res := s.JoinFeeders(ctx, js)
	if len(res) != len(js) {
		t.Fatalf("%d results for %d joins", len(res), len(js))
	}
	for i, r := range res {
		switch i {
		case bad:
			if r.Err == nil {
				t.Errorf("join %d (a name with a NUL byte): no error", i)
			}
		case invalid:
			if !errors.Is(r.Err, ErrInvalidAdvance) {
				t.Errorf("join %d (an invalid id): %v, want ErrInvalidAdvance", i, r.Err)
			}
		case dup:
			if r.Err != nil || r.Joined.Added {
				t.Errorf("join %d (again): %+v, want no error and not added (the first reports it)", i, r)
			}
		case retired:
			if r.Err != nil || r.Joined.Added || !r.Joined.Retired() || r.Joined.RetiredWhy != "moved away" {
				t.Errorf("join %d (a retired feeder): %+v, want it left retired and said", i, r)
			}
		default:
			if r.Err != nil || !r.Joined.Added || r.Joined.Retired() {
				t.Errorf("join %d (%s): %+v, want added", i, js[i].Table, r)
			}
		}
	}
	for i := range 40 {
		fs, err := s.Feeders(ctx, js[i].Table)
		if err != nil {
			t.Fatal(err)
		}
		switch {
		case i == bad && len(fs) != 0:
			t.Errorf("%s: feeders %+v after a refused join", js[i].Table, fs)
		case i != bad && (len(fs) != 1 || fs[0].Feeder != js[i].Query || fs[0].QueryName != js[i].Name):
			t.Errorf("%s: feeders %+v, want %s named %s", js[i].Table, fs, js[i].Query, js[i].Name)
		}
	}
	// The solo table was promoted: the new query holds it before it
	// reports.
	if got, moved := feed(t, s, "silver.solo", "q-solo", "solo", at(14, 0)); moved || !got.Equal(at(12, 0)) {
		t.Fatalf("silver.solo moved to %v (moved %v) while q-new, joined, has not reported", got, moved)
	}
}

// TestJoinFeedersAgainWritesNothing: joining a feeder the table knows
// already is a read. Before batching, the upsert's conflict arm locked the
// row (a write: a transaction id and a WAL flush at commit) on every
// tracker start, so a restart of 10,000 runs waited for 10,000 flushes.
func TestJoinFeedersAgainWritesNothing(t *testing.T) {
	s, url := newStore(t, Options{})
	ctx := context.Background()
	conn := connect(t, url)
	xmax := func(table, query string) string {
		t.Helper()
		var x string
		if err := conn.QueryRow(ctx, `SELECT xmax::text FROM `+s.n.feeds+` WHERE table_name = $1 AND feeder = $2`, table, query).Scan(&x); err != nil {
			t.Fatal(err)
		}
		return x
	}
	js := []FeederJoin{{Table: "silver.a", Query: "qa", Name: "a"}, {Table: "silver.b", Query: "qb"}}
	for _, r := range s.JoinFeeders(ctx, js) {
		if r.Err != nil || !r.Joined.Added {
			t.Fatalf("first join: %+v", r)
		}
	}
	if x := xmax("silver.a", "qa"); x != "0" {
		t.Fatalf("xmax %s after the insert", x)
	}
	for range 2 {
		for _, r := range s.JoinFeeders(ctx, js) {
			if r.Err != nil || r.Joined.Added {
				t.Fatalf("join again: %+v", r)
			}
		}
		if x := xmax("silver.a", "qa"); x != "0" {
			t.Fatalf("joining again locked the feeder row (xmax %s): a write per tracker start", x)
		}
	}
	// A name learnt later is still recorded.
	if r := s.JoinFeeders(ctx, []FeederJoin{{Table: "silver.b", Query: "qb", Name: "b"}}); r[0].Err != nil {
		t.Fatal(r[0].Err)
	}
	if fs, err := s.Feeders(ctx, "silver.b"); err != nil || len(fs) != 1 || fs[0].QueryName != "b" {
		t.Fatalf("silver.b: %+v, %v; want its name recorded", fs, err)
	}
}

// TestSaveTracksOneBadAmongGood: a batch of tracks where the database
// refuses one (a spec with a NUL character, which jsonb cannot hold)
// saves every other track, and only the bad one carries an error; a track
// of the same run and table later in the batch wins, as it would saved
// one after the other; an invalid one is refused before the batch is
// sent.
func TestSaveTracksOneBadAmongGood(t *testing.T) {
	s, _ := newStore(t, Options{})
	ctx := context.Background()
	created := time.Date(2026, 9, 28, 10, 0, 0, 0, time.UTC)
	var ts []Track
	for i := range 30 {
		ts = append(ts, Track{QueryID: fmt.Sprintf("q%02d", i), RunID: fmt.Sprintf("r%02d", i), Table: fmt.Sprintf("silver.t%02d", i),
			Spec: json.RawMessage(`{"granularity":"hour"}`), CreatedAt: created})
	}
	const bad, invalid, later = 11, 30, 31
	ts[bad].Spec = json.RawMessage(`{"granularity":"\u0000"}`)
	ts = append(ts,
		Track{RunID: "r99", Table: "silver.t99"}, // no query id
		Track{QueryID: "q05-new", RunID: ts[5].RunID, Table: ts[5].Table, Spec: json.RawMessage(`{"granularity":"day"}`)},
	)
	errs := s.SaveTracks(ctx, ts)
	for i, err := range errs {
		switch i {
		case bad:
			if err == nil {
				t.Errorf("track %d (a spec jsonb refuses): no error", i)
			}
		case invalid:
			if !errors.Is(err, ErrInvalidTrack) {
				t.Errorf("track %d (no query id): %v, want ErrInvalidTrack", i, err)
			}
		default:
			if err != nil {
				t.Errorf("track %d: %v", i, err)
			}
		}
	}
	got, err := s.Tracks(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 29 {
		t.Fatalf("%d tracks saved, want 29 (30 less the refused one)", len(got))
	}
	for _, tr := range got {
		switch tr.RunID {
		case ts[bad].RunID:
			t.Errorf("the refused track was saved: %+v", tr)
		case ts[5].RunID:
			if tr.QueryID != "q05-new" || string(tr.Spec) != `{"granularity": "day"}` {
				t.Errorf("track of %s: %+v, want the later one's query and spec", tr.RunID, tr)
			}
		default:
			if !tr.CreatedAt.Equal(created) {
				t.Errorf("track of %s created at %v, want %v", tr.RunID, tr.CreatedAt, created)
			}
		}
	}
}

// TestKnownJoinsTakeNoLock (ADR 0023 addendum): a group of joins whose
// feeders the tables know already is answered by one read, without the
// tables' advisory locks, so a restart's joins never wait behind an
// advance that holds one of them; a join that must write (a new feeder,
// a name to record, a solo table to promote) still waits for the lock.
// Retired feeders are still reported. Before, every join of the group
// waited for the lock another session held.
func TestKnownJoinsTakeNoLock(t *testing.T) {
	s, url := newStore(t, Options{})
	ctx := context.Background()
	js := []FeederJoin{{Table: "silver.a", Query: "qa", Name: "a"}, {Table: "silver.b", Query: "qb"}, {Table: "silver.c", Query: "qc", Name: "c"}}
	for _, r := range s.JoinFeeders(ctx, js) {
		if r.Err != nil || !r.Joined.Added {
			t.Fatalf("first join: %+v", r)
		}
	}
	if _, _, _, err := s.RetireFeeder(ctx, "silver.c", "qc", "test"); err != nil {
		t.Fatal(err)
	}
	// silver.d is solo with query qd (its first advance); qe's join must
	// promote it.
	if _, _, err := s.Advance(ctx, Advance{Table: "silver.d", QueryID: "qd", FinalizedUntil: at(12, 0), EndTime: at(12, 5), RunID: "r", BatchID: 1}); err != nil {
		t.Fatal(err)
	}
	holder := connect(t, url)
	for _, table := range []string{"silver.a", "silver.b", "silver.c", "silver.d"} {
		if _, err := holder.Exec(ctx, `SELECT pg_advisory_lock(hashtextextended($1 || $2, 0))`, s.n.table, table); err != nil {
			t.Fatal(err)
		}
	}
	before := s.Stats().KnownJoins
	qctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	res := s.JoinFeeders(qctx, append(js, FeederJoin{Table: "silver.a", Query: "qa"}))
	cancel()
	for i, r := range res {
		if r.Err != nil || r.Joined.Added {
			t.Fatalf("join %d of known feeders while their tables' locks are held: %+v", i, r)
		}
		if r.Joined.Retired() != (js[i%len(js)].Query == "qc") {
			t.Fatalf("join %d: %+v, want retired only for qc", i, r)
		}
	}
	if got := s.Stats().KnownJoins - before; got != 3 {
		t.Fatalf("%d joins known, want 3", got)
	}
	// Joins that write wait for the lock: a name to record, a new feeder,
	// a solo table another query joins.
	for _, j := range []FeederJoin{{Table: "silver.b", Query: "qb", Name: "b"}, {Table: "silver.a", Query: "qz"}, {Table: "silver.d", Query: "qe"}} {
		done := make(chan JoinedResult, 1)
		go func() { done <- s.JoinFeeders(ctx, []FeederJoin{j})[0] }()
		select {
		case r := <-done:
			t.Fatalf("join %+v did not wait for its table's lock: %+v", j, r)
		case <-time.After(300 * time.Millisecond):
		}
		if _, err := holder.Exec(ctx, `SELECT pg_advisory_unlock(hashtextextended($1 || $2, 0))`, s.n.table, j.Table); err != nil {
			t.Fatal(err)
		}
		if r := <-done; r.Err != nil || !r.Joined.Added && j.Name == "" {
			t.Fatalf("join %+v: %+v", j, r)
		}
		if _, err := holder.Exec(ctx, `SELECT pg_advisory_lock(hashtextextended($1 || $2, 0))`, s.n.table, j.Table); err != nil {
			t.Fatal(err)
		}
	}
	if fs, err := s.Feeders(ctx, "silver.b"); err != nil || len(fs) != 1 || fs[0].QueryName != "b" {
		t.Fatalf("silver.b: %+v, %v; want its name recorded", fs, err)
	}
	if fs, err := s.Feeders(ctx, "silver.d"); err != nil || len(fs) != 2 {
		t.Fatalf("silver.d: %+v, %v; want qd and qe (promoted)", fs, err)
	}
}
