package control

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/finalizer-dev/finalizer/internal/pgcluster/pgtest"
)

// feed advances table's feeder query (named name) to until and returns
// the table's verdict and whether it moved.
func feed(t *testing.T, s *Store, table, query, name string, until time.Time) (time.Time, bool) {
	t.Helper()
	v, moved, err := s.Advance(context.Background(), Advance{Table: table, QueryID: query, QueryName: name,
		FinalizedUntil: until, EndTime: until.Add(5 * time.Minute), RunID: "run-" + query, BatchID: until.Unix()})
	if err != nil {
		t.Fatal(err)
	}
	if v.Table != table {
		t.Fatalf("advance of %s returned the verdict of %q", table, v.Table)
	}
	return v.FinalizedUntil, moved
}

// verdictOf returns the table's finalized_until, zero without a row.
func verdictOf(t *testing.T, s *Store, table string) time.Time {
	t.Helper()
	v, err := s.Get(context.Background(), table)
	if errors.Is(err, ErrNotFound) {
		return time.Time{}
	}
	if err != nil {
		t.Fatal(err)
	}
	return v.FinalizedUntil
}

// TestSeveralFeedersHoldTheTable is the scenario: region-us has
// committed up to 12:30, region-eu up to 14:05, hourly periods. The table
// is final until 12:00, not 14:00, and follows region-us until it passes
// region-eu.
func TestSeveralFeedersHoldTheTable(t *testing.T) {
	s, url := newStore(t, Options{})
	ctx := context.Background()
	lc := connect(t, url)
	if _, err := lc.Exec(ctx, "LISTEN "+NotifyChannel); err != nil {
		t.Fatal(err)
	}
	const table = "silver.all"
	if got, moved := feed(t, s, table, "us-id", "region-us", at(12, 0)); !moved || !got.Equal(at(12, 0)) {
		t.Fatalf("first feeder: %v, moved %v", got, moved)
	}
	if got, moved := feed(t, s, table, "eu-id", "region-eu", at(14, 0)); moved || !got.Equal(at(12, 0)) {
		t.Fatalf("region-eu at 14:00 moved the table to %v (moved %v); region-us holds it at 12:00", got, moved)
	}
	if got, moved := feed(t, s, table, "us-id", "region-us", at(13, 0)); !moved || !got.Equal(at(13, 0)) {
		t.Fatalf("region-us at 13:00: %v, moved %v", got, moved)
	}
	// region-us passes region-eu: the table stops at region-eu's 14:00.
	if got, moved := feed(t, s, table, "us-id", "region-us", at(15, 0)); !moved || !got.Equal(at(14, 0)) {
		t.Fatalf("region-us at 15:00: %v, moved %v; want 14:00 (region-eu)", got, moved)
	}
	v, err := s.Get(ctx, table)
	if err != nil {
		t.Fatal(err)
	}
	if v.QueryID != "eu-id" || v.RunID != "run-eu-id" || !v.EndTime.Equal(at(14, 5)) {
		t.Errorf("provenance %+v; want region-eu's, the feeder that holds the table", v)
	}
	fs, err := s.Feeders(ctx, table)
	if err != nil {
		t.Fatal(err)
	}
	if len(fs) != 2 || fs[0].Feeder != "us-id" || fs[0].QueryName != "region-us" || !fs[0].FinalizedUntil.Equal(at(15, 0)) ||
		fs[1].Feeder != "eu-id" || !fs[1].FinalizedUntil.Equal(at(14, 0)) {
		t.Errorf("Feeders = %+v", fs)
	}
	if h, ok := Holder(fs); !ok || h.Name() != "region-eu" {
		t.Errorf("Holder = %+v, %v; want region-eu", h, ok)
	}
	// One notification per move: 12:00, 13:00, 14:00.
	for _, want := range []string{"12:00", "13:00", "14:00"} {
		wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		n, err := lc.WaitForNotification(wctx)
		cancel()
		if err != nil {
			t.Fatal(err)
		}
		if p := fmt.Sprintf(`{"table":"silver.all","finalized_until":"2026-09-28T%s:00Z","control_table":"public.table_finalization"}`, want); n.Payload != p {
			t.Errorf("notification %s, want %s", n.Payload, p)
		}
	}
}

// TestNewFeederJoinsBehind: a feeder that first reports behind the table
// never moves it back; the table holds until that feeder passes it.
func TestNewFeederJoinsBehind(t *testing.T) {
	s, _ := newStore(t, Options{})
	feed(t, s, "t", "a", "", at(14, 0))
	if got, moved := feed(t, s, "t", "b", "", at(10, 0)); moved || !got.Equal(at(14, 0)) {
		t.Fatalf("b joining at 10:00: table %v, moved %v; want 14:00, not moved", got, moved)
	}
	if got, moved := feed(t, s, "t", "a", "", at(16, 0)); moved || !got.Equal(at(14, 0)) {
		t.Fatalf("a at 16:00 with b at 10:00: table %v, moved %v; want held at 14:00", got, moved)
	}
	if got, moved := feed(t, s, "t", "b", "", at(13, 0)); moved || !got.Equal(at(14, 0)) {
		t.Fatalf("b at 13:00: table %v, moved %v", got, moved)
	}
	if got, moved := feed(t, s, "t", "b", "", at(15, 0)); !moved || !got.Equal(at(15, 0)) {
		t.Fatalf("b at 15:00: table %v, moved %v; want 15:00", got, moved)
	}
	if got, moved := feed(t, s, "t", "b", "", at(17, 0)); !moved || !got.Equal(at(16, 0)) {
		t.Fatalf("b at 17:00: table %v, moved %v; want 16:00 (a)", got, moved)
	}
}

// TestExpectedFeederHolds: a feeder the config expects holds its table
// from the start, by name or by id, across a restart (a new Store), until
// it reports.
func TestExpectedFeederHolds(t *testing.T) {
	s, url := newStore(t, Options{})
	ctx := context.Background()
	added, err := s.ExpectFeeders(ctx, "silver.all", []string{"region-eu", "backfill-id"})
	if err != nil || len(added) != 2 {
		t.Fatalf("ExpectFeeders = %v, %v", added, err)
	}
	if got, moved := feed(t, s, "silver.all", "us-id", "region-us", at(14, 0)); moved || !got.IsZero() {
		t.Fatalf("region-us alone: table %v, moved %v; want no verdict while region-eu and backfill-id have not reported", got, moved)
	}

	// A restart: the expectation is in PostgreSQL; expecting again adds nothing.
	s.Close()
	s = openStore(t, url, Options{})
	if err := s.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	if added, err := s.ExpectFeeders(ctx, "silver.all", []string{"region-eu", "backfill-id"}); err != nil || len(added) != 0 {
		t.Fatalf("ExpectFeeders again = %v, %v; want nothing added", added, err)
	}
	if got := verdictOf(t, s, "silver.all"); !got.IsZero() {
		t.Fatalf("table at %v after the restart", got)
	}

	// region-eu reports under its id: the placeholder is resolved, and
	// backfill-id still holds.
	if got, _ := feed(t, s, "silver.all", "eu-id", "region-eu", at(13, 0)); !got.IsZero() {
		t.Fatalf("table at %v; backfill-id has not reported", got)
	}
	// The expected id reports (it has no name).
	if got, moved := feed(t, s, "silver.all", "backfill-id", "", at(12, 0)); !moved || !got.Equal(at(12, 0)) {
		t.Fatalf("all reported: table %v, moved %v; want 12:00", got, moved)
	}
	fs, err := s.Feeders(ctx, "silver.all")
	if err != nil {
		t.Fatal(err)
	}
	byName := map[string]Feeder{}
	for _, f := range fs {
		byName[f.Feeder] = f
	}
	if f := byName["region-eu"]; !f.Expected || !f.Retired() || f.RetiredWhy != "reported as query eu-id" {
		t.Errorf("placeholder region-eu = %+v; want retired, resolved to eu-id", f)
	}
	if f := byName["backfill-id"]; !f.Expected || f.Retired() || !f.FinalizedUntil.Equal(at(12, 0)) {
		t.Errorf("backfill-id = %+v; want expected, reported at 12:00", f)
	}
	if f := byName["eu-id"]; f.QueryName != "region-eu" || f.Expected || !f.FinalizedUntil.Equal(at(13, 0)) {
		t.Errorf("eu-id = %+v", f)
	}
	// Expecting a query the table knows by name or id adds nothing.
	if added, err := s.ExpectFeeders(ctx, "silver.all", []string{"region-us", "eu-id"}); err != nil || len(added) != 0 {
		t.Errorf("ExpectFeeders of known feeders = %v, %v", added, err)
	}
	if _, err := s.ExpectFeeders(ctx, "silver.all", []string{""}); err == nil {
		t.Error("an empty feeder name was accepted")
	}
}

// TestRetireFeeder: retiring the feeder that holds a table moves the table
// to the next one; a retired feeder's advances no longer hold it; retiring
// an unknown or retired feeder is ErrNoFeeder.
func TestRetireFeeder(t *testing.T) {
	s, _ := newStore(t, Options{})
	ctx := context.Background()
	feed(t, s, "t", "backfill-id", "backfill", at(9, 0))
	feed(t, s, "t", "live-id", "live", at(14, 0))
	if got := verdictOf(t, s, "t"); !got.Equal(at(9, 0)) {
		t.Fatalf("table at %v, want 09:00", got)
	}
	retired, v, moved, err := s.RetireFeeder(ctx, "t", "backfill", "finalizer feeders retire")
	if err != nil {
		t.Fatal(err)
	}
	if len(retired) != 1 || retired[0].Feeder != "backfill-id" || retired[0].RetiredWhy != "finalizer feeders retire" || !moved || !v.FinalizedUntil.Equal(at(14, 0)) {
		t.Fatalf("retire = %+v, %+v, moved %v; want backfill-id retired, table at 14:00", retired, v, moved)
	}
	if _, _, _, err := s.RetireFeeder(ctx, "t", "backfill-id", ""); !errors.Is(err, ErrNoFeeder) {
		t.Errorf("retiring again: err = %v, want ErrNoFeeder", err)
	}
	if _, _, _, err := s.RetireFeeder(ctx, "t", "nobody", ""); !errors.Is(err, ErrNoFeeder) {
		t.Errorf("retiring an unknown feeder: err = %v, want ErrNoFeeder", err)
	}
	// A late progress of the retired feeder is recorded, and holds nothing.
	if got, moved := feed(t, s, "t", "backfill-id", "backfill", at(10, 0)); moved || !got.Equal(at(14, 0)) {
		t.Errorf("retired feeder's advance: table %v, moved %v", got, moved)
	}
	if got, moved := feed(t, s, "t", "live-id", "live", at(15, 0)); !moved || !got.Equal(at(15, 0)) {
		t.Errorf("live alone: table %v, moved %v", got, moved)
	}
	// The last feeder retired: the table stays where it is.
	if _, v, moved, err := s.RetireFeeder(ctx, "t", "live-id", ""); err != nil || moved || !v.FinalizedUntil.Equal(at(15, 0)) {
		t.Errorf("retiring the last feeder = %+v, moved %v, %v", v, moved, err)
	}
	// An expected feeder that never reported is retired by its name.
	if _, err := s.ExpectFeeders(ctx, "u", []string{"ghost"}); err != nil {
		t.Fatal(err)
	}
	feed(t, s, "u", "real", "", at(11, 0))
	if got := verdictOf(t, s, "u"); !got.IsZero() {
		t.Fatalf("u at %v while ghost is expected", got)
	}
	if _, v, moved, err := s.RetireFeeder(ctx, "u", "ghost", "never came"); err != nil || !moved || !v.FinalizedUntil.Equal(at(11, 0)) {
		t.Errorf("retiring ghost = %+v, moved %v, %v; want u at 11:00", v, moved, err)
	}
}

// TestAdvanceBatchSeveralFeeders: one group commit holding several
// feeders of one table moves the table once, to the lowest.
func TestAdvanceBatchSeveralFeeders(t *testing.T) {
	s, _ := newStore(t, Options{})
	ctx := context.Background()
	res, err := s.AdvanceBatch(ctx, []Advance{
		{Table: "t", QueryID: "a", FinalizedUntil: at(14, 0)},
		{Table: "t", QueryID: "b", FinalizedUntil: at(12, 0)},
		{Table: "t", QueryID: "a", FinalizedUntil: at(13, 0)},
		{Table: "u", QueryID: "a", FinalizedUntil: at(11, 0)},
	})
	if err != nil {
		t.Fatal(err)
	}
	moves := 0
	for i, r := range res {
		if r.Err != nil {
			t.Fatalf("result %d: %v", i, r.Err)
		}
		if r.Moved {
			moves++
		}
		want := at(12, 0)
		if i == 3 {
			want = at(11, 0)
		}
		if !r.Verdict.FinalizedUntil.Equal(want) {
			t.Errorf("result %d: %v, want %v", i, r.Verdict.FinalizedUntil, want)
		}
	}
	if moves != 2 || !res[0].Moved || !res[3].Moved {
		t.Errorf("moves reported: %+v; want one per table, on its first entry", res)
	}
	if v, err := s.Get(ctx, "t"); err != nil || v.QueryID != "b" {
		t.Errorf("t = %+v, %v; want b's provenance", v, err)
	}
}

// TestMigrateControlTableInPlace migrates a control table of schema
// version 1 (the release before feeders) with verdicts in it: each table
// keeps its verdict, its last writer becomes its feeder, and single-feeder
// advances behave as before.
func TestMigrateControlTableInPlace(t *testing.T) {
	url := pgtest.URL(t)
	ctx := context.Background()
	conn := connect(t, url)
	n := newNames("public", "table_finalization")
	if _, err := conn.Exec(ctx, `CREATE TABLE `+n.schema+` (version integer PRIMARY KEY, applied_at timestamptz NOT NULL DEFAULT now());
INSERT INTO `+n.schema+` (version) VALUES (1);`+migrations[0].sql(n)); err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Exec(ctx, `INSERT INTO `+n.table+` (table_name, finalized_until, end_time, query_id, run_id, batch_id)
VALUES ('bronze.orders', $1, $2, 'q', 'r', 7), ('bronze.anon', $1, NULL, NULL, NULL, NULL)`, at(14, 0), at(14, 5)); err != nil {
		t.Fatal(err)
	}
	s := openStore(t, url, Options{})
	if err := s.CheckSchema(ctx); !errors.Is(err, ErrNotMigrated) {
		t.Fatalf("CheckSchema of version 1: %v, want ErrNotMigrated", err)
	}
	if err := s.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	fs, err := s.Feeders(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	if len(fs) != 2 || fs[0].Table != "bronze.anon" || fs[0].Feeder != "" || fs[1].Feeder != "q" ||
		!fs[1].FinalizedUntil.Equal(at(14, 0)) || fs[1].RunID != "r" {
		t.Fatalf("feeders after the migration = %+v", fs)
	}
	if got, moved := feed(t, s, "bronze.orders", "q", "", at(13, 0)); moved || !got.Equal(at(14, 0)) {
		t.Errorf("older candidate: %v, moved %v", got, moved)
	}
	if got, moved := feed(t, s, "bronze.orders", "q", "", at(15, 0)); !moved || !got.Equal(at(15, 0)) {
		t.Errorf("next period: %v, moved %v", got, moved)
	}
	if got, moved := feed(t, s, "bronze.orders", "q2", "", at(12, 0)); moved || !got.Equal(at(15, 0)) {
		t.Errorf("a second writer behind: %v, moved %v; want held at 15:00", got, moved)
	}
	var rows int
	if err := conn.QueryRow(ctx, "SELECT count(*) FROM "+n.schema).Scan(&rows); err != nil || rows != SchemaVersion {
		t.Errorf("%d migrations recorded, %v", rows, err)
	}
}

// TestNoopAdvanceTouchesNoFeeder: a no-op advance locks and writes neither
// the table's row nor its feeder's.
func TestNoopAdvanceTouchesNoFeeder(t *testing.T) {
	s, url := newStore(t, Options{})
	ctx := context.Background()
	feed(t, s, "t", "q", "", at(14, 0))
	conn := connect(t, url)
	rows := func() string {
		t.Helper()
		var out string
		if err := conn.QueryRow(ctx, `SELECT (SELECT xmin::text || '/' || xmax::text FROM `+s.n.table+`) || ' ' ||
			(SELECT xmin::text || '/' || xmax::text FROM `+s.n.feeds+`)`).Scan(&out); err != nil {
			t.Fatal(err)
		}
		return out
	}
	before := rows()
	feed(t, s, "t", "q", "", at(14, 0))
	feed(t, s, "t", "q", "", at(13, 0))
	if after := rows(); after != before {
		t.Errorf("no-op advances touched rows: %s -> %s", before, after)
	}
}

// TestFeedersRandomized has several feeders per table advance through
// hours concurrently, each progress replayed and delivered out of order,
// in single advances and in batches, while a checker reads the control
// table and fails on any verdict ahead of the slowest feeder's committed
// data (the highest candidate each feeder has offered: Spark posts a
// progress only after its data is committed) and on any backward move.
// At the end every table is at its slowest feeder's last hour.
func TestFeedersRandomized(t *testing.T) {
	s, _ := newStore(t, Options{MaxConns: 12})
	ctx := context.Background()
	const (
		tables  = 4
		feeders = 3
		hours   = 12
	)
	// offered[table][feeder]: the highest candidate offered so far, as
	// Unix seconds; every feeder is expected, so an unreported one holds.
	var offered [tables][feeders]atomic.Int64
	for tb := range tables {
		names := make([]string, feeders)
		for f := range feeders {
			names[f] = fmt.Sprintf("q%d", f)
		}
		if _, err := s.ExpectFeeders(ctx, fmt.Sprintf("t%d", tb), names); err != nil {
			t.Fatal(err)
		}
	}
	// last[table][feeder]: the last hour each feeder reaches.
	var last [tables][feeders]int
	rnd := rand.New(rand.NewPCG(7, 11))
	for tb := range tables {
		for f := range feeders {
			last[tb][f] = hours/2 + rnd.IntN(hours/2)
		}
	}

	stop := make(chan struct{})
	errs := make(chan error, 64)
	var checker sync.WaitGroup
	checker.Add(1)
	go func() {
		defer checker.Done()
		var prev [tables]time.Time
		conn, err := pgx.Connect(ctx, s.pool.Config().ConnConfig.ConnString())
		if err != nil {
			errs <- err
			return
		}
		defer func() { _ = conn.Close(ctx) }()
		for {
			select {
			case <-stop:
				return
			default:
			}
			rows, err := conn.Query(ctx, "SELECT table_name, finalized_until FROM "+s.n.table)
			if err != nil {
				errs <- err
				return
			}
			seen := map[string]time.Time{}
			for rows.Next() {
				var name string
				var until time.Time
				if err := rows.Scan(&name, &until); err != nil {
					errs <- err
					return
				}
				seen[name] = until
			}
			rows.Close()
			for tb := range tables {
				until, ok := seen[fmt.Sprintf("t%d", tb)]
				if !ok {
					if !prev[tb].IsZero() {
						errs <- fmt.Errorf("t%d lost its row", tb)
						return
					}
					continue
				}
				if until.Before(prev[tb]) {
					errs <- fmt.Errorf("t%d moved back from %v to %v", tb, prev[tb], until)
					return
				}
				prev[tb] = until
				for f := range feeders {
					if o := offered[tb][f].Load(); until.Unix() > o {
						errs <- fmt.Errorf("t%d final until %v, ahead of feeder q%d's committed data (%v)", tb, until, f, time.Unix(o, 0).UTC())
						return
					}
				}
			}
		}
	}()

	var writers sync.WaitGroup
	for f := range feeders {
		for replica := range 2 { // two replicas of the service per feeder
			writers.Add(1)
			go func() {
				defer writers.Done()
				rnd := rand.New(rand.NewPCG(uint64(f), uint64(replica)))
				for h := 0; h < hours; h++ {
					var batch []Advance
					for tb := range tables {
						if h > last[tb][f] {
							continue
						}
						hour := at(h, 0)
						// The data of this hour is committed: the progress may now be posted.
						for {
							o := offered[tb][f].Load()
							if o >= hour.Unix() || offered[tb][f].CompareAndSwap(o, hour.Unix()) {
								break
							}
						}
						a := Advance{Table: fmt.Sprintf("t%d", tb), QueryID: fmt.Sprintf("q%d", f), FinalizedUntil: hour, RunID: fmt.Sprint(replica)}
						batch = append(batch, a)
						if h > 0 && rnd.IntN(3) == 0 { // a replay of an older progress, out of order
							old := a
							old.FinalizedUntil = at(rnd.IntN(h), 0)
							batch = append(batch, old)
						}
					}
					rnd.Shuffle(len(batch), func(i, j int) { batch[i], batch[j] = batch[j], batch[i] })
					if rnd.IntN(2) == 0 {
						if _, err := s.AdvanceBatch(ctx, batch); err != nil {
							errs <- err
							return
						}
						continue
					}
					for _, a := range batch {
						if _, _, err := s.Advance(ctx, a); err != nil {
							errs <- err
							return
						}
					}
				}
			}()
		}
	}
	writers.Wait()
	close(stop)
	checker.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	for tb := range tables {
		slowest := hours
		for f := range feeders {
			slowest = min(slowest, last[tb][f])
		}
		if got := verdictOf(t, s, fmt.Sprintf("t%d", tb)); !got.Equal(at(slowest, 0)) {
			t.Errorf("t%d ends at %v, want %v (its slowest feeder)", tb, got, at(slowest, 0))
		}
	}
}

// TestConcurrentFeedersSerialize forces the race group commit and replicas
// make likely at the top of an hour: feeder b's transaction holds the
// table's lock and waits (here on its feeder row, locked by another
// session) while feeder a advances. Before the tables' locks, each could
// read the other behind from its snapshot and both leave the table behind
// until the next period (a second, settling statement repaired it); now
// a's transaction waits for b's and reads b's commit, so the table moves
// to 15:00 with whichever commits last, and no settle is needed.
func TestConcurrentFeedersSerialize(t *testing.T) {
	s, url := newStore(t, Options{})
	ctx := context.Background()
	feed(t, s, "t", "a", "", at(14, 0))
	feed(t, s, "t", "b", "", at(14, 0))
	other := connect(t, url)
	tx, err := other.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	if _, err := tx.Exec(ctx, "SELECT FROM "+s.n.feeds+" WHERE table_name = 't' AND feeder = 'b' FOR UPDATE"); err != nil {
		t.Fatal(err)
	}
	type result struct {
		v     Verdict
		moved bool
		err   error
	}
	bDone, aDone := make(chan result, 1), make(chan result, 1)
	go func() {
		v, moved, err := s.Advance(ctx, Advance{Table: "t", QueryID: "b", FinalizedUntil: at(15, 0)})
		bDone <- result{v, moved, err}
	}()
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
	eventually(t, "b's advance to wait for the lock", waiting(1))
	go func() {
		v, moved, err := s.Advance(ctx, Advance{Table: "t", QueryID: "a", FinalizedUntil: at(15, 0)})
		aDone <- result{v, moved, err}
	}()
	eventually(t, "a's advance to wait for b's", waiting(2))
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	b, a := <-bDone, <-aDone
	if a.err != nil || b.err != nil {
		t.Fatal(a.err, b.err)
	}
	if b.moved || !b.v.FinalizedUntil.Equal(at(14, 0)) {
		t.Errorf("b's advance = %v, moved %v; want held at 14:00 by a", b.v.FinalizedUntil, b.moved)
	}
	if !a.moved || !a.v.FinalizedUntil.Equal(at(15, 0)) {
		t.Errorf("a's advance = %v, moved %v; want the table moved to 15:00", a.v.FinalizedUntil, a.moved)
	}
	if got := verdictOf(t, s, "t"); !got.Equal(at(15, 0)) {
		t.Errorf("table at %v, want 15:00", got)
	}
	if st := s.Stats(); st.SettleStatements != 0 {
		t.Errorf("%d settle statements; an advance needs none", st.SettleStatements)
	}
}

// TestFeedersBadInput: names the control table cannot hold are refused
// with a clear error before PostgreSQL is asked.
func TestFeedersBadInput(t *testing.T) {
	s, _ := newStore(t, Options{})
	ctx := context.Background()
	for name, call := range map[string]func() error{
		"expect, empty table":     func() error { _, err := s.ExpectFeeders(ctx, "", []string{"q"}); return err },
		"expect, empty feeder":    func() error { _, err := s.ExpectFeeders(ctx, "t", []string{" "}); return err },
		"expect, control char":    func() error { _, err := s.ExpectFeeders(ctx, "t", []string{"a\x00b"}); return err },
		"retire, empty query":     func() error { _, _, _, err := s.RetireFeeder(ctx, "t", "", ""); return err },
		"retire, control char":    func() error { _, _, _, err := s.RetireFeeder(ctx, "t", "a\nb", ""); return err },
		"retire, table not UTF-8": func() error { _, _, _, err := s.RetireFeeder(ctx, "t\xff", "q", ""); return err },
		"expect, table over limit": func() error {
			_, err := s.ExpectFeeders(ctx, string(make([]byte, MaxTableNameLen+1)), []string{"q"})
			return err
		},
	} {
		t.Run(name, func(t *testing.T) {
			if err := call(); err == nil {
				t.Fatal("accepted")
			}
		})
	}
	if fs, err := s.Feeders(ctx, ""); err != nil || len(fs) != 0 {
		t.Errorf("feeders written: %+v, %v", fs, err)
	}
}

// TestJoinedFeederHoldsBeforeItReports: a query mapped to a table (its
// tracker started) but still running its first batch holds the table, so
// the other feeders cannot declare final what it is writing; its first
// advance fills its row, and a retired one does not rejoin.
func TestJoinedFeederHoldsBeforeItReports(t *testing.T) {
	s, _ := newStore(t, Options{})
	ctx := context.Background()
	const table = "silver.joined"
	if got, _ := feed(t, s, table, "eu-id", "region-eu", at(12, 0)); !got.Equal(at(12, 0)) {
		t.Fatalf("first feeder: %v", got)
	}
	j, err := s.JoinFeeder(ctx, table, "us-id", "region-us")
	if err != nil || !j.Added || j.Retired() {
		t.Fatalf("join: %+v, %v", j, err)
	}
	if j, err := s.JoinFeeder(ctx, table, "us-id", "region-us"); err != nil || j.Added || j.Retired() {
		t.Fatalf("second join: %+v, %v; want a no-op", j, err)
	}
	if got, moved := feed(t, s, table, "eu-id", "region-eu", at(14, 0)); moved || !got.Equal(at(12, 0)) {
		t.Fatalf("region-eu at 14:00 moved the table to %v (moved %v) while region-us has not reported", got, moved)
	}
	fs, err := s.Feeders(ctx, table)
	if err != nil {
		t.Fatal(err)
	}
	if h, ok := HeldBy(fs); !ok || h.Feeder != "us-id" || h.QueryName != "region-us" {
		t.Fatalf("held by %+v (%v), want us-id", h, ok)
	}
	if got, _ := feed(t, s, table, "us-id", "region-us", at(13, 0)); !got.Equal(at(13, 0)) {
		t.Fatalf("region-us at 13:00: table at %v, want 13:00", got)
	}
	if _, _, _, err := s.RetireFeeder(ctx, table, "us-id", "done"); err != nil {
		t.Fatal(err)
	}
	// Left retired, and it says so: the caller warns that this run's data
	// may land in periods already final.
	if j, err := s.JoinFeeder(ctx, table, "us-id", "region-us"); err != nil || j.Added || !j.Retired() || j.RetiredWhy != "done" {
		t.Fatalf("join of a retired feeder: %+v, %v; want it left retired, and said", j, err)
	}
	if got := verdictOf(t, s, table); !got.Equal(at(14, 0)) {
		t.Fatalf("after retiring region-us: %v, want 14:00", got)
	}
	if _, err := s.JoinFeeder(ctx, table, "bad\x00id", ""); !errors.Is(err, ErrInvalidAdvance) {
		t.Fatalf("bad id: %v", err)
	}
}

// TestRetireByNameOfARedeploy: a query redeployed on a new checkpoint
// keeps its name and gets a new id. Retiring by that name used to retire
// both, so the table followed the others ahead of the new, live query;
// now the name is refused as ambiguous and the old id retires alone.
func TestRetireByNameOfARedeploy(t *testing.T) {
	s, _ := newStore(t, Options{})
	ctx := context.Background()
	const table = "silver.redeploy"
	feed(t, s, table, "us-old", "region-us", at(12, 0))
	feed(t, s, table, "eu-id", "region-eu", at(14, 0))
	feed(t, s, table, "us-new", "region-us", at(10, 0))
	if got := verdictOf(t, s, table); !got.Equal(at(12, 0)) {
		t.Fatalf("table at %v, want 12:00", got)
	}
	_, _, _, err := s.RetireFeeder(ctx, table, "region-us", "redeployed")
	if !errors.Is(err, ErrAmbiguousFeeder) || !strings.Contains(err.Error(), "us-new, us-old") {
		t.Fatalf("retire by a name two feeders share: %v, want ErrAmbiguousFeeder naming both ids", err)
	}
	if got := verdictOf(t, s, table); !got.Equal(at(12, 0)) {
		t.Fatalf("after a refused retirement: %v, want 12:00", got)
	}
	retired, _, _, err := s.RetireFeeder(ctx, table, "us-old", "redeployed")
	if err != nil || len(retired) != 1 || retired[0].Feeder != "us-old" {
		t.Fatalf("retire by id: %v, %v", retired, err)
	}
	// The new query, behind at 10:00, holds the table at 12:00 (no move
	// back, none ahead of it).
	if got := verdictOf(t, s, table); !got.Equal(at(12, 0)) {
		t.Fatalf("after retiring the old id: %v, want 12:00", got)
	}
	// Now the name is one active feeder's: it retires by name.
	if retired, _, _, err := s.RetireFeeder(ctx, table, "region-us", "gone"); err != nil || len(retired) != 1 || retired[0].Feeder != "us-new" {
		t.Fatalf("retire by a unique name: %v, %v", retired, err)
	}
	if got := verdictOf(t, s, table); !got.Equal(at(14, 0)) {
		t.Fatalf("after retiring region-us: %v, want 14:00", got)
	}
}
