package control

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
)

// DefaultLockWait is how long a statement of an advance waits for a lock
// another session holds before the group commit looks for the tables it
// cannot lock (see ErrBusy). The service's own statements hold a table's
// locks for one statement (tens of milliseconds, a few hundred under a
// burst on a loaded machine); a wait longer than this is a session outside
// the group: an open transaction that locked a row of the control table
// (an operator's UPDATE in psql, a reader's SELECT ... FOR SHARE), a
// frozen connection of a peer replica, a LOCK TABLE or a migration.
const DefaultLockWait = time.Second

// busyWarnEvery is how often the store warns, at most, of advances or
// joins failed by another session's lock (one class each): the runs retry
// them every few seconds while it holds, and a burst meets it in every
// group of its statement. Each line counts the ones held back since the
// last ("suppressed"); every failed advance or join still carries its own
// error, and the retries' metrics count each.
const busyWarnEvery = 30 * time.Second

// ReportHeldLogs says, one line per class (lograte.HeldMsg), the busy
// warnings the store held back in an interval that has ended with no later
// warning of their class going out to count them: a lone burst of locked
// advances would otherwise never say how many it held back. The store has
// no loop of its own: its owner calls it periodically (the service every
// lograte.ReportEvery); a class has at most one line per interval, its
// own or this one (ADR 0022, addendum of 2026-12-06). With all (the
// owner's last call, at its stop) every class with warnings held back is
// said, its interval ended or not.
func (s *Store) ReportHeldLogs(all bool) { s.warn.Report(s.log, "control_store", all) }

// ErrBusy is the error of an advance whose table another session keeps
// locked (its row in the control table or the feeders table, or its
// advisory lock) for longer than the store's lock wait. The other
// advances of its group are applied without it; it is retried like any
// failed advance.
var ErrBusy = errors.New("the table is locked by another session")

// setLockWait is queued first in an advance's implicit transaction: its
// statements wait at most $1 for a lock, then fail with lock_not_available
// (55P03). Local to the transaction: the pool's connections keep
// PostgreSQL's default (wait for ever) for everything else. Not covered:
// pgx prepares a statement a connection has not cached yet in a round
// trip of its own, before the batch, and that prepare waits without the
// lock wait; so a lock on a whole table (LOCK TABLE, an ALTER, VACUUM
// FULL) holds such an advance until it is released or the advance's
// context ends, as the README says of those locks. Row and advisory
// locks, the ones one table's session holds, are taken by the batch's
// statements, within the lock wait.
const setLockWait = `SELECT set_config('lock_timeout', $1, true)`

// setCustomPlans is queued after setLockWait in the transactions that
// write through the feeders table (the first verdicts, shared tables,
// feeder joins): their statements are planned for the arrays they are
// given and the tables as they stand, every time, instead of with the
// generic plan each of the pool's connections makes at a statement's
// first use (Open sets force_generic_plan) and keeps until an autovacuum
// or an analyze invalidates it. A generic plan made while the control
// table was a few pages (the first groups of a service's first verdicts)
// scanned the table with an unhashed "= ANY($1)" filter, and stayed
// cached while the table grew to 100,000 rows: 1-3.6 s a statement, the
// first verdicts of 100,000 tables 3-6 times as slow (BENCHMARKS.md, "The
// burst (eighth pass, 2026-12-06)"). Local to the transaction, like the
// lock wait.
const setCustomPlans = `SELECT set_config('plan_cache_mode', 'force_custom_plan', true)`

// setPlanMode sets plan_cache_mode back to the connections' ($1) for the
// rest of the transaction.
const setPlanMode = `SELECT set_config('plan_cache_mode', $1, true)`

// lockTimedOut reports whether err is PostgreSQL's lock_not_available: a
// statement waited longer than its lock_timeout.
func lockTimedOut(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == "55P03"
}

// busyTables returns which of tables another session holds locked now:
// a row of theirs in the control table or the feeders table locked (FOR
// UPDATE SKIP LOCKED cannot take it), or their advisory lock held
// (pg_try_advisory_xact_lock fails). It waits for no row or advisory
// lock; a lock on a whole table (LOCK TABLE, a migration, VACUUM FULL)
// makes its statement wait the lock wait and fail with
// lock_not_available, or, on a connection that has not prepared the
// statement yet, holds the prepare until the lock is released or ctx
// ends (see setLockWait). Its
// transaction writes nothing and releases what it took when it ends.
func (s *Store) busyTables(ctx context.Context, tables []string) (map[string]bool, error) {
	var pb pgx.Batch
	pb.Queue(setLockWait, s.lockWait)
	pb.Queue(s.sql.busy, tables, s.n.table)
	br := s.pool.SendBatch(ctx, &pb)
	busy := make(map[string]bool)
	_, err := br.Exec()
	if err == nil {
		var rows pgx.Rows
		rows, err = br.Query()
		if err == nil {
			var t string
			_, err = pgx.ForEachRow(rows, []any{&t}, func() error {
				busy[t] = true
				return nil
			})
		}
	}
	if cerr := br.Close(); err == nil {
		err = cerr
	}
	return busy, err
}

// orderTables returns the tables of order (sorted by table, then feeder),
// each once.
func orderTables(order []feederKey) []string {
	tables := make([]string, 0, len(order))
	for _, k := range order {
		if len(tables) == 0 || tables[len(tables)-1] != k.table {
			tables = append(tables, k.table)
		}
	}
	return tables
}

// splitBusy calls held for each key of order (sorted by table) whose
// table is in busy and returns the others, in order, and the first five
// busy tables for a log line.
func splitBusy(order []feederKey, busy map[string]bool, held func(feederKey)) (rest []feederKey, named []string) {
	rest = make([]feederKey, 0, len(order))
	for _, k := range order {
		if !busy[k.table] {
			rest = append(rest, k)
			continue
		}
		held(k)
		if len(named) < 5 && (len(named) == 0 || named[len(named)-1] != k.table) {
			named = append(named, k.table)
		}
	}
	return rest, named
}

// isolateBusy is applyBatch's answer to a statement that waited too long
// for a lock: it finds the tables of order another session holds locked,
// fails their feeders with ErrBusy, and applies the others. It returns
// false when it found none (the lock went meanwhile): the caller goes on
// as for any other error.
func (s *Store) isolateBusy(ctx context.Context, b *batch, order []feederKey, cause error) (bool, error) {
	busy, err := s.busyTables(ctx, orderTables(order))
	switch {
	case err == nil:
	case batchWide(ctx, err):
		return true, err
	case lockTimedOut(err):
		// A lock on a whole table holds every advance: fail the group
		// now (each is retried) rather than wait a lock wait per half.
		if ok, n := s.warn.Allow(zapcore.WarnLevel, "advance-table-locked"); ok {
			s.log.Warn("another session holds the control table (or its feeders table) locked as a whole; no advance can be applied until it lets go",
				zap.Int("feeders", len(order)), zap.String("lock_wait", s.lockWait), zap.Error(err), zap.Int("suppressed", n))
		}
		for _, k := range order {
			b.rows.get(k).failed = fmt.Errorf("advance %s: the control table is locked by another session (LOCK TABLE, a migration, VACUUM FULL?): %w", k.table, cause)
		}
		return true, nil
	default:
		return false, nil
	}
	if len(busy) == 0 {
		return false, nil
	}
	rest, named := splitBusy(order, busy, func(k feederKey) {
		b.rows.get(k).failed = fmt.Errorf("advance %s: %w (waited more than lock_timeout %s; an open transaction holding its row? see pg_stat_activity, state 'idle in transaction'): %w",
			k.table, ErrBusy, s.lockWait, cause)
	})
	if ok, n := s.warn.Allow(zapcore.WarnLevel, "advance-busy"); ok {
		s.log.Warn("another session holds tables of the control table locked; the group commit applies the other tables without them and their advances are retried (see pg_stat_activity for the session, state 'idle in transaction')",
			zap.Int("busy_tables", len(busy)), zap.Strings("tables", named), zap.Int("others", len(rest)),
			zap.String("lock_wait", s.lockWait), zap.Int("suppressed", n))
	}
	if len(rest) == 0 {
		return true, nil
	}
	return true, s.applyBatch(ctx, b, rest, false)
}

// isolateBusyJoins is joinAll's answer to a join that waited too long for
// a lock, as isolateBusy is applyBatch's: the joins of the tables another
// session holds locked get ErrBusy (the caller retries them), the others
// are joined at once. A lock on a whole table fails every join of order
// with the cause (not ErrBusy: no table is held more than another). It
// returns false when the probe found no table held (the lock went, or it
// is a row the probe cannot see): the caller goes on as for any other
// error.
func (s *Store) isolateBusyJoins(ctx context.Context, order []feederKey, names map[feederKey]string, out map[feederKey]JoinedResult, cause error) bool {
	busy, err := s.busyTables(ctx, orderTables(order))
	switch {
	case err == nil:
	case batchWide(ctx, err):
		for _, k := range order {
			out[k] = JoinedResult{Err: wrap(ctx, fmt.Sprintf("join feeder %s of %s", k.feeder, k.table), err)}
		}
		return true
	case lockTimedOut(err):
		if ok, n := s.warn.Allow(zapcore.WarnLevel, "join-table-locked"); ok {
			s.log.Warn("another session holds the control table (or its feeders table) locked as a whole; no feeder can join until it lets go",
				zap.Int("joins", len(order)), zap.String("lock_wait", s.lockWait), zap.Error(err), zap.Int("suppressed", n))
		}
		for _, k := range order {
			out[k] = JoinedResult{Err: fmt.Errorf("join feeder %s of %s: the control table is locked by another session (LOCK TABLE, a migration, VACUUM FULL?): %w", k.feeder, k.table, cause)}
		}
		return true
	default:
		return false
	}
	if len(busy) == 0 {
		return false
	}
	rest, named := splitBusy(order, busy, func(k feederKey) {
		out[k] = JoinedResult{Err: fmt.Errorf("join feeder %s of %s: %w (waited more than lock_timeout %s; an open transaction holding its row? see pg_stat_activity, state 'idle in transaction'): %w",
			k.feeder, k.table, ErrBusy, s.lockWait, cause)}
	})
	if ok, n := s.warn.Allow(zapcore.WarnLevel, "join-busy"); ok {
		s.log.Warn("another session holds tables of the control table locked; the feeders of the other tables join without them and theirs are retried (see pg_stat_activity for the session, state 'idle in transaction')",
			zap.Int("busy_tables", len(busy)), zap.Strings("tables", named), zap.Int("others", len(rest)),
			zap.String("lock_wait", s.lockWait), zap.Int("suppressed", n))
	}
	if len(rest) > 0 {
		s.joinAll(ctx, rest, names, out, false)
	}
	return true
}
