package control

import (
	"context"
	"encoding/json"
	"fmt"
	"time"
)

// SaveTrack persists an explicit track so that it survives a restart. It
// is idempotent: saving the same (RunID, Table) again keeps one row and
// its CreatedAt, takes the new QueryID and Spec, and makes a track that
// was done live again (a run tracked again after its tracker expired or
// was superseded must survive a restart too; one that terminated is
// marked done again as soon as its tracker sees the termination). A zero
// CreatedAt means now; DoneAt is ignored (see FinishTrack). It fails with
// ErrInvalidTrack when RunID, QueryID or Table is empty or Spec is not
// JSON.
func (s *Store) SaveTrack(ctx context.Context, t Track) error {
	op := fmt.Sprintf("save track of run %s for %s", t.RunID, t.Table)
	if s.closed.Load() {
		return fmt.Errorf("%s: %w", op, ErrClosed)
	}
	switch {
	case t.RunID == "" || t.QueryID == "" || t.Table == "":
		return fmt.Errorf("%s: %w: query id, run id and table are required", op, ErrInvalidTrack)
	case len(t.Spec) > 0 && !json.Valid(t.Spec):
		return fmt.Errorf("%s: %w: spec is not JSON", op, ErrInvalidTrack)
	}
	var spec any
	if len(t.Spec) > 0 {
		spec = []byte(t.Spec)
	}
	_, err := s.pool.Exec(ctx, `
INSERT INTO `+s.n.tracks+` (query_id, run_id, table_name, spec, created_at)
VALUES ($1, $2, $3, $4::jsonb, coalesce($5::timestamptz, now()))
ON CONFLICT (run_id, table_name) DO UPDATE SET query_id = EXCLUDED.query_id, spec = EXCLUDED.spec, done_at = NULL`,
		t.QueryID, t.RunID, t.Table, spec, nullTime(t.CreatedAt))
	return wrap(ctx, op, err)
}

// Tracks returns the saved tracks that are not done, oldest first.
func (s *Store) Tracks(ctx context.Context) ([]Track, error) {
	if s.closed.Load() {
		return nil, fmt.Errorf("list tracks: %w", ErrClosed)
	}
	rows, err := s.pool.Query(ctx, `
SELECT query_id, run_id, table_name, spec, created_at, done_at FROM `+s.n.tracks+`
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
		)
		if err := rows.Scan(&t.QueryID, &t.RunID, &t.Table, &spec, &t.CreatedAt, &doneAt); err != nil {
			return nil, wrap(ctx, "list tracks", err)
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
