package control

import (
	"context"
	"encoding/json"
	"errors"
	"reflect"
	"testing"
	"time"
)

// rewindTo rewinds table to to and returns the row's rewound_at.
func rewindTo(t *testing.T, s *Store, table string, to time.Time) time.Time {
	t.Helper()
	ctx := context.Background()
	if _, err := s.Rewind(ctx, Rewind{Table: table, To: to, Reason: "test", By: "test"}); err != nil {
		t.Fatal(err)
	}
	v, err := s.Get(ctx, table)
	if err != nil || v.RewoundAt.IsZero() {
		t.Fatalf("after the rewind: %+v, %v", v, err)
	}
	return v.RewoundAt
}

// snapshot is a table's row and its feeder rows, to compare before and
// after an advance that must move nothing.
type snapshot struct {
	v  Verdict
	fs []Feeder
}

func snap(t *testing.T, s *Store, table string) snapshot {
	t.Helper()
	ctx := context.Background()
	v, err := s.Get(ctx, table)
	if err != nil {
		t.Fatal(err)
	}
	fs, err := s.Feeders(ctx, table)
	if err != nil {
		t.Fatal(err)
	}
	return snapshot{v, fs}
}

// guardSetup makes the tables of one path of TestARefusedAdvanceMovesNothing:
// each rewound to 12:00 (rewound_at returned), then standing at 12:30,
// solo (q1) or, with shared, fed by q1 and q2.
func guardSetup(t *testing.T, s *Store, shared bool, tables ...string) map[string]time.Time {
	t.Helper()
	ctx := context.Background()
	rewound := map[string]time.Time{}
	for _, table := range tables {
		if _, _, err := s.Advance(ctx, Advance{Table: table, FinalizedUntil: at(15, 0), QueryID: "q1"}); err != nil { // solo
			t.Fatal(err)
		}
		if shared {
			if _, _, err := s.Advance(ctx, Advance{Table: table, FinalizedUntil: at(15, 0), QueryID: "q2"}); err != nil {
				t.Fatal(err)
			}
		}
		rewound[table] = rewindTo(t, s, table, at(12, 0))
		// Forward again, by advances that knew the rewind: a table with
		// one feeder is solo again once it moves.
		as := []Advance{{Table: table, FinalizedUntil: at(12, 30), QueryID: "q1", Guard: KnownRewind(rewound[table])}}
		if shared {
			as = append(as, Advance{Table: table, FinalizedUntil: at(12, 30), QueryID: "q2", Guard: KnownRewind(rewound[table])})
		}
		res, err := s.AdvanceBatch(ctx, as)
		if err != nil || res[0].Err != nil || !res[0].Moved {
			t.Fatalf("%s: advance after the rewind: %+v, %v", table, res, err)
		}
		v, err := s.Get(ctx, table)
		if err != nil || !v.FinalizedUntil.Equal(at(12, 30)) || !v.RewoundAt.Equal(rewound[table]) {
			t.Fatalf("%s: %+v, %v", table, v, err)
		}
	}
	return rewound
}

// TestARefusedAdvanceMovesNothing: an advance whose known rewind is older
// than the table's rewound_at (it knew of none, or of an earlier rewind)
// is refused by each way an advance is written: the sole statement of a
// group, encoded here (soleDirect) or by pgx, the one-advance sole
// statement (soleOne), and the advance statement of a table with two
// feeders. It returns ErrBeforeRewind with the row's rewound_at, and the
// table's row and its feeder rows are as they were. The same advance
// knowing the rewind moves as before, and so does one that guards
// nothing.
func TestARefusedAdvanceMovesNothing(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		name   string
		direct bool
		tables []string // advanced together, one group
		shared bool
	}{
		{name: "sole direct", direct: true, tables: []string{"a", "b"}},
		{name: "sole pgx", tables: []string{"a", "b"}},
		{name: "soleOne", tables: []string{"a"}},
		{name: "shared", tables: []string{"a"}, shared: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, _ := newStore(t, Options{})
			s.direct = tc.direct
			rewound := guardSetup(t, s, tc.shared, tc.tables...)
			// A second rewind: an advance that knew the first is refused
			// as one that knew none is.
			first := map[string]time.Time{}
			for _, table := range tc.tables {
				first[table] = rewound[table]
				rewound[table] = rewindTo(t, s, table, at(12, 15))
				// Forward again, so that each stands before the
				// candidate, solo again unless shared.
				as := []Advance{{Table: table, FinalizedUntil: at(12, 30), QueryID: "q1", Guard: KnownRewind(rewound[table])}}
				if tc.shared {
					as = append(as, Advance{Table: table, FinalizedUntil: at(12, 30), QueryID: "q2", Guard: KnownRewind(rewound[table])})
				}
				if res, err := s.AdvanceBatch(ctx, as); err != nil || res[0].Err != nil {
					t.Fatalf("%+v, %v", res, err)
				}
			}
			batch := func(guard func(table string) RewindGuard) []Advance {
				var as []Advance
				for _, table := range tc.tables {
					as = append(as, Advance{Table: table, FinalizedUntil: at(17, 0), EndTime: at(17, 5), QueryID: "q1", RunID: "old",
						EndOffset: json.RawMessage(`{"x":1}`), Sources: []string{"src"}, Guard: guard(table)})
					if tc.shared {
						as = append(as, Advance{Table: table, FinalizedUntil: at(17, 0), QueryID: "q2", RunID: "old2", Guard: guard(table)})
					}
				}
				return as
			}
			send := func(as []Advance) []AdvanceResult {
				t.Helper()
				if len(as) == 1 {
					v, moved, err := s.Advance(ctx, as[0])
					return []AdvanceResult{{Verdict: v, Moved: moved, Err: err}}
				}
				res, err := s.AdvanceBatch(ctx, as)
				if err != nil {
					t.Fatal(err)
				}
				return res
			}
			before := map[string]snapshot{}
			for _, table := range tc.tables {
				before[table] = snap(t, s, table)
			}
			for _, stale := range []struct {
				name  string
				guard func(table string) RewindGuard
			}{
				{"knew none", func(string) RewindGuard { return KnownRewind(time.Time{}) }},
				{"knew the first rewind", func(table string) RewindGuard { return KnownRewind(first[table]) }},
			} {
				directBefore := s.stats.direct.Load()
				for i, r := range send(batch(stale.guard)) {
					if !errors.Is(r.Err, ErrBeforeRewind) || r.Moved || !r.Verdict.RewoundAt.Equal(rewound[r.Verdict.Table]) {
						t.Errorf("%s: result %d = %+v, want ErrBeforeRewind with rewound_at %s", stale.name, i, r, rewound[r.Verdict.Table])
					}
				}
				if tc.direct && s.stats.direct.Load() == directBefore {
					t.Errorf("%s: the group did not take soleDirect", stale.name)
				}
				for _, table := range tc.tables {
					if got := snap(t, s, table); !reflect.DeepEqual(got, before[table]) {
						t.Errorf("%s: %s changed:\n%+v\nwas\n%+v", stale.name, table, got, before[table])
					}
				}
			}
			// Knowing the rewind, it moves.
			for i, r := range send(batch(func(table string) RewindGuard { return KnownRewind(rewound[table]) })) {
				if r.Err != nil || (i == 0 || !tc.shared) && !r.Moved {
					t.Errorf("knowing the rewind: result %d = %+v", i, r)
				}
			}
			for _, table := range tc.tables {
				if v, err := s.Get(ctx, table); err != nil || !v.FinalizedUntil.Equal(at(17, 0)) {
					t.Errorf("%s after an advance that knew the rewind: %+v, %v", table, v, err)
				}
			}
			// Unguarded, it moves as before.
			as := batch(func(string) RewindGuard { return RewindGuard{} })
			for i := range as {
				as[i].FinalizedUntil = at(18, 0)
			}
			for i, r := range send(as) {
				if r.Err != nil || (i == 0 || !tc.shared) && !r.Moved {
					t.Errorf("unguarded: result %d = %+v", i, r)
				}
			}
		})
	}
}

// TestAGuardedAdvanceOfANewTableMoves: a tracker that knew of no rewind
// writes a table's first verdict, and advances a table never rewound.
func TestAGuardedAdvanceOfANewTableMoves(t *testing.T) {
	s, _ := newStore(t, Options{})
	ctx := context.Background()
	for _, until := range []time.Time{at(10, 0), at(11, 0)} {
		if _, moved, err := s.Advance(ctx, Advance{Table: "t", FinalizedUntil: until, QueryID: "q", Guard: KnownRewind(time.Time{})}); err != nil || !moved {
			t.Fatalf("%s: moved %v, %v", until, moved, err)
		}
	}
}

// lockWaiters counts the sessions of the test's database waiting for a
// lock.
func lockWaiters(t *testing.T, s *Store) int {
	t.Helper()
	var n int
	if err := s.pool.QueryRow(context.Background(), `SELECT count(*) FROM pg_stat_activity
WHERE datname = current_database() AND wait_event_type = 'Lock'`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// TestAnAdvanceInFlightWhenARewindCommitsMovesNothing is the review's
// window (ADR 0019, the eighth pass's review, "a statement in flight"),
// made deterministic: a reader holds the table's row (SELECT ... FOR
// SHARE in an open transaction); a rewind starts and waits for it; an
// advance decided before the rewind (it knew of none) starts and waits
// too; the reader commits. The rewind commits first and the advance,
// re-checked on the row as the rewind left it, moves nothing: the verdict
// stays at the rewind's target. Without the guard in the statements the
// advance applied on top of the rewind (17:00 after a rewind to 12:00),
// for a solo table (the one-advance sole statement, then the advance
// statement it falls back to) and for a table with two feeders (a group
// through the advance statement).
func TestAnAdvanceInFlightWhenARewindCommitsMovesNothing(t *testing.T) {
	for _, shared := range []bool{false, true} {
		name := "solo"
		if shared {
			name = "two feeders"
		}
		t.Run(name, func(t *testing.T) {
			s, url := newStore(t, Options{LockWait: 30 * time.Second})
			ctx := context.Background()
			if _, _, err := s.Advance(ctx, Advance{Table: "t", FinalizedUntil: at(15, 0), QueryID: "q1"}); err != nil {
				t.Fatal(err)
			}
			as := []Advance{{Table: "t", FinalizedUntil: at(17, 0), QueryID: "q1", Guard: KnownRewind(time.Time{})}}
			if shared {
				if _, _, err := s.Advance(ctx, Advance{Table: "t", FinalizedUntil: at(15, 0), QueryID: "q2"}); err != nil {
					t.Fatal(err)
				}
				as = append(as, Advance{Table: "t", FinalizedUntil: at(17, 0), QueryID: "q2", Guard: KnownRewind(time.Time{})})
			}
			reader := connect(t, url)
			tx, err := reader.Begin(ctx)
			if err != nil {
				t.Fatal(err)
			}
			defer func() { _ = tx.Rollback(ctx) }()
			if _, err := tx.Exec(ctx, `SELECT * FROM table_finalization WHERE table_name = 't' FOR SHARE`); err != nil {
				t.Fatal(err)
			}

			rewound := make(chan error, 1)
			go func() {
				_, err := s.Rewind(ctx, Rewind{Table: "t", To: at(12, 0), Reason: "reset", By: "test"})
				rewound <- err
			}()
			eventually(t, "the rewind to wait for the reader", func() bool { return lockWaiters(t, s) == 1 })
			advanced := make(chan []AdvanceResult, 1)
			go func() {
				if len(as) == 1 {
					v, moved, err := s.Advance(ctx, as[0])
					advanced <- []AdvanceResult{{Verdict: v, Moved: moved, Err: err}}
					return
				}
				res, err := s.AdvanceBatch(ctx, as)
				if err != nil {
					res = []AdvanceResult{{Err: err}}
				}
				advanced <- res
			}()
			eventually(t, "the advance to wait", func() bool { return lockWaiters(t, s) == 2 })
			if err := tx.Commit(ctx); err != nil {
				t.Fatal(err)
			}
			if err := <-rewound; err != nil {
				t.Fatalf("rewind: %v", err)
			}
			res := <-advanced
			v, err := s.Get(ctx, "t")
			if err != nil {
				t.Fatal(err)
			}
			if !v.FinalizedUntil.Equal(at(12, 0)) {
				t.Fatalf("the verdict after the rewind to 12:00 is %s: the advance in flight applied on top of it (%+v)", v.FinalizedUntil, res)
			}
			for i, r := range res {
				if !errors.Is(r.Err, ErrBeforeRewind) || r.Moved || !r.Verdict.RewoundAt.Equal(v.RewoundAt) {
					t.Errorf("result %d = %+v, want ErrBeforeRewind with rewound_at %s", i, r, v.RewoundAt)
				}
			}
			fs, err := s.Feeders(ctx, "t")
			if err != nil {
				t.Fatal(err)
			}
			for _, f := range fs {
				if f.FinalizedUntil.After(at(12, 0)) {
					t.Errorf("feeder %s stands at %s after the rewind to 12:00", f.Feeder, f.FinalizedUntil)
				}
			}
		})
	}
}

// TestARewindsNotificationCarriesItsRewoundAt: the rewind's payload says
// the rewound_at it stored, to the microsecond, and Watch hands it over;
// a forward move's payload is as it was (TestRewind checks it byte for
// byte).
func TestARewindsNotificationCarriesItsRewoundAt(t *testing.T) {
	s, _ := newStore(t, Options{})
	advance(t, s, "t", at(15, 0))
	got := make(chan Notification, 16)
	stop, err := s.Watch(func(n Notification) {
		if n.Rewound {
			got <- n
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	// The LISTEN connection is up once a move is heard.
	moved := make(chan struct{})
	stopMoves, err := s.Watch(func(n Notification) {
		if n.Table == "t" && !n.Rewound {
			select {
			case moved <- struct{}{}:
			default:
			}
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	defer stopMoves()
	eventually(t, "the LISTEN connection", func() bool {
		advance(t, s, "t", time.Now().Truncate(time.Second))
		select {
		case <-moved:
			return true
		case <-time.After(50 * time.Millisecond):
			return false
		}
	})
	ra := rewindTo(t, s, "t", at(12, 0))
	select {
	case n := <-got:
		if n.Table != "t" || !n.RewoundAt.Equal(ra) || !n.FinalizedUntil.Equal(at(12, 0)) {
			t.Errorf("notification = %+v, want rewound_at %s", n, ra)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no rewind notification")
	}
}
