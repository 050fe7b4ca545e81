package control

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
)

// TablesPage returns one page of the tables that have a verdict or a
// feeder (a table held before its first verdict), in table-name order,
// after the name after (exclusive; "" starts at the beginning): at most
// limit names, their verdicts (a table held before its first verdict has
// none) and their feeders, retired ones included. next is the last name of
// the page when more may follow, "" at the end. Each call reads the page
// only (keyset pagination on the tables' primary keys), so listing every
// page of T tables costs O(T), not O(T) per page.
func (s *Store) TablesPage(ctx context.Context, after string, limit int) (verdicts []Verdict, feeders []Feeder, next string, err error) {
	const op = "list a page of tables"
	if s.closed.Load() {
		return nil, nil, "", fmt.Errorf("%s: %w", op, ErrClosed)
	}
	if limit <= 0 {
		return nil, nil, "", fmt.Errorf("%s: limit %d: %w", op, limit, ErrInvalidAdvance)
	}
	rows, err := s.pool.Query(ctx, `
SELECT table_name FROM (
	(SELECT table_name FROM `+s.n.table+` WHERE table_name > $1 ORDER BY table_name LIMIT $2)
	UNION
	(SELECT DISTINCT table_name FROM `+s.n.feeds+` WHERE table_name > $1 ORDER BY table_name LIMIT $2)
) t ORDER BY table_name LIMIT $2`, after, limit+1)
	if err != nil {
		return nil, nil, "", wrap(ctx, op, err)
	}
	names, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, nil, "", wrap(ctx, op, err)
	}
	if len(names) > limit {
		names, next = names[:limit], names[limit-1]
	}
	verdicts, feeders = []Verdict{}, []Feeder{}
	if len(names) == 0 {
		return verdicts, feeders, "", nil
	}
	vrows, err := s.pool.Query(ctx, `SELECT `+readColumns+` FROM `+s.n.table+` WHERE table_name = ANY($1) ORDER BY table_name`, names)
	if err != nil {
		return nil, nil, "", wrap(ctx, op, err)
	}
	defer vrows.Close()
	for vrows.Next() {
		v, err := scanVerdict(vrows)
		if err != nil {
			return nil, nil, "", wrap(ctx, op, err)
		}
		verdicts = append(verdicts, v)
	}
	if err := vrows.Err(); err != nil {
		return nil, nil, "", wrap(ctx, op, err)
	}
	frows, err := s.pool.Query(ctx, `SELECT `+feederColumns+` FROM `+feedersView(s.n)+` WHERE table_name = ANY($1) ORDER BY table_name, joined_at, feeder`, names)
	if err != nil {
		return nil, nil, "", wrap(ctx, op, err)
	}
	if feeders, err = pgx.CollectRows(frows, scanFeeder); err != nil {
		return nil, nil, "", wrap(ctx, op, err)
	}
	if feeders == nil {
		feeders = []Feeder{}
	}
	return verdicts, feeders, next, nil
}
