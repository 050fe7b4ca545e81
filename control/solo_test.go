package control

import (
	"context"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
)

// rowVersion is the xmin of table's row in the control table ("" without
// a row) and of each of its rows in the feeders table: what changes when a
// row is written.
func rowVersions(t *testing.T, s *Store, conn *pgx.Conn, table string) (string, string) {
	t.Helper()
	ctx := context.Background()
	var c, f string
	if err := conn.QueryRow(ctx, `SELECT coalesce((SELECT xmin::text FROM `+s.n.table+` WHERE table_name = $1), ''),
		coalesce((SELECT string_agg(feeder || ':' || xmin::text, ',' ORDER BY feeder) FROM `+s.n.feeds+` WHERE table_name = $1), '')`,
		table).Scan(&c, &f); err != nil {
		t.Fatal(err)
	}
	return c, f
}

// soloOf reads the table's solo flag.
func soloOf(t *testing.T, s *Store, conn *pgx.Conn, table string) bool {
	t.Helper()
	var solo bool
	if err := conn.QueryRow(context.Background(), `SELECT solo FROM `+s.n.table+` WHERE table_name = $1`, table).Scan(&solo); err != nil {
		t.Fatal(err)
	}
	return solo
}

// TestSoloAdvanceWritesOneRow: a table with one feeder costs what it cost
// before feeders existed: after its first verdict, each advance is the
// sole statement, which writes the table's row and nothing in the feeders
// table, in single advances and in a group commit; the status still shows
// the feeder at the table's verdict.
func TestSoloAdvanceWritesOneRow(t *testing.T) {
	s, url := newStore(t, Options{})
	ctx := context.Background()
	conn := connect(t, url)
	feed(t, s, "solo.t", "q", "region-us", at(12, 0))
	if !soloOf(t, s, conn, "solo.t") {
		t.Fatal("a table with one feeder is not solo after its first verdict")
	}
	_, feedsBefore := rowVersions(t, s, conn, "solo.t")
	st0 := s.Stats()
	for h := 13; h <= 15; h++ {
		tableBefore, _ := rowVersions(t, s, conn, "solo.t")
		if got, moved := feed(t, s, "solo.t", "q", "region-us", at(h, 0)); !moved || !got.Equal(at(h, 0)) {
			t.Fatalf("advance to %d:00: %v, moved %v", h, got, moved)
		}
		if tableAfter, _ := rowVersions(t, s, conn, "solo.t"); tableAfter == tableBefore {
			t.Fatalf("the table's row was not written by a move")
		}
	}
	res, err := s.AdvanceBatch(ctx, []Advance{
		{Table: "solo.t", QueryID: "q", FinalizedUntil: at(16, 0)},
		{Table: "solo.u", QueryID: "q", FinalizedUntil: at(16, 0)}, // a first verdict: through the feeders table
	})
	if err != nil || res[0].Err != nil || !res[0].Moved || res[1].Err != nil || !res[1].Moved {
		t.Fatalf("group commit: %+v, %v", res, err)
	}
	if _, feedsAfter := rowVersions(t, s, conn, "solo.t"); feedsAfter != feedsBefore {
		t.Errorf("single-feeder advances wrote the feeders table: %s -> %s", feedsBefore, feedsAfter)
	}
	st := s.Stats()
	if n := st.AdvanceStatements - st0.AdvanceStatements; n != 1 {
		t.Errorf("%d shared transactions, want 1 (solo.u's first verdict)", n)
	}
	if n := st.SoleStatements - st0.SoleStatements; n != 4 {
		t.Errorf("%d sole statements, want 4", n)
	}
	fs, err := s.Feeders(ctx, "solo.t")
	if err != nil || len(fs) != 1 || fs[0].Feeder != "q" || fs[0].QueryName != "region-us" || !fs[0].FinalizedUntil.Equal(at(16, 0)) {
		t.Fatalf("feeders of a solo table = %+v, %v; want q (region-us) at 16:00", fs, err)
	}
	// A no-op is a read of the one row.
	tableBefore, _ := rowVersions(t, s, conn, "solo.t")
	if got, moved := feed(t, s, "solo.t", "q", "", at(15, 0)); moved || !got.Equal(at(16, 0)) {
		t.Fatalf("an older candidate: %v, moved %v", got, moved)
	}
	if tableAfter, _ := rowVersions(t, s, conn, "solo.t"); tableAfter != tableBefore {
		t.Errorf("a no-op wrote the table's row")
	}
}

// TestSoloToSharedAndBack: a second query makes a solo table shared, its
// first feeder's watermark carried into the feeders table; the table
// holds at the slower one; once the other is retired and the table moves,
// it is solo again, and an un-retired feeder makes it shared again.
func TestSoloToSharedAndBack(t *testing.T) {
	s, url := newStore(t, Options{})
	ctx := context.Background()
	conn := connect(t, url)
	feed(t, s, "t", "a", "", at(12, 0))
	feed(t, s, "t", "a", "", at(14, 0)) // sole statement: only the table's row knows 14:00
	if got, moved := feed(t, s, "t", "b", "", at(13, 0)); moved || !got.Equal(at(14, 0)) {
		t.Fatalf("b joining behind: %v, moved %v", got, moved)
	}
	if soloOf(t, s, conn, "t") {
		t.Fatal("still solo with two feeders")
	}
	fs, err := s.Feeders(ctx, "t")
	if err != nil || len(fs) != 2 || !fs[0].FinalizedUntil.Equal(at(14, 0)) || !fs[1].FinalizedUntil.Equal(at(13, 0)) {
		t.Fatalf("feeders = %+v, %v; want a at 14:00 (carried from the table), b at 13:00", fs, err)
	}
	if got, moved := feed(t, s, "t", "a", "", at(16, 0)); moved || !got.Equal(at(14, 0)) {
		t.Fatalf("a at 16:00, b at 13:00: %v, moved %v; want held at 14:00", got, moved)
	}
	if got, moved := feed(t, s, "t", "b", "", at(15, 0)); !moved || !got.Equal(at(15, 0)) {
		t.Fatalf("b at 15:00: %v, moved %v", got, moved)
	}
	if _, v, moved, err := s.RetireFeeder(ctx, "t", "b", "test"); err != nil || !moved || !v.FinalizedUntil.Equal(at(16, 0)) {
		t.Fatalf("retire b: %v, moved %v, %v; want 16:00 (a)", v.FinalizedUntil, moved, err)
	}
	if !soloOf(t, s, conn, "t") {
		t.Fatal("not solo again after the table moved to its one active feeder")
	}
	if got, moved := feed(t, s, "t", "a", "", at(17, 0)); !moved || !got.Equal(at(17, 0)) {
		t.Fatalf("a alone at 17:00: %v, moved %v", got, moved)
	}
	back, v, err := s.UnretireFeeder(ctx, "t", "b", "rerun", "ops")
	if err != nil || len(back) != 1 || back[0].Feeder != "b" || !v.FinalizedUntil.Equal(at(17, 0)) {
		t.Fatalf("unretire b: %+v, %v, %v", back, v, err)
	}
	if soloOf(t, s, conn, "t") {
		t.Fatal("solo with an un-retired feeder")
	}
	if es, err := s.Audit(ctx, "t", 10); err != nil || len(es) != 1 || es[0].Action != ActionUnretire || es[0].By != "ops" ||
		es[0].FromQueryID != "b" || !strings.Contains(es[0].Reason, "rerun") || !es[0].To.Equal(at(17, 0)) {
		t.Errorf("audit of the unretire = %+v, %v", es, err)
	}
	if got, moved := feed(t, s, "t", "a", "", at(18, 0)); moved || !got.Equal(at(17, 0)) {
		t.Fatalf("a at 18:00 with b back at 15:00: %v, moved %v; want held at 17:00", got, moved)
	}
	if _, _, err := s.UnretireFeeder(ctx, "t", "b", "", "ops"); err == nil {
		t.Error("unretiring an active feeder succeeded")
	}
}

// TestJoinRacesSoleAdvance closes the race of a second feeder joining in
// the instant the first advances a solo table, in both orders, forced with
// the table row's lock held by another session: the join's promotion and
// the sole statement both wait on it. Whichever commits first, the table
// never runs ahead of the joined feeder once its join has returned, and
// the first feeder's advance is never lost.
func TestJoinRacesSoleAdvance(t *testing.T) {
	for _, joinFirst := range []bool{false, true} {
		name := "advance first"
		if joinFirst {
			name = "join first"
		}
		t.Run(name, func(t *testing.T) {
			s, url := newStore(t, Options{})
			ctx := context.Background()
			feed(t, s, "t", "a", "", at(12, 0))
			feed(t, s, "t", "a", "", at(13, 0))
			other := connect(t, url)
			tx, err := other.Begin(ctx)
			if err != nil {
				t.Fatal(err)
			}
			defer func() { _ = tx.Rollback(ctx) }()
			if _, err := tx.Exec(ctx, "SELECT FROM "+s.n.table+" WHERE table_name = 't' FOR UPDATE"); err != nil {
				t.Fatal(err)
			}
			monitor := connect(t, url)
			waiting := func(n int) func() bool {
				return func() bool {
					var w int
					if err := monitor.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()
						AND wait_event_type = 'Lock' AND application_name = $1`, DefaultApplicationName).Scan(&w); err != nil {
						t.Fatal(err)
					}
					return w >= n
				}
			}
			type result struct {
				v     Verdict
				moved bool
				err   error
			}
			advanced := make(chan result, 1)
			joined := make(chan error, 1)
			advance := func() {
				go func() {
					v, moved, err := s.Advance(ctx, Advance{Table: "t", QueryID: "a", FinalizedUntil: at(15, 0)})
					advanced <- result{v, moved, err}
				}()
			}
			join := func() {
				go func() {
					_, err := s.JoinFeeder(ctx, "t", "b", "region-eu")
					joined <- err
				}()
			}
			if joinFirst {
				join()
				eventually(t, "the join to wait for the row", waiting(1))
				advance()
			} else {
				advance()
				eventually(t, "the advance to wait for the row", waiting(1))
				join()
			}
			eventually(t, "both to wait", waiting(2))
			if err := tx.Rollback(ctx); err != nil {
				t.Fatal(err)
			}
			r := <-advanced
			if err := <-joined; err != nil {
				t.Fatal(err)
			}
			if r.err != nil {
				t.Fatal(r.err)
			}
			fs, err := s.Feeders(ctx, "t")
			if err != nil || len(fs) != 2 {
				t.Fatalf("feeders = %+v, %v", fs, err)
			}
			if !fs[0].FinalizedUntil.Equal(at(15, 0)) {
				t.Errorf("a's watermark = %v, want 15:00: its advance was lost", fs[0].FinalizedUntil)
			}
			got := verdictOf(t, s, "t")
			if joinFirst {
				// b joined before a's advance: b, which has not reported,
				// holds the table at 13:00.
				if r.moved || !got.Equal(at(13, 0)) {
					t.Errorf("table at %v (moved %v), want held at 13:00 by b", got, r.moved)
				}
			} else if !r.moved || !got.Equal(at(15, 0)) {
				// a's advance committed before b joined: b joins behind.
				t.Errorf("table at %v (moved %v), want 15:00", got, r.moved)
			}
			// From now on b holds the table until it passes it.
			if got, moved := feed(t, s, "t", "a", "", at(16, 0)); moved || got.After(at(15, 0)) {
				t.Errorf("a at 16:00 with b not reported: %v, moved %v", got, moved)
			}
			if got, _ := feed(t, s, "t", "b", "", at(17, 0)); !got.Equal(at(16, 0)) {
				t.Errorf("b at 17:00: table %v, want 16:00 (a)", got)
			}
		})
	}
}

// TestMigrateSolo: migration 5 makes solo exactly the tables whose one
// active feeder is the table's own query at the table's verdict; the
// others stay on the feeders table and still hold.
func TestMigrateSolo(t *testing.T) {
	s, url := newStore(t, Options{})
	conn := connect(t, url)
	ctx := context.Background()
	feed(t, s, "one", "q", "", at(12, 0))
	feed(t, s, "two", "q", "", at(12, 0))
	feed(t, s, "two", "r", "", at(14, 0))
	// As a version-4 database had them: no solo flag set anywhere, every
	// feeder's row current.
	if _, err := conn.Exec(ctx, `UPDATE `+s.n.feeds+` f SET finalized_until = c.finalized_until FROM `+s.n.table+` c
		WHERE f.table_name = c.table_name AND c.solo;
		UPDATE `+s.n.table+` SET solo = false;
		ALTER TABLE `+s.n.table+` DROP COLUMN solo;
		DELETE FROM `+s.n.schema+` WHERE version >= 5`); err != nil {
		t.Fatal(err)
	}
	s.Close()
	s = openStore(t, url, Options{})
	if err := s.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	if !soloOf(t, s, conn, "one") || soloOf(t, s, conn, "two") {
		t.Errorf("solo after migration: one %v, two %v; want true, false", soloOf(t, s, conn, "one"), soloOf(t, s, conn, "two"))
	}
	if got, _ := feed(t, s, "two", "r", "", at(16, 0)); !got.Equal(at(12, 0)) {
		t.Errorf("two after r at 16:00: %v, want held at 12:00 by q", got)
	}
	if got, moved := feed(t, s, "one", "q", "", at(13, 0)); !moved || !got.Equal(at(13, 0)) {
		t.Errorf("one: %v, moved %v", got, moved)
	}
}
