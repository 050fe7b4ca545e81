package control

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"time"

	"go.uber.org/zap"
)

// SaveTrack persists an explicit track so that it survives a restart. It
// is idempotent: saving the same (RunID, Table) again keeps one row and
// its CreatedAt, takes the new QueryID and Spec, and makes a track that
// was done live again (a run tracked again after its tracker expired or
// was superseded must survive a restart too; one that terminated is
// marked done again as soon as its tracker sees the termination). A zero
// CreatedAt means now; DoneAt is ignored (see FinishTrack). It fails with
// ErrInvalidTrack when RunID, QueryID or Table is empty or Spec is not
// JSON. It is SaveTracks of one.
func (s *Store) SaveTrack(ctx context.Context, t Track) error {
	return s.SaveTracks(ctx, []Track{t})[0]
}

// SaveTracks is SaveTrack for many tracks at once (ADR 0023): the tracks
// requested together are saved in one statement and one commit instead
// of one each. Its result at index i is what SaveTrack would have
// returned for ts[i]; of two tracks of the same run and table, the later
// one's QueryID and Spec are kept, as SaveTrack one after the other would
// keep them. An invalid track gets ErrInvalidTrack and is not sent. One
// track the database refuses never fails the others: a statement that
// fails for any reason but the database's availability is tried again in
// halves, down to single tracks, so that only the refused one carries an
// error. When the database is unavailable (or ctx ends), every track not
// saved carries that error.
func (s *Store) SaveTracks(ctx context.Context, ts []Track) []error {
	errs := make([]error, len(ts))
	op := func(t Track) string { return fmt.Sprintf("save track of run %s for %s", t.RunID, t.Table) }
	if s.closed.Load() {
		for i, t := range ts {
			errs[i] = fmt.Errorf("%s: %w", op(t), ErrClosed)
		}
		return errs
	}
	type key struct{ run, table string }
	last := make(map[key]int, len(ts))
	var order []int // the index of each (run, table)'s last track
	for i, t := range ts {
		switch {
		case t.RunID == "" || t.QueryID == "" || t.Table == "":
			errs[i] = fmt.Errorf("%s: %w: query id, run id and table are required", op(t), ErrInvalidTrack)
			continue
		case len(t.Spec) > 0 && !json.Valid(t.Spec):
			errs[i] = fmt.Errorf("%s: %w: spec is not JSON", op(t), ErrInvalidTrack)
			continue
		}
		k := key{t.RunID, t.Table}
		if j, ok := last[k]; ok {
			order[j] = i
			continue
		}
		last[k] = len(order)
		order = append(order, i)
	}
	slices.SortFunc(order, func(a, b int) int {
		return cmp.Or(cmp.Compare(ts[a].RunID, ts[b].RunID), cmp.Compare(ts[a].Table, ts[b].Table))
	})
	saved := make(map[key]error, len(order))
	var save func(order []int, top bool)
	save = func(order []int, top bool) {
		err := s.saveTracks(ctx, ts, order)
		switch {
		case err == nil:
			for _, i := range order {
				saved[key{ts[i].RunID, ts[i].Table}] = nil
			}
			return
		case batchWide(ctx, err), len(order) == 1:
			for _, i := range order {
				saved[key{ts[i].RunID, ts[i].Table}] = wrap(ctx, op(ts[i]), err)
			}
			return
		case top:
			s.log.Warn("postgresql refused a batch of explicit tracks; saving it in halves so that one cannot fail the others",
				zap.Int("tracks", len(order)), zap.Error(err))
		}
		n := len(order)
		save(order[:n/2], false)
		if err := saved[key{ts[order[n/2-1]].RunID, ts[order[n/2-1]].Table}]; err != nil && batchWide(ctx, err) {
			for _, i := range order[n/2:] {
				saved[key{ts[i].RunID, ts[i].Table}] = err
			}
			return
		}
		save(order[n/2:], false)
	}
	if len(order) > 0 {
		save(order, true)
	}
	for i, t := range ts {
		if errs[i] == nil {
			errs[i] = saved[key{t.RunID, t.Table}]
		}
	}
	return errs
}

// saveTracks upserts the tracks ts[i] for i in order (sorted by run and
// table, one per run and table) in one statement.
func (s *Store) saveTracks(ctx context.Context, ts []Track, order []int) error {
	var (
		queries = make([]string, len(order))
		runs    = make([]string, len(order))
		tables  = make([]string, len(order))
		specs   = make([]*string, len(order))
		created = make([]*time.Time, len(order))
	)
	for j, i := range order {
		t := ts[i]
		queries[j], runs[j], tables[j] = t.QueryID, t.RunID, t.Table
		if len(t.Spec) > 0 {
			spec := string(t.Spec)
			specs[j] = &spec
		}
		if !t.CreatedAt.IsZero() {
			at := t.CreatedAt
			created[j] = &at
		}
	}
	_, err := s.pool.Exec(ctx, `
INSERT INTO `+s.n.tracks+` (query_id, run_id, table_name, spec, created_at)
SELECT i.query_id, i.run_id, i.table_name, i.spec::jsonb, coalesce(i.created_at, now())
FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::timestamptz[]) AS i(query_id, run_id, table_name, spec, created_at)
ORDER BY i.run_id, i.table_name
ON CONFLICT (run_id, table_name) DO UPDATE SET query_id = EXCLUDED.query_id, spec = EXCLUDED.spec, done_at = NULL`,
		queries, runs, tables, specs, created)
	return err
}

// Tracks returns the saved tracks that are not done, oldest first.
func (s *Store) Tracks(ctx context.Context) ([]Track, error) {
	if s.closed.Load() {
		return nil, fmt.Errorf("list tracks: %w", ErrClosed)
	}
	// The row count comes with every row, so that the list is made at
	// its size with the first: a restart lists every track not done
	// (50,000 in the bench at 100,000 runs), and appending grew and
	// copied it about five times over (issue 12, ninth pass). The rows
	// are sorted anyway, so the count costs no second pass over them.
	rows, err := s.pool.Query(ctx, `
SELECT query_id, run_id, table_name, spec, created_at, done_at, count(*) OVER () FROM `+s.n.tracks+`
WHERE done_at IS NULL ORDER BY created_at, run_id, table_name`)
	if err != nil {
		return nil, wrap(ctx, "list tracks", err)
	}
	defer rows.Close()
	tracks := []Track{}
	for rows.Next() {
		var (
			t      Track
			spec   []byte
			doneAt *time.Time
			n      int64
		)
		if err := rows.Scan(&t.QueryID, &t.RunID, &t.Table, &spec, &t.CreatedAt, &doneAt, &n); err != nil {
			return nil, wrap(ctx, "list tracks", err)
		}
		if cap(tracks) == 0 && n > 0 {
			tracks = make([]Track, 0, min(n, maxTracksHint))
		}
		if len(spec) > 0 {
			t.Spec = json.RawMessage(spec)
		}
		t.CreatedAt = t.CreatedAt.UTC()
		if doneAt != nil {
			t.DoneAt = doneAt.UTC()
		}
		tracks = append(tracks, t)
	}
	if err := rows.Err(); err != nil {
		return nil, wrap(ctx, "list tracks", err)
	}
	return tracks, nil
}

// maxTracksHint bounds the size Tracks makes its list at, whatever the
// count says.
const maxTracksHint = 1 << 20

// FinishTrack marks the track of runID for table done (its tracker
// finished after the run terminated), so Tracks no longer returns it. A
// track already done keeps its first DoneAt; one that was never saved (a
// declaratively tracked run) is no error.
func (s *Store) FinishTrack(ctx context.Context, runID, table string) error {
	op := fmt.Sprintf("finish track of run %s for %s", runID, table)
	if s.closed.Load() {
		return fmt.Errorf("%s: %w", op, ErrClosed)
	}
	_, err := s.pool.Exec(ctx, `
UPDATE `+s.n.tracks+` SET done_at = now() WHERE run_id = $1 AND table_name = $2 AND done_at IS NULL`,
		runID, table)
	return wrap(ctx, op, err)
}
