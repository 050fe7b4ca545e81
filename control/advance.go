package control

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"go.uber.org/zap"
)

// statements are the SQL texts of one control table, built once from its
// quoted names.
type statements struct {
	advance      string
	advanceBatch string
	get          string
	list         string
}

// verdictColumns are the columns an advance writes; with markColumns, they
// are read, in this order, by scanVerdict (readColumns).
const verdictColumns = `table_name, finalized_until, end_time, end_offset, query_id, run_id, batch_id, sources, updated_at`

// markColumns are the columns only marks and rewinds write.
const markColumns = `mark, marked_at, marks, rewound_at`

// readColumns are what scanVerdict reads.
const readColumns = verdictColumns + `, ` + markColumns

// forwardOnly ends the upsert of Advance and AdvanceBatch: the one place
// that says a verdict only moves forward. It writes the provenance with
// the move and returns the rows that moved (the insert's target is aliased
// c).
const forwardOnly = `ON CONFLICT (table_name) DO UPDATE SET
		finalized_until = EXCLUDED.finalized_until,
		end_time        = EXCLUDED.end_time,
		end_offset      = EXCLUDED.end_offset,
		query_id        = EXCLUDED.query_id,
		run_id          = EXCLUDED.run_id,
		batch_id        = EXCLUDED.batch_id,
		sources         = EXCLUDED.sources,
		updated_at      = EXCLUDED.updated_at
	WHERE c.finalized_until IS NULL OR EXCLUDED.finalized_until > c.finalized_until
	RETURNING ` + readColumns

func newStatements(n names) statements {
	return statements{
		// One statement, so one transaction: the upsert moves the row only
		// forward, the notification goes out only when it moved (a
		// NOTIFY is delivered at commit, so listeners never hear of a move
		// that rolled back), and the row is returned as it stands.
		//
		// When the snapshot already shows the row at or beyond the
		// candidate, nothing is inserted or locked: a no-op advance is a
		// read, with no transaction id and no WAL flush at commit.
		//
		// The "notified" CTE is a SELECT: it runs only because the first
		// branch reads it, once per moved row. The second branch reads the
		// standing row when nothing moved; see Advance for why that read
		// can be stale.
		advance: `
WITH moved AS (
	INSERT INTO ` + n.table + ` AS c (` + verdictColumns + `)
	SELECT $1::text, $2::timestamptz, $3::timestamptz, $4::jsonb, $5::text, $6::text, $7::bigint, $9::jsonb, now()
	WHERE NOT EXISTS (SELECT FROM ` + n.table + ` WHERE table_name = $1::text AND finalized_until >= $2::timestamptz)
` + forwardOnly + `
), notified AS (
	SELECT pg_notify('` + NotifyChannel + `', $8::text) FROM moved
)
SELECT true, ` + readColumns + `, (SELECT count(*) FROM notified) FROM moved
UNION ALL
SELECT false, ` + readColumns + `, 0 FROM ` + n.table + `
WHERE table_name = $1::text AND NOT EXISTS (SELECT FROM moved)`,
		advanceBatch: advanceBatchSQL(n),
		get:          `SELECT ` + readColumns + ` FROM ` + n.table + ` WHERE table_name = $1`,
		list:         `SELECT ` + readColumns + ` FROM ` + n.table + ` ORDER BY table_name`,
	}
}

// notification is the payload sent on NotifyChannel when a verdict moves.
type notification struct {
	Table          string `json:"table"`
	FinalizedUntil string `json:"finalized_until"` // RFC 3339, UTC
	// Rewound is set on a rewind's notification only (see Store.Rewind);
	// a forward move's payload does not carry it.
	Rewound bool `json:"rewound,omitempty"`
}

// check validates a and returns the time to store (pgx sends
// microseconds, truncating, and the notification must say what is stored)
// and the notification's payload, which is always shorter than
// pg_notify's limit.
func (a Advance) check() (time.Time, string, error) {
	op := "advance " + a.Table
	if err := CheckTableName(a.Table); err != nil {
		return time.Time{}, "", fmt.Errorf("advance: %w: %w", ErrInvalidAdvance, err)
	}
	switch {
	case a.FinalizedUntil.IsZero():
		return time.Time{}, "", fmt.Errorf("%s: %w: no finalized_until", op, ErrInvalidAdvance)
	case len(a.EndOffset) > 0 && !json.Valid(a.EndOffset):
		return time.Time{}, "", fmt.Errorf("%s: %w: end offset is not JSON", op, ErrInvalidAdvance)
	}
	until := a.FinalizedUntil.UTC().Truncate(time.Microsecond)
	payload, err := json.Marshal(notification{Table: a.Table, FinalizedUntil: until.Format(time.RFC3339Nano)})
	if err != nil {
		return time.Time{}, "", fmt.Errorf("%s: %w", op, err)
	}
	if len(payload) >= maxNotifyPayload { // unreachable with CheckTableName's cap; never send one
		return time.Time{}, "", fmt.Errorf("%s: %w: notification of %d bytes", op, ErrInvalidAdvance, len(payload))
	}
	return until, string(payload), nil
}

// Advance moves a.Table's verdict forward to a.FinalizedUntil, in one
// statement: it inserts the row when the table has none, and updates it only
// when the row's finalized_until is NULL or earlier than the candidate,
// writing the provenance (end_time, end_offset, query_id, run_id, batch_id)
// and updated_at. When, and only when, the row moved, the same transaction
// sends a notification on NotifyChannel.
//
// It returns the verdict as it stands after the call, which is another
// writer's when that one is at or beyond the candidate, and whether this
// call moved it. An older or same-period candidate changes nothing and
// returns the standing verdict with moved false. Times are stored with
// microsecond precision and returned in UTC. An EndOffset that jsonb cannot
// hold as it is (a \u0000 escape, a lone surrogate, bytes that are not
// UTF-8) is stored with those parts escaped (see jsonbSafe), and one the
// database still refuses is stored as NULL: the offset never blocks the
// verdict.
//
// Errors: ErrInvalidAdvance (a table name CheckTableName refuses, no
// time, EndOffset not JSON),
// ErrUnavailable (PostgreSQL unreachable; nothing or everything was
// written, and retrying is safe because the advance is idempotent),
// ErrNotMigrated (no control table).
func (s *Store) Advance(ctx context.Context, a Advance) (v Verdict, moved bool, err error) {
	op := "advance " + a.Table
	if s.closed.Load() {
		return Verdict{}, false, fmt.Errorf("%s: %w", op, ErrClosed)
	}
	until, payload, err := a.check()
	if err != nil {
		return Verdict{}, false, err
	}
	var endOffset any
	if len(a.EndOffset) > 0 {
		endOffset = jsonbSafe(a.EndOffset)
	}
	sources, err := sourcesJSON(a.Sources)
	if err != nil {
		return Verdict{}, false, fmt.Errorf("%s: %w", op, err)
	}
	var notified int64
	row := s.pool.QueryRow(ctx, s.sql.advance,
		a.Table, until, nullTime(a.EndTime), endOffset, nullString(a.QueryID), nullString(a.RunID), a.BatchID, payload, sources)
	v, err = scanVerdict(row, &moved, &notified)
	if err != nil && endOffset != nil && offsetRefused(err) {
		// The offset is provenance; the verdict must not wait on it (a
		// database whose encoding is not UTF-8 refuses more than jsonbSafe
		// knows). Advance without it.
		s.log.Warn("postgresql refused the end offset; advancing without it",
			zap.String("table", a.Table), zap.String("run_id", a.RunID), zap.Error(err))
		row = s.pool.QueryRow(ctx, s.sql.advance,
			a.Table, until, nullTime(a.EndTime), nil, nullString(a.QueryID), nullString(a.RunID), a.BatchID, payload, sources)
		v, err = scanVerdict(row, &moved, &notified)
	}
	switch {
	case err == nil && moved:
		return v, true, nil
	case err == nil && !v.FinalizedUntil.Before(until):
		return v, false, nil
	case err != nil && !errors.Is(err, pgx.ErrNoRows):
		return Verdict{}, false, wrap(ctx, op, err)
	}
	// Nothing moved, so the row the upsert met is at or beyond the
	// candidate; but the statement's snapshot, taken before it waited for a
	// concurrent writer's commit, saw no row or an older one. Read it again:
	// a new statement sees what that writer committed.
	v, err = s.Get(ctx, a.Table)
	if err != nil {
		return Verdict{}, false, fmt.Errorf("advance %s: read back: %w", a.Table, err)
	}
	return v, false, nil
}

// Get returns the table's verdict, or ErrNotFound when it has none, or
// ErrInvalidTable, without asking PostgreSQL, for a name CheckTableName
// refuses.
func (s *Store) Get(ctx context.Context, table string) (Verdict, error) {
	if s.closed.Load() {
		return Verdict{}, fmt.Errorf("get %s: %w", table, ErrClosed)
	}
	if err := CheckTableName(table); err != nil {
		return Verdict{}, fmt.Errorf("get: %w", err)
	}
	v, err := scanVerdict(s.pool.QueryRow(ctx, s.sql.get, table))
	if errors.Is(err, pgx.ErrNoRows) {
		return Verdict{}, fmt.Errorf("get %s: %w", table, ErrNotFound)
	}
	if err != nil {
		return Verdict{}, wrap(ctx, "get "+table, err)
	}
	return v, nil
}

// List returns every table's verdict, ordered by table name; an empty
// control table gives an empty slice.
func (s *Store) List(ctx context.Context) ([]Verdict, error) {
	if s.closed.Load() {
		return nil, fmt.Errorf("list verdicts: %w", ErrClosed)
	}
	rows, err := s.pool.Query(ctx, s.sql.list)
	if err != nil {
		return nil, wrap(ctx, "list verdicts", err)
	}
	defer rows.Close()
	verdicts := []Verdict{}
	for rows.Next() {
		v, err := scanVerdict(rows)
		if err != nil {
			return nil, wrap(ctx, "list verdicts", err)
		}
		verdicts = append(verdicts, v)
	}
	if err := rows.Err(); err != nil {
		return nil, wrap(ctx, "list verdicts", err)
	}
	return verdicts, nil
}

// IsFinal reports whether the period of table ending at periodEnd is
// complete: periodEnd <= finalized_until, compared as instants (so
// 11:00-03:00 is final against a verdict of 14:00Z, 12:00-03:00 is not). A
// table with no verdict is not final (false, nil).
func (s *Store) IsFinal(ctx context.Context, table string, periodEnd time.Time) (bool, error) {
	v, err := s.Get(ctx, table)
	if errors.Is(err, ErrNotFound) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("is final: %w", err)
	}
	return v.Reaches(periodEnd), nil
}

// Reaches reports whether the verdict declares complete every period
// ending at or before t: finalized_until >= t as instants. A verdict with
// no finalized_until reaches nothing.
func (v Verdict) Reaches(t time.Time) bool {
	return !v.FinalizedUntil.IsZero() && !t.After(v.FinalizedUntil)
}

// scanVerdict reads readColumns, after the leading and before the
// trailing destinations given in around (the first is read before the
// columns, any others after).
func scanVerdict(row pgx.Row, around ...any) (Verdict, error) {
	var (
		v                 Verdict
		until, endTime    *time.Time
		queryID, runID    *string
		batchID           *int64
		endOffset         []byte
		sources           []byte
		mark              *string
		markedAt, rewound *time.Time
		dest              []any
		leading, trailing []any
		updatedAt         time.Time
	)
	if len(around) > 0 {
		leading, trailing = around[:1], around[1:]
	}
	dest = append(dest, leading...)
	dest = append(dest, &v.Table, &until, &endTime, &endOffset, &queryID, &runID, &batchID, &sources, &updatedAt,
		&mark, &markedAt, &v.Marks, &rewound)
	dest = append(dest, trailing...)
	if err := row.Scan(dest...); err != nil {
		return Verdict{}, err
	}
	if until != nil {
		v.FinalizedUntil = until.UTC()
	}
	if endTime != nil {
		v.EndTime = endTime.UTC()
	}
	if len(endOffset) > 0 {
		v.EndOffset = json.RawMessage(endOffset)
	}
	if queryID != nil {
		v.QueryID = *queryID
	}
	if runID != nil {
		v.RunID = *runID
	}
	if batchID != nil {
		v.BatchID = *batchID
	}
	if len(sources) > 0 {
		// Written by sourcesJSON; anything else (an operator's edit) is
		// shown as no sources rather than failing the read.
		_ = json.Unmarshal(sources, &v.Sources)
	}
	v.UpdatedAt = updatedAt.UTC()
	if mark != nil {
		v.Mark = *mark
	}
	if markedAt != nil {
		v.MarkedAt = markedAt.UTC()
	}
	if rewound != nil {
		v.RewoundAt = rewound.UTC()
	}
	return v, nil
}

// sourcesJSON is the jsonb text of an advance's source descriptions, or
// SQL NULL when there are none. A description that is not valid UTF-8 is
// stored with its bad bytes replaced (encoding/json does that): it is
// provenance and must never block a verdict.
func sourcesJSON(descs []string) (any, error) {
	if descs == nil {
		return nil, nil
	}
	b, err := json.Marshal(descs)
	if err != nil {
		return nil, fmt.Errorf("source descriptions: %w", err)
	}
	return string(jsonbSafe(b)), nil
}

// nullString is s, or SQL NULL when s is empty.
func nullString(s string) any {
	if s == "" {
		return nil
	}
	return s
}

// nullTime is t, or SQL NULL when t is zero.
func nullTime(t time.Time) any {
	if t.IsZero() {
		return nil
	}
	return t
}
