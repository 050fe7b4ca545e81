package control

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
)

// The actions recorded in the audit table.
const (
	// ActionRewind moved a verdict back (Store.Rewind).
	ActionRewind = "rewind"
	// ActionAcknowledge cleared a table's mark without moving its verdict
	// (Store.Acknowledge).
	ActionAcknowledge = "acknowledge"
	// ActionUnretire took a retired feeder back (Store.UnretireFeeder):
	// it holds the table again.
	ActionUnretire = "unretire"
)

// The errors of rewinds and marks, wrapped with context.
var (
	// ErrInvalidRewind means a rewind or acknowledgement lacks its table,
	// its time, its reason or its operator; nothing was written.
	ErrInvalidRewind = errors.New("invalid rewind")
	// ErrNotBehind means a rewind's target is not before the table's
	// verdict: a rewind only moves back (the verdict moves forward only
	// through the service).
	ErrNotBehind = errors.New("rewind target is not before the verdict")
)

// Rewind asks for a table's verdict to be moved back: the one backward
// move there is, made by an operator after the table's history changed
// (a query started again from a new checkpoint and rewrites periods that
// were declared final).
type Rewind struct {
	Table  string
	To     time.Time // the new finalized_until; must be before the current one
	Reason string    // why, in the operator's words (required)
	By     string    // who asked (required): a person or a job
	// Retire names feeders (query names or ids) to retire in the same
	// transaction: after a checkpoint reset the old query id is a feeder
	// that will never report again and would hold the table at To.
	Retire []string
}

// Acknowledge clears a table's mark without moving its verdict: the
// operator looked and decided no rewind is needed.
type Acknowledge struct {
	Table  string
	Reason string
	By     string
}

// AuditEntry is one row of the audit table.
type AuditEntry struct {
	ID     int64
	Table  string
	Action string // ActionRewind, ActionAcknowledge or ActionUnretire
	At     time.Time
	By     string // the operator named by the request
	DBUser string // the PostgreSQL role that made it
	Reason string
	// From and To are the verdict before and after (equal for an
	// acknowledgement).
	From, To time.Time
	// FromQueryID, FromRunID, FromBatchID and FromEndTime are the
	// provenance of the verdict that was moved back.
	FromQueryID string
	FromRunID   string
	FromBatchID int64
	FromEndTime time.Time
	// ClearedMark and ClearedMarks are the mark the action cleared, if any.
	ClearedMark  string
	ClearedMarks int64
	// Retired are the feeders a rewind retired (Rewind.Retire); their
	// feeder rows say "rewind <ID>: <reason>" as why.
	Retired []string
}

// rewindNotification is the payload of a rewind on NotifyChannel: the
// fields of every move, and the flag that says this one went back.
type rewindNotification struct {
	Table          string `json:"table"`
	FinalizedUntil string `json:"finalized_until"` // RFC 3339, UTC
	Rewound        bool   `json:"rewound"`
	From           string `json:"from"` // the verdict before, RFC 3339 UTC
	ControlTable   string `json:"control_table"`
	// RewoundAt is the rewound_at the rewind stored (RFC 3339 UTC, to
	// the microsecond): the rewind a tracker's advances then carry as
	// known (Advance.Guard). Absent from an earlier release's payload.
	RewoundAt string `json:"rewound_at,omitempty"`
}

// Rewind moves r.Table's verdict back to r.To, in one transaction that
// locks the row, writes the audit entry (who, when, from, to, why, and the
// provenance and mark it replaces), clears the table's mark and the
// provenance of the last move (they described a history that no longer
// holds), moves the watermarks of the table's feeders that are ahead of
// r.To back to it (ADR 0015), sets rewound_at, and sends a notification on NotifyChannel with
// "rewound": true and the rewound_at it stored (Notification.RewoundAt).
// An advance guarded by an earlier rewind (Advance.Guard) that commits
// after it, one that waited for the row's lock behind it included, moves
// nothing (ErrBeforeRewind). Readers of the verdict (is-final, wait, SQL) see the new
// value once it commits; the service's trackers learn of it through the
// notification (Notification.Rewound, see Store.Watch).
//
// With r.Retire, the named feeders are retired in the same transaction.
//
// It returns the audit entry. Errors: ErrInvalidRewind, ErrNotFound (the
// table has no verdict), ErrNotBehind (r.To is not before the verdict:
// nothing changed), ErrNoFeeder (a feeder to retire is not an active
// feeder of the table: nothing changed), ErrUnavailable.
func (s *Store) Rewind(ctx context.Context, r Rewind) (AuditEntry, error) {
	op := "rewind " + r.Table
	if s.closed.Load() {
		return AuditEntry{}, fmt.Errorf("%s: %w", op, ErrClosed)
	}
	if err := CheckTableName(r.Table); err != nil {
		return AuditEntry{}, fmt.Errorf("rewind: %w: %w", ErrInvalidRewind, err)
	}
	switch {
	case r.To.IsZero():
		return AuditEntry{}, fmt.Errorf("%s: %w: no target time", op, ErrInvalidRewind)
	case strings.TrimSpace(r.Reason) == "":
		return AuditEntry{}, fmt.Errorf("%s: %w: a reason is required", op, ErrInvalidRewind)
	case strings.TrimSpace(r.By) == "":
		return AuditEntry{}, fmt.Errorf("%s: %w: the operator is required", op, ErrInvalidRewind)
	}
	to := r.To.UTC().Truncate(time.Microsecond)
	var e AuditEntry
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		// Under the table's lock, as every change of its feeders: a solo
		// table's one feeder joins the feeders table (the table's row
		// loses its query), and the rewind takes them all back.
		if err := s.lockTables(ctx, tx, r.Table); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, s.sql.promoteOne, r.Table); err != nil {
			return err
		}
		v, err := scanVerdict(tx.QueryRow(ctx, s.sql.get+" FOR UPDATE", r.Table))
		if errors.Is(err, pgx.ErrNoRows) {
			return ErrNotFound
		}
		if err != nil {
			return err
		}
		if !to.Before(v.FinalizedUntil) {
			return fmt.Errorf("%w: the verdict is %s, the target %s", ErrNotBehind,
				v.FinalizedUntil.Format(time.RFC3339Nano), to.Format(time.RFC3339Nano))
		}
		// Stamped now, with the row locked, not at the transaction's
		// start (now()): a rewind that waited 40 s behind a reader's lock
		// (FOR SHARE) was stamped 40 s before it became visible, and a
		// progress posted in between read as posted before it (join said
		// so, against the audit). clock_timestamp() here is within
		// milliseconds of the commit; the row's rewound_at and
		// updated_at, the feeders' updated_at and the audit's at take the
		// one value (ADR 0019, addendum of 2026-12-06). The guard
		// (Advance.Guard) compares the stored value with what a tracker
		// knew of it, whatever it is.
		var rewoundAt time.Time
		if err := tx.QueryRow(ctx, `
UPDATE `+s.n.table+` SET finalized_until = $2, end_time = NULL, end_offset = NULL, query_id = NULL,
	run_id = NULL, batch_id = NULL, sources = NULL, updated_at = stamp.at, rewound_at = stamp.at,
	mark = NULL, marked_at = NULL, marks = 0
FROM (SELECT clock_timestamp() AS at) AS stamp
WHERE table_name = $1
RETURNING rewound_at`, r.Table, to).Scan(&rewoundAt); err != nil {
			return err
		}
		// The feeders' watermarks go back with the table (ADR 0015):
		// otherwise the next advance would move it forward again to the
		// lowest of them, undoing the rewind.
		if _, err := tx.Exec(ctx, `
UPDATE `+s.n.feeds+` SET finalized_until = $2, updated_at = $3
WHERE table_name = $1 AND finalized_until > $2`, r.Table, to, rewoundAt); err != nil {
			return err
		}
		e, err = s.audit(ctx, tx, ActionRewind, r.Table, r.Reason, r.By, v, to, rewoundAt)
		if err != nil {
			return err
		}
		why := fmt.Sprintf("rewind %d: %s", e.ID, r.Reason)
		for _, q := range r.Retire {
			// After a checkpoint reset the old and the new query share
			// their name: retiring by a name that matches several feeders
			// would retire the reset query too, and the table would run
			// ahead of the data it is reprocessing. Such a name is refused.
			rows, err := tx.Query(ctx, `
SELECT feeder FROM `+s.n.feeds+`
WHERE table_name = $1 AND (feeder = $2 OR query_name = $2) AND retired_at IS NULL
ORDER BY joined_at, feeder`, r.Table, q)
			if err != nil {
				return err
			}
			match, err := pgx.CollectRows(rows, pgx.RowTo[string])
			if err != nil {
				return err
			}
			if len(match) > 1 && !slices.Contains(match, q) {
				return fmt.Errorf("%w: nothing was rewound", &AmbiguousFeederError{Name: q, Table: r.Table, IDs: match, What: "active"})
			}
			rows, err = tx.Query(ctx, `
UPDATE `+s.n.feeds+` SET retired_at = now(), retired_why = $3
WHERE table_name = $1 AND ((feeder = $2) OR (query_name = $2 AND NOT EXISTS (
	SELECT FROM `+s.n.feeds+` x WHERE x.table_name = $1 AND x.feeder = $2 AND x.retired_at IS NULL)))
	AND retired_at IS NULL
RETURNING feeder`, r.Table, q, why)
			if err != nil {
				return err
			}
			ids, err := pgx.CollectRows(rows, pgx.RowTo[string])
			if err != nil {
				return err
			}
			if len(ids) == 0 {
				return fmt.Errorf("%w %q of %s: nothing was rewound", ErrNoFeeder, q, r.Table)
			}
			e.Retired = append(e.Retired, ids...)
		}
		payload, err := json.Marshal(rewindNotification{
			Table: r.Table, FinalizedUntil: to.Format(time.RFC3339Nano), Rewound: true, ControlTable: s.n.display,
			From:      v.FinalizedUntil.Format(time.RFC3339Nano), // the reason is in the audit table: a payload must stay short
			RewoundAt: rewoundAt.UTC().Format(time.RFC3339Nano),
		})
		if err != nil {
			return err
		}
		_, err = tx.Exec(ctx, "SELECT pg_notify($1, $2)", NotifyChannel, string(payload))
		return err
	})
	switch {
	case errors.Is(err, ErrNotFound):
		return AuditEntry{}, fmt.Errorf("%s: %w", op, ErrNotFound)
	case errors.Is(err, ErrNotBehind), errors.Is(err, ErrNoFeeder), errors.Is(err, ErrAmbiguousFeeder):
		return AuditEntry{}, fmt.Errorf("%s: %w", op, err)
	case err != nil:
		return AuditEntry{}, wrap(ctx, op, err)
	}
	return e, nil
}

// Acknowledge clears a.Table's mark without moving its verdict, and
// records who did it and why in the audit table. A table without a mark
// is acknowledged all the same (the entry says nothing was cleared).
// Errors: ErrInvalidRewind, ErrNotFound, ErrUnavailable.
func (s *Store) Acknowledge(ctx context.Context, a Acknowledge) (AuditEntry, error) {
	op := "acknowledge " + a.Table
	if s.closed.Load() {
		return AuditEntry{}, fmt.Errorf("%s: %w", op, ErrClosed)
	}
	if err := CheckTableName(a.Table); err != nil {
		return AuditEntry{}, fmt.Errorf("acknowledge: %w: %w", ErrInvalidRewind, err)
	}
	switch {
	case strings.TrimSpace(a.Reason) == "":
		return AuditEntry{}, fmt.Errorf("%s: %w: a reason is required", op, ErrInvalidRewind)
	case strings.TrimSpace(a.By) == "":
		return AuditEntry{}, fmt.Errorf("%s: %w: the operator is required", op, ErrInvalidRewind)
	}
	var e AuditEntry
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		v, err := scanVerdict(tx.QueryRow(ctx, s.sql.get+" FOR UPDATE", a.Table))
		if errors.Is(err, pgx.ErrNoRows) {
			return ErrNotFound
		}
		if err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `UPDATE `+s.n.table+` SET mark = NULL, marked_at = NULL, marks = 0 WHERE table_name = $1`, a.Table); err != nil {
			return err
		}
		e, err = s.audit(ctx, tx, ActionAcknowledge, a.Table, a.Reason, a.By, v, v.FinalizedUntil, time.Time{})
		return err
	})
	switch {
	case errors.Is(err, ErrNotFound):
		return AuditEntry{}, fmt.Errorf("%s: %w", op, ErrNotFound)
	case err != nil:
		return AuditEntry{}, wrap(ctx, op, err)
	}
	return e, nil
}

const auditColumns = `id, table_name, action, at, by_operator, db_user, reason, from_until, to_until,
	from_query_id, from_run_id, from_batch_id, from_end_time, cleared_mark, cleared_marks`

// audit records one action on the verdict v (as it stood before) in tx,
// at at (zero: the transaction's start, now()).
func (s *Store) audit(ctx context.Context, tx pgx.Tx, action, table, reason, by string, v Verdict, to, at time.Time) (AuditEntry, error) {
	var batch any
	if v.QueryID != "" || v.BatchID != 0 {
		batch = v.BatchID
	}
	var marks any
	if v.Mark != "" || v.Marks > 0 {
		marks = v.Marks
	}
	row := tx.QueryRow(ctx, `
INSERT INTO `+s.n.audit+` (table_name, action, by_operator, reason, from_until, to_until,
	from_query_id, from_run_id, from_batch_id, from_end_time, cleared_mark, cleared_marks, at)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, coalesce($13, now()))
RETURNING `+auditColumns,
		table, action, by, reason, nullTime(v.FinalizedUntil), nullTime(to), nullString(v.QueryID), nullString(v.RunID),
		batch, nullTime(v.EndTime), nullString(v.Mark), marks, nullTime(at))
	return scanAudit(row)
}

// Audit returns the audit entries of table ("" for every table), newest
// first, at most limit of them (0 = 100).
func (s *Store) Audit(ctx context.Context, table string, limit int) ([]AuditEntry, error) {
	if s.closed.Load() {
		return nil, fmt.Errorf("read audit: %w", ErrClosed)
	}
	if limit <= 0 {
		limit = 100
	}
	rows, err := s.pool.Query(ctx, `SELECT `+auditColumns+` FROM `+s.n.audit+`
WHERE $1 = '' OR table_name = $1 ORDER BY id DESC LIMIT $2`, table, limit)
	if err != nil {
		return nil, wrap(ctx, "read audit", err)
	}
	defer rows.Close()
	out := []AuditEntry{}
	for rows.Next() {
		e, err := scanAudit(rows)
		if err != nil {
			return nil, wrap(ctx, "read audit", err)
		}
		out = append(out, e)
	}
	if err := rows.Err(); err != nil {
		return nil, wrap(ctx, "read audit", err)
	}
	return out, nil
}

func scanAudit(row pgx.Row) (AuditEntry, error) {
	var (
		e                    AuditEntry
		from, to, endTime    *time.Time
		queryID, runID, mark *string
		batch, marks         *int64
	)
	if err := row.Scan(&e.ID, &e.Table, &e.Action, &e.At, &e.By, &e.DBUser, &e.Reason, &from, &to,
		&queryID, &runID, &batch, &endTime, &mark, &marks); err != nil {
		return AuditEntry{}, err
	}
	e.At = e.At.UTC()
	if from != nil {
		e.From = from.UTC()
	}
	if to != nil {
		e.To = to.UTC()
	}
	if endTime != nil {
		e.FromEndTime = endTime.UTC()
	}
	if queryID != nil {
		e.FromQueryID = *queryID
	}
	if runID != nil {
		e.FromRunID = *runID
	}
	if batch != nil {
		e.FromBatchID = *batch
	}
	if mark != nil {
		e.ClearedMark = *mark
	}
	if marks != nil {
		e.ClearedMarks = *marks
	}
	return e, nil
}

// Mark records a sign that table's history changed under its verdict: a
// checkpoint reset, a candidate below the stored end, a source whose
// description changed. The first mark since the last rewind or
// acknowledgement is kept with its time; later ones only count. The
// verdict itself is not touched. It reports whether the table has a row
// (a table without a verdict has nothing to mark: false, nil).
func (s *Store) Mark(ctx context.Context, table, mark string) (bool, error) {
	op := "mark " + table
	if s.closed.Load() {
		return false, fmt.Errorf("%s: %w", op, ErrClosed)
	}
	if table == "" || mark == "" {
		return false, fmt.Errorf("mark: %w: table and mark are required", ErrInvalidRewind)
	}
	tag, err := s.pool.Exec(ctx, `
UPDATE `+s.n.table+` SET mark = coalesce(mark, $2), marked_at = coalesce(marked_at, now()), marks = marks + 1
WHERE table_name = $1`, table, mark)
	if err != nil {
		return false, wrap(ctx, op, err)
	}
	return tag.RowsAffected() > 0, nil
}

// Rewinds returns when each rewound table was last rewound (rewound_at,
// UTC), for the tables an operator ever rewound: usually none or a few.
// A restart's recovery reads it once, so that no tracker applies a
// progress posted before its table's rewind (a run's last progress kept
// in the stream would otherwise undo the rewind at every restart).
func (s *Store) Rewinds(ctx context.Context) (map[string]time.Time, error) {
	if s.closed.Load() {
		return nil, fmt.Errorf("list rewinds: %w", ErrClosed)
	}
	rows, err := s.pool.Query(ctx, `SELECT table_name, rewound_at FROM `+s.n.table+` WHERE rewound_at IS NOT NULL`)
	if err != nil {
		return nil, wrap(ctx, "list rewinds", err)
	}
	defer rows.Close()
	out := map[string]time.Time{}
	for rows.Next() {
		var (
			table string
			at    time.Time
		)
		if err := rows.Scan(&table, &at); err != nil {
			return nil, wrap(ctx, "list rewinds", err)
		}
		out[table] = at.UTC()
	}
	if err := rows.Err(); err != nil {
		return nil, wrap(ctx, "list rewinds", err)
	}
	return out, nil
}

// StreamPosition is where the event stream stood after a rewind
// committed: its last sequence, and when the stream was created (a
// stream deleted and created again starts its sequences again; its
// creation time tells one incarnation from another).
type StreamPosition struct {
	Seq     uint64
	Created time.Time
}

// RewindPosition is a table's last rewind (rewound_at) with the event
// stream's position finalizer rewind recorded for it (RecordRewindPosition).
type RewindPosition struct {
	RewoundAt time.Time
	StreamPosition
}

// RecordRewindPosition records on table's row the event stream's position
// read after its rewind stamped rewoundAt committed (finalizer rewind,
// after Rewind returned): a service that did not hear the rewind live
// judges a progress read from the stream's retained copy by its sequence
// against pos.Seq (ADR 0019, addendum of 2026-12-06, "judged by
// sequence"). The order is what makes it sound: every message stored
// before the commit has a sequence no later than one read after it. It
// records nothing, and reports false, when the row's rewind is no longer
// rewoundAt (rewound again since: a later rewind's row keeps its own,
// or none) or a position is recorded for it already. The position is
// kept beside the control table (its _rwpos table, never touched by the
// statements that move verdicts) with the rewound_at it was recorded
// for: a later rewind, which does not clear it, leaves it unused. It moves no verdict and
// sends no notification.
func (s *Store) RecordRewindPosition(ctx context.Context, table string, rewoundAt time.Time, pos StreamPosition) (bool, error) {
	op := "record the stream's position for the rewind of " + table
	if s.closed.Load() {
		return false, fmt.Errorf("%s: %w", op, ErrClosed)
	}
	if pos.Seq > math.MaxInt64 || pos.Created.IsZero() {
		return false, fmt.Errorf("%s: sequence %d created %v: not recordable", op, pos.Seq, pos.Created)
	}
	tag, err := s.pool.Exec(ctx, `
INSERT INTO `+s.n.rwpos+` AS p (table_name, rewound_at, seq, stream_created)
SELECT table_name, rewound_at, $3, $4 FROM `+s.n.table+` WHERE table_name = $1 AND rewound_at = $2
ON CONFLICT (table_name) DO UPDATE SET rewound_at = EXCLUDED.rewound_at, seq = EXCLUDED.seq, stream_created = EXCLUDED.stream_created
	WHERE p.rewound_at IS DISTINCT FROM EXCLUDED.rewound_at`, table, rewoundAt, int64(pos.Seq), pos.Created)
	if err != nil {
		return false, wrap(ctx, op, err)
	}
	return tag.RowsAffected() == 1, nil
}

// RewindsWithPositions is Rewinds, in the same one statement with the
// event stream's position recorded with each table's last rewind
// (RecordRewindPosition), for the tables that have one: the service reads
// both whenever it reads the rewinds, with no statement more.
func (s *Store) RewindsWithPositions(ctx context.Context) (map[string]time.Time, map[string]RewindPosition, error) {
	if s.closed.Load() {
		return nil, nil, fmt.Errorf("list rewinds: %w", ErrClosed)
	}
	rows, err := s.pool.Query(ctx, `
SELECT c.table_name, c.rewound_at, p.seq, p.stream_created
FROM `+s.n.table+` c LEFT JOIN `+s.n.rwpos+` p ON p.table_name = c.table_name AND p.rewound_at = c.rewound_at
WHERE c.rewound_at IS NOT NULL`)
	if err != nil {
		return nil, nil, wrap(ctx, "list rewinds", err)
	}
	defer rows.Close()
	at, positions := map[string]time.Time{}, map[string]RewindPosition{}
	for rows.Next() {
		var (
			table   string
			when    time.Time
			seq     *int64
			created *time.Time
		)
		if err := rows.Scan(&table, &when, &seq, &created); err != nil {
			return nil, nil, wrap(ctx, "list rewinds", err)
		}
		at[table] = when.UTC()
		if seq != nil && *seq >= 0 && created != nil {
			positions[table] = RewindPosition{RewoundAt: when.UTC(), StreamPosition: StreamPosition{Seq: uint64(*seq), Created: created.UTC()}}
		}
	}
	if err := rows.Err(); err != nil {
		return nil, nil, wrap(ctx, "list rewinds", err)
	}
	return at, positions, nil
}

// RewindPositions is the positions of RewindsWithPositions alone.
func (s *Store) RewindPositions(ctx context.Context) (map[string]RewindPosition, error) {
	_, positions, err := s.RewindsWithPositions(ctx)
	return positions, err
}

// SameStream reports whether a stream created at a is the one created at
// b: the control table keeps the creation time to the microsecond, the
// server says it to the nanosecond.
func SameStream(a, b time.Time) bool {
	return !a.IsZero() && !b.IsZero() && a.Sub(b).Abs() < time.Microsecond
}
