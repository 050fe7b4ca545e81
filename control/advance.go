package control

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
)

// statements are the SQL texts of one control table, built once from its
// quoted names.
type statements struct {
	sole       string
	soleOne    string
	lockKeys   string
	lockRows   string
	promote    string
	promoteOne string
	advance    string
	settle     string
	get        string
	list       string
	untils     string
	feeders    string
	allFeeders string
	join       string
	retired    string
	known      string
	busy       string
}

// verdictColumns are the columns an advance writes; with markColumns, they
// are read, in this order, by scanVerdict (readColumns).
const verdictColumns = `table_name, finalized_until, end_time, end_offset, query_id, run_id, batch_id, sources, updated_at`

// markColumns are the columns only marks and rewinds write.
const markColumns = `mark, marked_at, marks, rewound_at`

// readColumns are what scanVerdict reads.
const readColumns = verdictColumns + `, ` + markColumns

// provenanceSet is the SET list of an upsert of the control table that
// moves a verdict: the time and the provenance of the move (the insert's
// target is aliased c, the proposed row EXCLUDED).
const provenanceSet = `
		finalized_until = EXCLUDED.finalized_until,
		end_time        = EXCLUDED.end_time,
		end_offset      = EXCLUDED.end_offset,
		query_id        = EXCLUDED.query_id,
		run_id          = EXCLUDED.run_id,
		batch_id        = EXCLUDED.batch_id,
		sources         = EXCLUDED.sources,
		updated_at      = EXCLUDED.updated_at`

// rfc3339 is the SQL text of a timestamptz column col as Go's
// time.RFC3339Nano writes it in UTC: the notification says what is stored,
// exactly as earlier releases wrote it from Go.
func rfc3339(col string) string {
	return `to_char(` + col + ` AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS') ||
		CASE WHEN to_char(` + col + ` AT TIME ZONE 'UTC', 'US') = '000000' THEN ''
		ELSE '.' || rtrim(to_char(` + col + ` AT TIME ZONE 'UTC', 'US'), '0') END || 'Z'`
}

// notifyAndReturn ends the sole and the advance statements. It needs a
// CTE "input" (table_name, payload: the notification up to the time) and
// a CTE "moved" (the table rows that moved, readColumns and solo): a
// notification goes out per moved row in the same transaction, and the
// statement returns, per table of the input, (moved, readColumns,
// notified, solo, written) where written is the extra expression (the
// feeder rows the statement wrote, or 0). The second branch reads the
// standing rows of the tables that did not move, as of the statement's
// snapshot: it looks up only those (the input's tables less the moved
// ones), so a group where every table moves (the top of a period) reads
// no row twice; probing every input table and filtering out the moved
// ones was a fifth of the sole statement's time for 1,000 tables. It
// looks each one up by primary key, a LATERAL with LIMIT, which the
// planner keeps a lookup per table: written as "IN", it was planned, with
// some statistics, as a hash join over a scan of every table's row.
//
// The "notified" CTE is a SELECT: it runs only because the first branch
// reads it, once per moved row.
func notifyAndReturn(n names, written string) string {
	return `, notified AS (
	SELECT pg_notify('` + NotifyChannel + `', p.payload || ` + rfc3339("m.finalized_until") + ` || ` + sqlLiteral(n.notifyEnd) + `)
	FROM moved m JOIN (SELECT DISTINCT table_name, payload FROM input) p USING (table_name)
)
SELECT true, ` + readColumns + `, (SELECT count(*) FROM notified), solo, ` + written + ` FROM moved
UNION ALL
SELECT r.* FROM (SELECT table_name FROM input EXCEPT SELECT table_name FROM moved) u
CROSS JOIN LATERAL (SELECT false, ` + readColumns + `, 0, solo, ` + written + ` FROM ` + n.table + ` x
	WHERE x.table_name = u.table_name LIMIT 1) r`
}

// moveToLowest is the end of the advance and settle statements. It needs
// a CTE "input" (table_name, payload) and a CTE "state": the feeders of
// the input's tables that are not retired, one row each, exactly as they
// stand (both statements run under the tables' advisory locks, see
// lockKeys). Per table, the feeder with the lowest watermark holds it (one
// that has not reported, a NULL watermark, holds it where it stands); the
// table's verdict is upserted forward-only to that watermark, with that
// feeder's provenance. A table left with one active feeder becomes solo
// again when it moves (see the sole statement). A table the snapshot
// already shows at or beyond it is not offered to the upsert: a no-op is a
// read.
func moveToLowest(n names, written string) string {
	return `, low AS (
	SELECT DISTINCT ON (table_name) table_name, feeder, finalized_until, end_time, end_offset, run_id, batch_id, sources, active
	FROM (SELECT *, count(*) OVER (PARTITION BY table_name) AS active FROM state) s
	ORDER BY table_name, finalized_until NULLS FIRST, feeder
), moved AS (
	INSERT INTO ` + n.table + ` AS c (` + verdictColumns + `, solo)
	SELECT l.table_name, l.finalized_until, l.end_time, l.end_offset, nullif(l.feeder, ''), l.run_id, l.batch_id, l.sources, now(), l.active = 1
	FROM low l
	LEFT JOIN LATERAL (SELECT true AS at FROM ` + n.table + ` x WHERE x.table_name = l.table_name
		AND x.finalized_until >= l.finalized_until LIMIT 1) x ON true
	WHERE l.finalized_until IS NOT NULL AND x.at IS NULL
	ORDER BY l.table_name
	ON CONFLICT (table_name) DO UPDATE SET` + provenanceSet + `,
		solo            = EXCLUDED.solo
	WHERE c.finalized_until IS NULL OR EXCLUDED.finalized_until > c.finalized_until
	RETURNING ` + readColumns + `, solo
)` + notifyAndReturn(n, written)
}

// feederColumns are read, in this order, by scanFeeder.
const feederColumns = `table_name, feeder, query_name, finalized_until, end_time, run_id, batch_id, expected, joined_at, updated_at, retired_at, retired_why`

// feedersView is the feeders table as readers see it: a solo table's one
// feeder has its watermark and provenance in the table's own row (the
// sole statement writes nothing else), so its row here, if any, is read
// through that one; a solo table whose feeder has no row here yet (a
// table migrated in place) shows it all the same.
func feedersView(n names) string {
	return `(
	SELECT f.table_name, f.feeder, f.query_name,
		CASE WHEN c.solo THEN c.finalized_until ELSE f.finalized_until END AS finalized_until,
		CASE WHEN c.solo THEN c.end_time ELSE f.end_time END AS end_time,
		CASE WHEN c.solo THEN c.run_id ELSE f.run_id END AS run_id,
		CASE WHEN c.solo THEN c.batch_id ELSE f.batch_id END AS batch_id,
		f.expected, f.joined_at,
		CASE WHEN c.solo THEN c.updated_at ELSE f.updated_at END AS updated_at,
		f.retired_at, f.retired_why
	FROM ` + n.feeds + ` f LEFT JOIN ` + n.table + ` c
		ON c.solo AND c.table_name = f.table_name AND coalesce(c.query_id, '') = f.feeder
	UNION ALL
	SELECT c.table_name, coalesce(c.query_id, ''), NULL, c.finalized_until, c.end_time, c.run_id, c.batch_id,
		false, c.updated_at, c.updated_at, NULL, NULL
	FROM ` + n.table + ` c
	WHERE c.solo AND NOT EXISTS (SELECT FROM ` + n.feeds + ` x WHERE x.table_name = c.table_name AND x.feeder = coalesce(c.query_id, ''))
) v`
}

// promoted is the end of the promote statements: a CTE "promoted" returns
// the solo rows just made shared (their one feeder's id, watermark and
// provenance, as the table's row has them), and their feeder's row is
// brought up to them, forward-only, so that the feeders table holds every
// feeder from then on.
func promoted(n names) string {
	return `
INSERT INTO ` + n.feeds + ` AS f (table_name, feeder, finalized_until, end_time, end_offset, run_id, batch_id, sources)
SELECT table_name, feeder, finalized_until, end_time, end_offset, run_id, batch_id, sources FROM promoted ORDER BY table_name
ON CONFLICT (table_name, feeder) DO UPDATE SET
	finalized_until = EXCLUDED.finalized_until,
	end_time        = EXCLUDED.end_time,
	end_offset      = EXCLUDED.end_offset,
	run_id          = EXCLUDED.run_id,
	batch_id        = EXCLUDED.batch_id,
	sources         = EXCLUDED.sources,
	updated_at      = now()
WHERE f.finalized_until IS NULL OR f.finalized_until < EXCLUDED.finalized_until`
}

// promotedColumns are what a promote's UPDATE returns for promoted.
const promotedColumns = `c.table_name, coalesce(c.query_id, '') AS feeder, c.finalized_until, c.end_time, c.end_offset, c.run_id, c.batch_id, c.sources`

func newStatements(n names) statements {
	return statements{
		// sole is the advance of a table's one feeder (ADR 0015): a solo
		// table keeps its feeder's watermark in its own row, so the
		// advance is one statement writing one row, as before feeders
		// existed. It moves only a row that is solo, whose feeder is the
		// advancing query, and that stands before the candidate; the
		// upsert's conflict arm checks that again on the row as it stands
		// once locked (READ COMMITTED re-reads a row a concurrent
		// transaction changed), so a promotion (a second feeder joining)
		// that commits first makes it move nothing. A row not offered is
		// not locked: a no-op is a read. Every other advance (no row yet,
		// a shared table, another query) goes to the advance statement;
		// the caller tells them apart by what this returns. Rows are
		// offered in table order, so two statements cannot deadlock. The
		// check of each input row's table row is a LATERAL with LIMIT, which
		// the planner keeps a lookup by primary key per input row: written
		// as EXISTS, it was planned, depending on the table's statistics
		// and its dead rows, as a hash join over a scan of every table's
		// row, at every group (11 of the 34 ms of a group of 1,000 at
		// 10,000 tables, EXPLAIN ANALYZE; issue 12, fourth pass).
		//
		// Each input row carries the rewind its sender knew ($10, known:
		// NULL for an advance that guards nothing, see RewindGuard): a
		// row rewound since (rewound_at > known) is not offered, and the
		// conflict arm checks it again on the row as it stands once
		// locked, so a rewind that commits while the statement waits for
		// the row's lock (behind a reader's, say) leaves it moving
		// nothing. The known time reaches the conflict arm as the
		// proposed row's rewound_at (EXCLUDED's only way to carry it);
		// the SET leaves the row's own rewound_at as it is. (The insert
		// arm writes a row only when the table's row, read by the
		// LATERAL, is gone by the time it is locked: the service never
		// deletes one.)
		sole: `
WITH input AS (
	SELECT * FROM unnest($1::text[], $2::text[], $3::timestamptz[], $4::timestamptz[], $5::text[], $6::text[], $7::bigint[], $8::text[], $9::text[], $10::timestamptz[])
		AS i(table_name, feeder, finalized_until, end_time, end_offset, run_id, batch_id, sources, payload, known)
), moved AS (
	INSERT INTO ` + n.table + ` AS c (` + verdictColumns + `, solo, rewound_at)
	SELECT i.table_name, i.finalized_until, i.end_time, i.end_offset::jsonb, nullif(i.feeder, ''), i.run_id, i.batch_id, i.sources::jsonb, now(), false, i.known
	FROM input i
	CROSS JOIN LATERAL (SELECT FROM ` + n.table + ` x WHERE x.table_name = i.table_name AND x.solo
		AND coalesce(x.query_id, '') = i.feeder AND x.finalized_until < i.finalized_until
		AND (x.rewound_at > i.known) IS NOT TRUE LIMIT 1) x
	ORDER BY i.table_name
	ON CONFLICT (table_name) DO UPDATE SET` + provenanceSet + `
	WHERE c.solo AND coalesce(c.query_id, '') = coalesce(EXCLUDED.query_id, '') AND c.finalized_until < EXCLUDED.finalized_until
		AND (c.rewound_at > EXCLUDED.rewound_at) IS NOT TRUE
	RETURNING ` + readColumns + `, solo
)` + notifyAndReturn(n, "0"),
		// soleOne is sole for one advance, with scalar parameters and the
		// whole notification built by the caller ($8): the statement the
		// one-table advance was before feeders, and as cheap. Its rewind
		// guard ($10, the known rewind, NULL for none) is a parameter
		// both checks read.
		soleOne: `
WITH moved AS (
	INSERT INTO ` + n.table + ` AS c (` + verdictColumns + `, solo)
	SELECT $1::text, $2::timestamptz, $3::timestamptz, $4::jsonb, nullif($5::text, ''), $6::text, $7::bigint, $9::jsonb, now(), false
	WHERE EXISTS (SELECT FROM ` + n.table + ` x WHERE x.table_name = $1::text AND x.solo
		AND coalesce(x.query_id, '') = $5::text AND x.finalized_until < $2::timestamptz
		AND (x.rewound_at > $10::timestamptz) IS NOT TRUE)
	ON CONFLICT (table_name) DO UPDATE SET` + provenanceSet + `
	WHERE c.solo AND coalesce(c.query_id, '') = coalesce(EXCLUDED.query_id, '') AND c.finalized_until < EXCLUDED.finalized_until
		AND (c.rewound_at > $10::timestamptz) IS NOT TRUE
	RETURNING ` + readColumns + `, solo
), notified AS (
	SELECT pg_notify('` + NotifyChannel + `', $8::text) FROM moved
)
SELECT true, ` + readColumns + `, (SELECT count(*) FROM notified), solo, 0 FROM moved
UNION ALL
SELECT false, ` + readColumns + `, 0, solo, 0 FROM ` + n.table + `
WHERE table_name = $1::text AND NOT EXISTS (SELECT FROM moved)`,
		// lockKeys takes the transaction-level advisory lock of each of
		// the tables ($1, under the control table's key $2), in key
		// order. Everything that reads or writes the feeders table to
		// move a verdict, add, retire or un-retire a feeder, or promote
		// a solo table takes them first, in a transaction of its own, so
		// those transactions on one table run one after the other and
		// each statement after the locks sees every earlier one's commit:
		// the lowest watermark is computed from the feeders as they
		// stand, never from a stale snapshot. The sole statement takes
		// none: it is kept out by the solo flag and the row lock.
		// busy returns the tables of $1 another session holds locked:
		// their row in the control table or one of their feeder rows
		// locked (SKIP LOCKED leaves it out of what this statement
		// locks, and a plain read still sees it), or their advisory lock
		// (lockKeys' key) held. It waits for none of them.
		busy: `
WITH got AS (
	SELECT table_name FROM ` + n.table + ` WHERE table_name = ANY($1::text[]) FOR UPDATE SKIP LOCKED
), gotf AS (
	SELECT table_name, feeder FROM ` + n.feeds + ` WHERE table_name = ANY($1::text[]) FOR UPDATE SKIP LOCKED
)
SELECT c.table_name FROM ` + n.table + ` c WHERE c.table_name = ANY($1::text[]) AND NOT EXISTS (SELECT FROM got WHERE got.table_name = c.table_name)
UNION
SELECT f.table_name FROM ` + n.feeds + ` f WHERE f.table_name = ANY($1::text[]) AND NOT EXISTS (SELECT FROM gotf WHERE gotf.table_name = f.table_name AND gotf.feeder = f.feeder)
UNION
SELECT k.t FROM (SELECT DISTINCT t FROM unnest($1::text[]) AS t ORDER BY 1) k WHERE NOT pg_try_advisory_xact_lock(hashtextextended($2 || k.t, 0))`,
		lockKeys: `
SELECT count(pg_advisory_xact_lock(k)) FROM (
	SELECT DISTINCT hashtextextended($2 || t, 0) AS k FROM unnest($1::text[]) AS t ORDER BY 1
) keys`,
		// lockRows, promote and advance find the rows of their input by
		// primary key ("= ANY" of the input's tables): left to join the
		// input to the whole table, the planner scanned every table's row
		// at every group, a cost that grew with the tables tracked (50 ms
		// at 100,000; ADR 0023).
		// lockRows locks, in table order, the table rows an advance's
		// transaction may write: those its candidates may move, and solo
		// ones it must promote (another query's advance). Taking them up
		// front, in order, keeps it from deadlocking with a concurrent
		// sole statement over several tables.
		lockRows: `
SELECT count(*) FROM (
	SELECT c.table_name FROM ` + n.table + ` c
	WHERE c.table_name = ANY($1::text[]) AND EXISTS (SELECT FROM unnest($1::text[], $2::text[], $3::timestamptz[]) AS i(table_name, feeder, finalized_until)
		WHERE i.table_name = c.table_name AND (c.finalized_until IS NULL OR c.finalized_until < i.finalized_until
			OR (c.solo AND coalesce(c.query_id, '') <> i.feeder)))
	ORDER BY c.table_name FOR UPDATE
) locked`,
		// promote makes shared each solo table of the input that another
		// query ($2) advances or joins, and writes its one feeder's row
		// from the table's row. A retired query adds no feeder: its
		// advance is recorded in its own row and the table stays solo.
		// Both lookups go by primary key, from the input (ADR 0023): the
		// table rows by "= ANY", the retired check as a scalar subquery,
		// which the planner cannot turn into a scan of the whole feeders
		// table (it did, with no retired feeder to estimate from: a
		// statement cost grew with the tables tracked, 50 ms at 100,000). It runs after lockKeys (and, in an
		// advance, lockRows): the UPDATE reads the row as the last sole
		// statement left it.
		promote: `
WITH promoted AS (
	UPDATE ` + n.table + ` c SET solo = false
	WHERE c.solo AND c.table_name = ANY($1::text[]) AND EXISTS (SELECT FROM unnest($1::text[], $2::text[]) AS i(table_name, feeder)
		WHERE i.table_name = c.table_name AND i.feeder <> coalesce(c.query_id, '')
			AND (SELECT r.retired_at FROM ` + n.feeds + ` r WHERE r.table_name = i.table_name AND r.feeder = i.feeder) IS NULL)
	RETURNING ` + promotedColumns + `
)` + promoted(n),
		// promoteOne makes table $1 shared if it is solo: before an
		// operator's retirement, un-retirement or rewind, and before an
		// expected feeder is added.
		promoteOne: `
WITH promoted AS (
	UPDATE ` + n.table + ` c SET solo = false WHERE c.table_name = $1 AND c.solo
	RETURNING ` + promotedColumns + `
)` + promoted(n),
		// advance is the advance of a shared table, of a table's first
		// verdict, and of any feeder whose sole statement did not apply,
		// in one statement run after lockKeys, lockRows and promote: the
		// feeder's own watermark moves forward-only ("fed"), an expected
		// feeder configured by the query's name is resolved to its id
		// ("resolved"), and the table moves to the lowest watermark of
		// its feeders: its own writes fresh, the others as they stand
		// ("state"). A feeder already at or beyond its candidate is not
		// offered to the upsert, so a no-op advance is a read. Rows are
		// written in (table, feeder) then table order.
		//
		// An input row whose table was rewound after the rewind its
		// sender knew ($11, known; NULL guards nothing) is left out of
		// everything the statement writes ("ok"): its feeder's watermark
		// does not move, it resolves no expected feeder, and a table
		// none of whose rows is ok is not moved to its lowest watermark
		// (the rewind lowered the feeders too); its row is still
		// returned, by which the caller tells it was refused. The check
		// reads the row once per input row, by key (a scalar subquery:
		// never a scan), under the tables' advisory locks, which a
		// rewind takes too: the statement's snapshot has every rewind
		// that committed before it, one the statement waited for
		// included.
		advance: `
WITH input AS (
	SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::timestamptz[], $5::timestamptz[], $6::text[], $7::text[], $8::bigint[], $9::text[], $10::text[], $11::timestamptz[])
		AS i(table_name, feeder, query_name, finalized_until, end_time, end_offset, run_id, batch_id, sources, payload, known)
), ok AS (
	SELECT * FROM input i
	WHERE ((SELECT r.rewound_at FROM ` + n.table + ` r WHERE r.table_name = i.table_name) > i.known) IS NOT TRUE
), fed AS (
	INSERT INTO ` + n.feeds + ` AS f (table_name, feeder, query_name, finalized_until, end_time, end_offset, run_id, batch_id, sources)
	SELECT i.table_name, i.feeder, i.query_name, i.finalized_until, i.end_time, i.end_offset::jsonb, i.run_id, i.batch_id, i.sources::jsonb
	FROM ok i
	LEFT JOIN LATERAL (SELECT true AS at FROM ` + n.feeds + ` x WHERE x.table_name = i.table_name AND x.feeder = i.feeder
		AND x.finalized_until >= i.finalized_until LIMIT 1) x ON true
	WHERE x.at IS NULL
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
	FROM ok i
	WHERE p.table_name = ANY($1::text[]) AND p.feeder = ANY($3::text[])
		AND p.table_name = i.table_name AND p.feeder = i.query_name AND p.feeder <> i.feeder
		AND p.expected AND p.finalized_until IS NULL AND p.retired_at IS NULL
	RETURNING p.table_name, p.feeder
), state AS (
	SELECT table_name, feeder, finalized_until, end_time, end_offset, run_id, batch_id, sources FROM fed WHERE retired_at IS NULL
	UNION ALL
	SELECT f.table_name, f.feeder, f.finalized_until, f.end_time, f.end_offset, f.run_id, f.batch_id, f.sources
	FROM (SELECT DISTINCT table_name FROM ok) o
	CROSS JOIN LATERAL (SELECT * FROM ` + n.feeds + ` f WHERE f.table_name = o.table_name AND f.retired_at IS NULL OFFSET 0) f
	WHERE (f.table_name, f.feeder) NOT IN (SELECT table_name, feeder FROM fed)
		AND (f.table_name, f.feeder) NOT IN (SELECT table_name, feeder FROM resolved)
)` + moveToLowest(n, "(SELECT count(*) FROM fed)"),
		// settle moves tables to the lowest watermark of their feeders as
		// they stand, after lockKeys: after a retirement, or when an
		// operator asks.
		settle: `
WITH input AS (
	SELECT * FROM unnest($1::text[], $2::text[]) AS i(table_name, payload)
), state AS (
	SELECT f.table_name, f.feeder, f.finalized_until, f.end_time, f.end_offset, f.run_id, f.batch_id, f.sources FROM ` + n.feeds + ` f
	WHERE f.table_name IN (SELECT table_name FROM input) AND f.retired_at IS NULL
)` + moveToLowest(n, "0"),
		get:        `SELECT ` + readColumns + ` FROM ` + n.table + ` WHERE table_name = $1`,
		list:       `SELECT ` + readColumns + ` FROM ` + n.table + ` ORDER BY table_name`,
		untils:     `SELECT table_name, finalized_until FROM ` + n.table + ` WHERE finalized_until IS NOT NULL`,
		feeders:    `SELECT ` + feederColumns + ` FROM ` + feedersView(n) + ` WHERE table_name = $1 ORDER BY joined_at, feeder`,
		allFeeders: `SELECT ` + feederColumns + ` FROM ` + feedersView(n) + ` ORDER BY table_name, joined_at, feeder`,
		// join adds the feeders of a group of joins (JoinFeeders, after
		// lockKeys and promote) that the table does not know yet, or
		// knows without the query's name: a known feeder is not offered
		// to the upsert, whose conflict arm would lock (write) its row.
		join: `
INSERT INTO ` + n.feeds + ` AS f (table_name, feeder, query_name)
SELECT i.table_name, i.feeder, nullif(i.query_name, '')
FROM unnest($1::text[], $2::text[], $3::text[]) AS i(table_name, feeder, query_name)
WHERE NOT EXISTS (SELECT FROM ` + n.feeds + ` x WHERE x.table_name = i.table_name AND x.feeder = i.feeder
	AND (x.query_name IS NOT NULL OR i.query_name = ''))
ORDER BY i.table_name, i.feeder
ON CONFLICT (table_name, feeder) DO UPDATE SET query_name = EXCLUDED.query_name
	WHERE f.query_name IS NULL AND EXCLUDED.query_name IS NOT NULL
RETURNING f.table_name, f.feeder, (xmax = 0)`,
		// known returns, of a group of joins, those a join would not
		// write for (JoinFeeders reads them without the tables' advisory
		// locks): the feeder has a row, with a query name or none
		// offered, and the table needs no promotion (it is not solo with
		// another query while this feeder is active); with their retired
		// time and reason. Every lookup goes by primary key from the
		// input: a LATERAL with LIMIT and a scalar subquery, which the
		// planner cannot flatten into a scan of either table.
		known: `
SELECT i.ord::int, f.retired_at, f.retired_why
FROM unnest($1::text[], $2::text[], $3::text[]) WITH ORDINALITY AS i(table_name, feeder, query_name, ord)
CROSS JOIN LATERAL (SELECT r.query_name, r.retired_at, r.retired_why FROM ` + n.feeds + ` r
	WHERE r.table_name = i.table_name AND r.feeder = i.feeder LIMIT 1) f
WHERE (f.query_name IS NOT NULL OR i.query_name = '')
	AND (f.retired_at IS NOT NULL OR (SELECT c.solo AND coalesce(c.query_id, '') <> i.feeder FROM ` + n.table + ` c
		WHERE c.table_name = i.table_name) IS NOT TRUE)`,
		// retired returns the retired feeders among a group's, looked up
		// by key (a LATERAL with LIMIT is not flattened into a join).
		retired: `
SELECT i.table_name, i.feeder, f.retired_at, f.retired_why FROM unnest($1::text[], $2::text[]) AS i(table_name, feeder)
CROSS JOIN LATERAL (SELECT r.retired_at, r.retired_why FROM ` + n.feeds + ` r
	WHERE r.table_name = i.table_name AND r.feeder = i.feeder AND r.retired_at IS NOT NULL LIMIT 1) f`,
	}
}

// notification is the payload sent on NotifyChannel when a verdict moves.
type notification struct {
	Table          string `json:"table"`
	FinalizedUntil string `json:"finalized_until"` // RFC 3339, UTC
	// Rewound is set on a rewind's notification only (see Store.Rewind);
	// a forward move's payload does not carry it.
	Rewound bool `json:"rewound,omitempty"`
	// RewoundAt is the rewind's stored rewound_at (RFC 3339 UTC), on a
	// rewind's notification only.
	RewoundAt string `json:"rewound_at,omitempty"`
	// ControlTable is the control table of the move ("schema.name"): the
	// channel is shared by every control table of the database. Absent
	// from a notification sent by an earlier release (or by hand).
	ControlTable string `json:"control_table,omitempty"`
}

// payloadPrefix is the notification of a move of table up to the time's
// opening quote: the statement appends the time it moved to and '"}'. Go
// escapes the table's name, as earlier releases did for the whole payload.
func payloadPrefix(table string) (string, error) {
	if plainJSON(table) {
		// What json.Marshal writes for it, without reflection (once per
		// advance; TestPayloadPrefix, FuzzPayloadPrefix).
		return moveTableKey + table + moveUntilKey, nil
	}
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
// not retired (ADR 0015). A table with one feeder (solo) keeps that
// feeder's watermark in its own row and moves with it in one statement
// writing one row, as before feeders existed: updated only when its
// finalized_until is earlier than the candidate, with the provenance
// (end_time, end_offset, query_id, run_id, batch_id) and updated_at. A
// table with several feeders, and a table's first verdict, take one
// transaction of four statements in one round trip (see AdvanceBatch).
// When, and only when, the table's row moved, the same transaction sends
// a notification on NotifyChannel.
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
// An advance guarded by the rewind its sender knew (a.Guard, KnownRewind)
// moves nothing when the table was rewound since, even by a rewind that
// commits while the statement waits for the row's lock: it returns
// ErrBeforeRewind, with the table's row as the statement read it (its
// RewoundAt the rewind that refused it).
//
// Errors: ErrInvalidAdvance (a table name CheckTableName refuses, no
// time, EndOffset not JSON), ErrBeforeRewind,
// ErrUnavailable (PostgreSQL unreachable; nothing or everything was
// written, and retrying is safe because the advance is idempotent),
// ErrNotMigrated (no control table).
func (s *Store) Advance(ctx context.Context, a Advance) (v Verdict, moved bool, err error) {
	res, err := s.advanceAll(ctx, []Advance{a}, "advance "+a.Table)
	if err != nil {
		return Verdict{}, false, err
	}
	return res[0].Verdict, res[0].Moved, res[0].Err
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

// EachFinalizedUntil calls fn with every table's finalized_until (UTC),
// for the tables that have one, in no order, as the rows are read: a
// start's seeding of the per-table lag gauges reads two columns and keeps
// no list, where List reads every column of every verdict into one
// (100,000 verdicts: 250 MB allocated and 0.8 s of CPU in a restart,
// issue 12, sixth pass). fn must not call the store.
func (s *Store) EachFinalizedUntil(ctx context.Context, fn func(table string, until time.Time)) error {
	if s.closed.Load() {
		return fmt.Errorf("list verdicts: %w", ErrClosed)
	}
	rows, err := s.pool.Query(ctx, s.sql.untils)
	if err != nil {
		return wrap(ctx, "list verdicts", err)
	}
	defer rows.Close()
	var (
		table string
		until time.Time
	)
	for rows.Next() {
		if err := rows.Scan(&table, &until); err != nil {
			return wrap(ctx, "list verdicts", err)
		}
		fn(table, until.UTC())
	}
	if err := rows.Err(); err != nil {
		return wrap(ctx, "list verdicts", err)
	}
	return nil
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
	if s, ok := plainSourcesJSON(descs); ok {
		return s, nil
	}
	b, err := json.Marshal(descs)
	if err != nil {
		return nil, fmt.Errorf("source descriptions: %w", err)
	}
	return string(jsonbSafe(b)), nil
}

// plainSourcesJSON is what json.Marshal writes for descs (and jsonbSafe
// leaves as it is) when every description is plainJSON, without
// reflection: once per advance of a group commit (FuzzSourcesJSON).
func plainSourcesJSON(descs []string) (string, bool) {
	n := 2
	for _, d := range descs {
		if !plainJSON(d) {
			return "", false
		}
		n += len(d) + 3
	}
	var b strings.Builder
	b.Grow(n)
	b.WriteByte('[')
	for i, d := range descs {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteByte('"')
		b.WriteString(d)
		b.WriteByte('"')
	}
	b.WriteByte(']')
	return b.String(), true
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
