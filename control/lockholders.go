package control

import (
	"context"
	"fmt"
	"strconv"
)

// RowLockHolders returns the process ids of the PostgreSQL sessions that
// block a session waiting on the control table (its rows' locks: a
// reader's FOR SHARE holds a rewind back), as PostgreSQL's
// pg_blocking_pids says, for an operator's message ("held by another
// session (pid N)"); none when nothing waits. table is the tracked table
// the caller waits for (it only names it in errors): a row lock is not
// listed by row, so the sessions blocking any waiter on the control table
// are returned.
func (s *Store) RowLockHolders(ctx context.Context, table string) ([]string, error) {
	if s.closed.Load() {
		return nil, fmt.Errorf("lock holders of %s: %w", table, ErrClosed)
	}
	rows, err := s.pool.Query(ctx, `
SELECT DISTINCT b FROM pg_locks l, unnest(pg_blocking_pids(l.pid)) b
WHERE l.relation = $1::regclass AND l.pid <> pg_backend_pid()
ORDER BY b`, s.n.table)
	if err != nil {
		return nil, wrap(ctx, "lock holders of "+table, err)
	}
	defer rows.Close()
	var pids []string
	for rows.Next() {
		var pid int32
		if err := rows.Scan(&pid); err != nil {
			return nil, wrap(ctx, "lock holders of "+table, err)
		}
		pids = append(pids, strconv.Itoa(int(pid)))
	}
	if err := rows.Err(); err != nil {
		return nil, wrap(ctx, "lock holders of "+table, err)
	}
	return pids, nil
}
