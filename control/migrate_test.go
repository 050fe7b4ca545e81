package control

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/finalizer-dev/finalizer/internal/pgcluster/pgtest"
)

func TestMigrationsAreNumbered(t *testing.T) {
	for i, m := range migrations {
		if m.version != i+1 {
			t.Errorf("migration %d has version %d, want %d", i, m.version, i+1)
		}
	}
	if last := migrations[len(migrations)-1].version; last != SchemaVersion {
		t.Errorf("SchemaVersion = %d, last migration %d", SchemaVersion, last)
	}
}

func TestMigrateTwiceIsNoop(t *testing.T) {
	url := pgtest.URL(t)
	ctx := context.Background()
	s := openStore(t, url, Options{})
	if err := s.CheckSchema(ctx); !errors.Is(err, ErrNotMigrated) {
		t.Fatalf("CheckSchema before Migrate: err = %v, want ErrNotMigrated", err)
	}
	if _, _, err := s.Advance(ctx, Advance{Table: "t", FinalizedUntil: at(14, 0)}); !errors.Is(err, ErrNotMigrated) {
		t.Fatalf("Advance before Migrate: err = %v, want ErrNotMigrated", err)
	}
	if err := s.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.Advance(ctx, Advance{Table: "t", FinalizedUntil: at(14, 0)}); err != nil {
		t.Fatal(err)
	}
	if err := s.Migrate(ctx); err != nil {
		t.Fatalf("second Migrate: %v", err)
	}
	if err := s.CheckSchema(ctx); err != nil {
		t.Fatalf("CheckSchema: %v", err)
	}
	conn := connect(t, url)
	var rows int
	if err := conn.QueryRow(ctx, "SELECT count(*) FROM public.table_finalization_schema").Scan(&rows); err != nil {
		t.Fatal(err)
	}
	if rows != SchemaVersion {
		t.Errorf("%d rows in the schema table, want %d", rows, SchemaVersion)
	}
	if v, err := s.Get(ctx, "t"); err != nil || !v.FinalizedUntil.Equal(at(14, 0)) {
		t.Errorf("verdict after the second Migrate: %+v, %v", v, err)
	}
}

// TestMigrateConcurrently has replicas migrate one fresh database at once.
func TestMigrateConcurrently(t *testing.T) {
	url := pgtest.URL(t)
	ctx := context.Background()
	var wg sync.WaitGroup
	errs := make(chan error, 6)
	for i := 0; i < cap(errs); i++ {
		s := openStore(t, url, Options{MaxConns: 1})
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs <- s.Migrate(ctx)
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Error(err)
		}
	}
	var rows int
	if err := connect(t, url).QueryRow(ctx, "SELECT count(*) FROM public.table_finalization_schema").Scan(&rows); err != nil {
		t.Fatal(err)
	}
	if rows != SchemaVersion {
		t.Errorf("%d rows in the schema table, want %d", rows, SchemaVersion)
	}
}

func TestSchemaTooNew(t *testing.T) {
	s, url := newStore(t, Options{})
	ctx := context.Background()
	if _, err := connect(t, url).Exec(ctx, "INSERT INTO public.table_finalization_schema (version) VALUES ($1)", SchemaVersion+1); err != nil {
		t.Fatal(err)
	}
	if err := s.Migrate(ctx); !errors.Is(err, ErrSchemaTooNew) {
		t.Errorf("Migrate: err = %v, want ErrSchemaTooNew", err)
	}
	if err := s.CheckSchema(ctx); !errors.Is(err, ErrSchemaTooNew) {
		t.Errorf("CheckSchema: err = %v, want ErrSchemaTooNew", err)
	}
}

// TestCustomTableName uses a schema-qualified name in mixed case beside
// the default table in the same database.
func TestCustomTableName(t *testing.T) {
	url := pgtest.URL(t)
	ctx := context.Background()
	custom := openStore(t, url, Options{Table: "Ops.Verdicts"})
	if custom.Table() != "ops.verdicts" {
		t.Errorf("Table() = %s", custom.Table())
	}
	if err := custom.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	def := openStore(t, url, Options{})
	if err := def.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	conn := connect(t, url)
	for _, rel := range []string{"ops.verdicts", "ops.verdicts_schema", "ops.verdicts_tracks", "ops.verdicts_audit", "public.table_finalization"} {
		var found bool
		if err := conn.QueryRow(ctx, "SELECT to_regclass($1) IS NOT NULL", rel).Scan(&found); err != nil {
			t.Fatal(err)
		}
		if !found {
			t.Errorf("%s does not exist", rel)
		}
	}
	if _, _, err := custom.Advance(ctx, Advance{Table: "t", FinalizedUntil: at(14, 0)}); err != nil {
		t.Fatal(err)
	}
	if err := custom.SaveTrack(ctx, Track{QueryID: "q", RunID: "r", Table: "t"}); err != nil {
		t.Fatal(err)
	}
	if v, err := custom.Get(ctx, "t"); err != nil || !v.FinalizedUntil.Equal(at(14, 0)) {
		t.Errorf("custom Get = %+v, %v", v, err)
	}
	if _, err := def.Get(ctx, "t"); !errors.Is(err, ErrNotFound) {
		t.Errorf("default table has the custom table's row: err = %v", err)
	}
	var n int
	if err := conn.QueryRow(ctx, "SELECT count(*) FROM ops.verdicts WHERE finalized_until = $1", at(14, 0)).Scan(&n); err != nil || n != 1 {
		t.Errorf("ops.verdicts as psql sees it: %d rows, %v", n, err)
	}
}

// Tracks makes its list at its size from the rows' count, not grown by
// appending (a restart lists every track not done; issue 12, ninth pass).
func TestTracksListMadeAtItsSize(t *testing.T) {
	s, _ := newStore(t, Options{})
	ctx := context.Background()
	for i := range 5 {
		if err := s.SaveTrack(ctx, Track{QueryID: fmt.Sprintf("q%d", i), RunID: fmt.Sprintf("r%d", i), Table: "bronze.orders"}); err != nil {
			t.Fatal(err)
		}
	}
	got, err := s.Tracks(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 5 || cap(got) != 5 {
		t.Fatalf("Tracks: %d tracks with room for %d, want 5 and 5", len(got), cap(got))
	}
}

func TestTracksRoundTrip(t *testing.T) {
	s, _ := newStore(t, Options{})
	ctx := context.Background()
	if got, err := s.Tracks(ctx); err != nil || len(got) != 0 {
		t.Fatalf("Tracks on an empty table = %v, %v", got, err)
	}
	created := time.Date(2026, 9, 28, 14, 0, 0, 123_000, time.FixedZone("UTC-3", -3*3600))
	a := Track{QueryID: "q1", RunID: "r1", Table: "bronze.orders", Spec: []byte(`{"time": "offset:/commit_ts", "granularity": "hour"}`), CreatedAt: created}
	b := Track{QueryID: "q2", RunID: "r2", Table: "bronze.items"}
	for _, tr := range []Track{a, b, a} { // saving a again is a no-op
		if err := s.SaveTrack(ctx, tr); err != nil {
			t.Fatal(err)
		}
	}
	got, err := s.Tracks(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 {
		t.Fatalf("Tracks = %+v, want 2", got)
	}
	if g := got[0]; g.QueryID != a.QueryID || g.RunID != a.RunID || g.Table != a.Table ||
		!jsonEqual(t, g.Spec, a.Spec) || !g.CreatedAt.Equal(created) || g.CreatedAt.Location() != time.UTC || !g.DoneAt.IsZero() {
		t.Errorf("Tracks[0] = %+v, want %+v", g, a)
	}
	if g := got[1]; g.RunID != b.RunID || g.Spec != nil || g.CreatedAt.IsZero() {
		t.Errorf("Tracks[1] = %+v, want %+v with CreatedAt now", g, b)
	}

	// Saving with a new spec takes it, keeping one row.
	a2 := a
	a2.Spec = []byte(`{"granularity": "day"}`)
	if err := s.SaveTrack(ctx, a2); err != nil {
		t.Fatal(err)
	}
	if got, _ := s.Tracks(ctx); len(got) != 2 || !jsonEqual(t, got[0].Spec, a2.Spec) {
		t.Errorf("after a new spec: %+v", got)
	}

	if err := s.FinishTrack(ctx, "r1", "bronze.orders"); err != nil {
		t.Fatal(err)
	}
	if err := s.FinishTrack(ctx, "r1", "bronze.orders"); err != nil {
		t.Fatalf("second FinishTrack: %v", err)
	}
	if err := s.FinishTrack(ctx, "unknown", "bronze.orders"); err != nil {
		t.Fatalf("FinishTrack of an unknown track: %v", err)
	}
	got, err = s.Tracks(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || got[0].RunID != "r2" {
		t.Errorf("Tracks after finishing r1 = %+v, want only r2", got)
	}
	// A finished track saved again (`finalizer track` of a run whose
	// tracker expired, or an expired run that spoke again) is live again:
	// it must be resumed after a restart, not silently dropped.
	if err := s.SaveTrack(ctx, a); err != nil {
		t.Fatal(err)
	}
	got, err = s.Tracks(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || got[0].RunID != "r1" || !got[0].CreatedAt.Equal(created) {
		t.Errorf("Tracks after saving the finished r1 again = %+v, want r1 (its first CreatedAt) and r2", got)
	}

	for name, tr := range map[string]Track{
		"no run":          {QueryID: "q", Table: "t"},
		"no query":        {RunID: "r", Table: "t"},
		"no table":        {QueryID: "q", RunID: "r"},
		"spec not JSON":   {QueryID: "q", RunID: "r", Table: "t", Spec: []byte("{")},
		"spec is garbage": {QueryID: "q", RunID: "r", Table: "t", Spec: []byte("hour")},
	} {
		t.Run(name, func(t *testing.T) {
			if err := s.SaveTrack(ctx, tr); !errors.Is(err, ErrInvalidTrack) {
				t.Errorf("err = %v, want ErrInvalidTrack", err)
			}
		})
	}
}

// TestMigration6OnAnExistingTable: a control table of version 5 with
// verdicts (pages packed full) is brought to version 6 in place: the
// fillfactor set, every verdict as it was, advances applied after it. A
// version-6 table rolled back by deleting migration 6's row (README,
// Upgrades: what lets an older binary start) migrates again without error.
func TestMigration6OnAnExistingTable(t *testing.T) {
	s, url := newStore(t, Options{})
	conn := connect(t, url)
	ctx := context.Background()
	as := make([]Advance, 50)
	for i := range as {
		as[i] = Advance{Table: fmt.Sprintf("m6.t%02d", i), QueryID: "q", RunID: "r", FinalizedUntil: at(12, 0), EndTime: at(12, 1), BatchID: 1}
	}
	if _, err := s.AdvanceBatch(ctx, as); err != nil {
		t.Fatal(err)
	}
	before, err := s.List(ctx)
	if err != nil || len(before) != len(as) {
		t.Fatalf("List: %d verdicts, %v", len(before), err)
	}
	fillfactor := func() []string {
		t.Helper()
		var opts []string
		if err := conn.QueryRow(ctx, `SELECT coalesce(reloptions, '{}') FROM pg_class WHERE oid = $1::regclass`, s.n.table).Scan(&opts); err != nil {
			t.Fatal(err)
		}
		return opts
	}
	for _, c := range []struct{ name, undo string }{
		{"version 5", `ALTER TABLE ` + s.n.table + ` RESET (fillfactor); DELETE FROM ` + s.n.schema + ` WHERE version >= 6`},
		{"rolled back", `DELETE FROM ` + s.n.schema + ` WHERE version >= 6`},
	} {
		if _, err := conn.Exec(ctx, c.undo); err != nil {
			t.Fatal(err)
		}
		s.Close()
		s = openStore(t, url, Options{})
		if err := s.CheckSchema(ctx); !errors.Is(err, ErrNotMigrated) {
			t.Fatalf("%s: CheckSchema: %v, want ErrNotMigrated", c.name, err)
		}
		if err := s.Migrate(ctx); err != nil {
			t.Fatalf("%s: Migrate: %v", c.name, err)
		}
		if err := s.CheckSchema(ctx); err != nil {
			t.Fatalf("%s: CheckSchema after Migrate: %v", c.name, err)
		}
		if opts := fillfactor(); len(opts) != 1 || opts[0] != "fillfactor=50" {
			t.Fatalf("%s: control table's options %q, want [fillfactor=50]", c.name, opts)
		}
		after, err := s.List(ctx)
		if err != nil || len(after) != len(before) {
			t.Fatalf("%s: List: %d verdicts, %v", c.name, len(after), err)
		}
		for i := range after {
			if after[i].Table != before[i].Table || !after[i].FinalizedUntil.Equal(before[i].FinalizedUntil) {
				t.Fatalf("%s: verdict %d: %+v, was %+v", c.name, i, after[i], before[i])
			}
		}
	}
	for i := range as {
		as[i].FinalizedUntil, as[i].EndTime, as[i].BatchID = at(13, 0), at(13, 1), 2
	}
	res, err := s.AdvanceBatch(ctx, as)
	if err != nil {
		t.Fatal(err)
	}
	for i, r := range res {
		if r.Err != nil || !r.Moved || !r.Verdict.FinalizedUntil.Equal(at(13, 0)) {
			t.Fatalf("%s after the migration: %+v", as[i].Table, r)
		}
	}
}
