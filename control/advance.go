package control

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"go.uber.org/zap"
)

// statements are the SQL texts of one control table, built once from its
// quoted names.
type statements struct {
	advance    string
	settle     string
	get        string
	list       string
	feeders    string
	allFeeders string
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

// rfc3339 is the SQL text of a timestamptz column col as Go's
// time.RFC3339Nano writes it in UTC: the notification says what is stored,
// exactly as earlier releases wrote it from Go.
func rfc3339(col string) string {
	return `to_char(` + col + ` AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS') ||
		CASE WHEN to_char(` + col + ` AT TIME ZONE 'UTC', 'US') = '000000' THEN ''
		ELSE '.' || rtrim(to_char(` + col + ` AT TIME ZONE 'UTC', 'US'), '0') END || 'Z'`
}

// moveToLowest is the end of the advance and settle statements. It needs
// a CTE "input" (table_name, payload: the notification up to the time)
// and a CTE "state": the feeders of the input's tables that are not
// retired, one row each. Per table, the feeder with the lowest watermark
// holds it (one that has not reported, a NULL watermark, holds it where it
// stands); the table's verdict is upserted forward-only to that watermark,
// with that feeder's provenance, and a notification goes out per moved
// row in the same transaction. A table the snapshot already shows at or
// beyond it is not offered to the upsert: a no-op is a read.
//
// The "notified" CTE is a SELECT: it runs only because the first branch
// reads it, once per moved row. The second branch reads the standing rows
// of the tables that did not move (as of the statement's snapshot: see
// AdvanceBatch for why that can be stale).
func moveToLowest(n names) string {
	return `, low AS (
	SELECT DISTINCT ON (table_name) table_name, feeder, finalized_until, end_time, end_offset, run_id, batch_id, sources
	FROM state ORDER BY table_name, finalized_until NULLS FIRST, feeder
), moved AS (
	INSERT INTO ` + n.table + ` AS c (` + verdictColumns + `)
	SELECT l.table_name, l.finalized_until, l.end_time, l.end_offset, nullif(l.feeder, ''), l.run_id, l.batch_id, l.sources, now()
	FROM low l
	WHERE l.finalized_until IS NOT NULL
		AND NOT EXISTS (SELECT FROM ` + n.table + ` x WHERE x.table_name = l.table_name AND x.finalized_until >= l.finalized_until)
	ORDER BY l.table_name
` + forwardOnly + `
), notified AS (
	SELECT pg_notify('` + NotifyChannel + `', p.payload || ` + rfc3339("m.finalized_until") + ` || '"}')
	FROM moved m JOIN (SELECT DISTINCT table_name, payload FROM input) p USING (table_name)
)
SELECT true, ` + readColumns + `, (SELECT count(*) FROM notified) FROM moved
UNION ALL
SELECT false, ` + readColumns + `, 0 FROM ` + n.table + `
WHERE table_name IN (SELECT table_name FROM input) AND table_name NOT IN (SELECT table_name FROM moved)`
}

// feederColumns are read, in this order, by scanFeeder.
const feederColumns = `table_name, feeder, query_name, finalized_until, end_time, run_id, batch_id, expected, joined_at, updated_at, retired_at, retired_why`

func newStatements(n names) statements {
	return statements{
		// One statement, so one transaction and one round trip, whatever
		// the number of feeders: the feeder's own watermark moves
		// forward-only ("fed"), an expected feeder configured by the
		// query's name is resolved to its id ("resolved"), and the table
		// moves to the lowest watermark of its feeders as this statement
		// sees them: its own writes fresh, the other feeders' rows from
		// its snapshot ("state"). A feeder already at or beyond its
		// candidate is not offered to the upsert, so a no-op advance is a
		// read. Rows are written in (table, feeder) then table order, so
		// two statements meeting the same rows cannot deadlock.
		advance: `
WITH input AS (
	SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::timestamptz[], $5::timestamptz[], $6::text[], $7::text[], $8::bigint[], $9::text[], $10::text[])
		AS i(table_name, feeder, query_name, finalized_until, end_time, end_offset, run_id, batch_id, sources, payload)
), fed AS (
	INSERT INTO ` + n.feeds + ` AS f (table_name, feeder, query_name, finalized_until, end_time, end_offset, run_id, batch_id, sources)
	SELECT i.table_name, i.feeder, i.query_name, i.finalized_until, i.end_time, i.end_offset::jsonb, i.run_id, i.batch_id, i.sources::jsonb
	FROM input i
	WHERE NOT EXISTS (SELECT FROM ` + n.feeds + ` x WHERE x.table_name = i.table_name AND x.feeder = i.feeder AND x.finalized_until >= i.finalized_until)
	ORDER BY i.table_name, i.feeder
	ON CONFLICT (table_name, feeder) DO UPDATE SET
		query_name      = coalesce(EXCLUDED.query_name, f.query_name),
		finalized_until = EXCLUDED.finalized_until,
		end_time        = EXCLUDED.end_time,
		end_offset      = EXCLUDED.end_offset,
		run_id          = EXCLUDED.run_id,
		batch_id        = EXCLUDED.batch_id,
		sources         = EXCLUDED.sources,
		updated_at      = now()
	WHERE f.finalized_until IS NULL OR EXCLUDED.finalized_until > f.finalized_until
	RETURNING f.table_name, f.feeder, f.finalized_until, f.end_time, f.end_offset, f.run_id, f.batch_id, f.sources, f.retired_at
), resolved AS (
	UPDATE ` + n.feeds + ` p SET retired_at = now(), retired_why = 'reported as query ' || i.feeder
	FROM input i
	WHERE p.table_name = i.table_name AND p.feeder = i.query_name AND p.feeder <> i.feeder
		AND p.expected AND p.finalized_until IS NULL AND p.retired_at IS NULL
	RETURNING p.table_name, p.feeder
), state AS (
	SELECT table_name, feeder, finalized_until, end_time, end_offset, run_id, batch_id, sources FROM fed WHERE retired_at IS NULL
	UNION ALL
	SELECT f.table_name, f.feeder, f.finalized_until, f.end_time, f.end_offset, f.run_id, f.batch_id, f.sources FROM ` + n.feeds + ` f
	WHERE f.table_name IN (SELECT table_name FROM input) AND f.retired_at IS NULL
		AND (f.table_name, f.feeder) NOT IN (SELECT table_name, feeder FROM fed)
		AND (f.table_name, f.feeder) NOT IN (SELECT table_name, feeder FROM resolved)
)` + moveToLowest(n),
		// settle moves tables to the lowest watermark of their feeders as
		// they stand: after a retirement, and after an advance that left
		// its table behind its own candidate (held, or a snapshot that
		// missed a concurrent writer). A new statement sees every commit
		// before it began.
		settle: `
WITH input AS (
	SELECT * FROM unnest($1::text[], $2::text[]) AS i(table_name, payload)
), state AS (
	SELECT f.table_name, f.feeder, f.finalized_until, f.end_time, f.end_offset, f.run_id, f.batch_id, f.sources FROM ` + n.feeds + ` f
	WHERE f.table_name IN (SELECT table_name FROM input) AND f.retired_at IS NULL
)` + moveToLowest(n),
		get:        `SELECT ` + readColumns + ` FROM ` + n.table + ` WHERE table_name = $1`,
		list:       `SELECT ` + readColumns + ` FROM ` + n.table + ` ORDER BY table_name`,
		feeders:    `SELECT ` + feederColumns + ` FROM ` + n.feeds + ` WHERE table_name = $1 ORDER BY joined_at, feeder`,
		allFeeders: `SELECT ` + feederColumns + ` FROM ` + n.feeds + ` ORDER BY table_name, joined_at, feeder`,
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

// payloadPrefix is the notification of a move of table up to the time's
// opening quote: the statement appends the time it moved to and '"}'. Go
// escapes the table's name, as earlier releases did for the whole payload.
func payloadPrefix(table string) (string, error) {
	b, err := json.Marshal(notification{Table: table})
	if err != nil {
		return "", err
	}
	return strings.TrimSuffix(string(b), `"}`), nil
}

// maxRFC3339Len is the longest time rfc3339 writes for a notification:
// 2006-01-02T15:04:05.999999Z.
const maxRFC3339Len = len("2006-01-02T15:04:05.999999Z")

// check validates a and returns the time to store (pgx sends
// microseconds, truncating, and the notification must say what is stored)
// and the notification's payload up to the time (payloadPrefix), which the
// statement completes to a payload always shorter than pg_notify's limit.
// Advance and AdvanceBatch validate with it alone (through newBatchRow).
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
	prefix, err := payloadPrefix(a.Table)
	if err != nil {
		return time.Time{}, "", fmt.Errorf("%s: %w", op, err)
	}
	if n := len(prefix) + maxRFC3339Len + len(`"}`); n >= maxNotifyPayload { // unreachable with CheckTableName's cap; never send one
		return time.Time{}, "", fmt.Errorf("%s: %w: notification of %d bytes", op, ErrInvalidAdvance, n)
	}
	return until, prefix, nil
}

// Advance moves the watermark of a.Table's feeder a.QueryID (the query
// that wrote the data) forward to a.FinalizedUntil, and the table's
// verdict forward to the lowest watermark of the table's feeders that are
// not retired (ADR 0015), in one statement, so in one transaction and one
// round trip. A table with one feeder moves with it, as before feeders
// existed: the row is inserted when the table has none, and updated only
// when its finalized_until is NULL or earlier than the candidate, with the
// provenance (end_time, end_offset, query_id, run_id, batch_id) of the
// feeder that holds the table and updated_at. When, and only when, the row
// moved, the same transaction sends a notification on NotifyChannel.
//
// It returns the table's verdict as it stands after the call and whether
// this call moved it. The verdict may be behind the candidate: another
// feeder holds the table (then, if the table has no row yet, the Verdict
// has only its Table set). An older or same-period candidate changes
// nothing and returns the standing verdict with moved false. A QueryName
// resolves an expected feeder configured by that name (ExpectFeeders).
// Times are stored with microsecond precision and returned in UTC. An
// EndOffset that jsonb cannot hold as it is (a \u0000 escape, a lone
// surrogate, bytes that are not UTF-8) is stored with those parts escaped
// (see jsonbSafe), and one the database still refuses is stored as NULL:
// the offset never blocks the verdict.
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
	r, err := newBatchRow(0, a)
	if err != nil {
		return Verdict{}, false, err
	}
	k := feederKey{a.Table, a.QueryID}
	rows, order := map[feederKey]*batchRow{k: r}, []feederKey{k}
	verdicts, movedBy, err := s.advance(ctx, []Advance{a}, rows, order)
	if err != nil && r.offset != nil && offsetRefused(err) {
		// The offset is provenance; the verdict must not wait on it (a
		// database whose encoding is not UTF-8 refuses more than jsonbSafe
		// knows). Advance without it.
		s.log.Warn("postgresql refused the end offset; advancing without it",
			zap.String("table", a.Table), zap.String("run_id", a.RunID), zap.Error(err))
		r.offset = nil
		verdicts, movedBy, err = s.advance(ctx, []Advance{a}, rows, order)
	}
	if err != nil {
		return Verdict{}, false, wrap(ctx, op, err)
	}
	v, ok := verdicts[a.Table]
	moved = movedBy[a.Table]
	if ok && !v.FinalizedUntil.Before(r.until) {
		return v, moved, nil
	}
	// The table is behind the candidate: another feeder holds it, or the
	// statement's snapshot, taken before it waited for a concurrent
	// writer's commit, missed that writer's row. A new statement sees
	// every commit before it began (see AdvanceBatch).
	settled, settledMoved, err := s.settle(ctx, []string{a.Table})
	if err != nil {
		// The feeder's watermark is stored; retrying (the tracker does) is
		// a no-op for it and settles the table.
		return Verdict{}, false, wrap(ctx, op+": settle", err)
	}
	if sv, ok := settled[a.Table]; ok {
		v = sv
	} else {
		v = Verdict{Table: a.Table} // held before its first verdict
	}
	return v, moved || settledMoved[a.Table], nil
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
