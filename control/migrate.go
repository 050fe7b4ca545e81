package control

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"

	"github.com/jackc/pgx/v5"
	"go.uber.org/zap"
)

// migration is one step of the control table's schema. Steps are applied
// in order, each once, in the transaction that records its version; a
// released binary's steps are never edited, only appended to.
type migration struct {
	version int
	about   string
	sql     func(n names) string
}

var migrations = []migration{
	{1, "control table and explicit tracks", func(n names) string {
		return `
CREATE TABLE ` + n.table + ` (
	table_name      text PRIMARY KEY,
	finalized_until timestamptz,
	end_time        timestamptz,
	end_offset      jsonb,
	query_id        text,
	run_id          text,
	batch_id        bigint,
	updated_at      timestamptz NOT NULL DEFAULT now()
);
COMMENT ON TABLE ` + n.table + ` IS 'finalizer: one row per tracked table. A period [start, end) of a table is complete when finalized_until >= end. finalized_until only moves forward.';
COMMENT ON COLUMN ` + n.table + `.finalized_until IS 'every period ending at or before it is complete';
COMMENT ON COLUMN ` + n.table + `.end_time IS 'the time read from the progress that last moved the verdict';
COMMENT ON COLUMN ` + n.table + `.end_offset IS 'that source''s endOffset';
COMMENT ON COLUMN ` + n.table + `.updated_at IS 'when the verdict last moved';
CREATE TABLE ` + n.tracks + ` (
	query_id   text NOT NULL,
	run_id     text NOT NULL,
	table_name text NOT NULL,
	spec       jsonb,
	created_at timestamptz NOT NULL DEFAULT now(),
	done_at    timestamptz,
	PRIMARY KEY (run_id, table_name)
);
COMMENT ON TABLE ` + n.tracks + ` IS 'finalizer: explicit track requests, kept so that they survive a restart; done_at is set when the run''s tracker finished.';
`
	}},
	{2, "source descriptions, marks, rewinds and their audit", func(n names) string {
		return `
ALTER TABLE ` + n.table + `
	ADD COLUMN sources    jsonb,
	ADD COLUMN mark       text,
	ADD COLUMN marked_at  timestamptz,
	ADD COLUMN marks      bigint NOT NULL DEFAULT 0,
	ADD COLUMN rewound_at timestamptz;
COMMENT ON COLUMN ` + n.table + `.sources IS 'the description of every source of the progress that last moved the verdict, in Spark''s order';
COMMENT ON COLUMN ` + n.table + `.mark IS 'the first sign, since the last rewind or acknowledgement, that the table''s history changed under the verdict (a checkpoint reset, a candidate below end_time, a source that changed)';
COMMENT ON COLUMN ` + n.table + `.marks IS 'how many such signs were recorded since';
COMMENT ON COLUMN ` + n.table + `.rewound_at IS 'when an operator last moved the verdict back (finalizer rewind)';
CREATE TABLE ` + n.audit + ` (
	id              bigserial PRIMARY KEY,
	table_name      text NOT NULL,
	action          text NOT NULL,
	at              timestamptz NOT NULL DEFAULT now(),
	by_operator     text NOT NULL,
	db_user         text NOT NULL DEFAULT session_user,
	reason          text NOT NULL,
	from_until      timestamptz,
	to_until        timestamptz,
	from_query_id   text,
	from_run_id     text,
	from_batch_id   bigint,
	from_end_time   timestamptz,
	cleared_mark    text,
	cleared_marks   bigint
);
CREATE INDEX ON ` + n.audit + ` (table_name, at);
COMMENT ON TABLE ` + n.audit + ` IS 'finalizer: every operator action on a verdict (rewind: the one backward move; acknowledge: a mark cleared), who, when, from, to and why.';
`
	}},
	{3, "feeders: each query writing a table, with its own watermark (ADR 0015)", func(n names) string {
		return `
CREATE TABLE ` + n.feeds + ` (
	table_name      text NOT NULL,
	feeder          text NOT NULL,
	query_name      text,
	finalized_until timestamptz,
	end_time        timestamptz,
	end_offset      jsonb,
	run_id          text,
	batch_id        bigint,
	sources         jsonb,
	expected        boolean NOT NULL DEFAULT false,
	joined_at       timestamptz NOT NULL DEFAULT now(),
	updated_at      timestamptz NOT NULL DEFAULT now(),
	retired_at      timestamptz,
	retired_why     text,
	PRIMARY KEY (table_name, feeder)
);
COMMENT ON TABLE ` + n.feeds + ` IS 'finalizer: the queries that write each table (its feeders). A table''s finalized_until is the minimum of the watermarks of its feeders that are not retired, and never moves back.';
COMMENT ON COLUMN ` + n.feeds + `.feeder IS 'the query id; for an expected feeder that has not reported yet, the query name or id the config names';
COMMENT ON COLUMN ` + n.feeds + `.finalized_until IS 'this feeder''s own watermark, forward-only; NULL: expected and not reported yet, which holds the table';
COMMENT ON COLUMN ` + n.feeds + `.expected IS 'named in the config''s feeders: list of the table';
COMMENT ON COLUMN ` + n.feeds + `.updated_at IS 'when the watermark last moved';
COMMENT ON COLUMN ` + n.feeds + `.retired_at IS 'when the feeder was retired; a retired feeder no longer holds its table';
INSERT INTO ` + n.feeds + ` (table_name, feeder, finalized_until, end_time, end_offset, run_id, batch_id, sources, joined_at, updated_at)
SELECT table_name, coalesce(query_id, ''), finalized_until, end_time, end_offset, run_id, batch_id, sources, updated_at, updated_at
FROM ` + n.table + ` WHERE finalized_until IS NOT NULL;
`
	}},
	{4, "actions: an outbox of the moves of tables with actions, filled by a trigger (issue 19)", func(n names) string {
		return `
ALTER TABLE ` + n.table + ` ADD COLUMN actions boolean NOT NULL DEFAULT false;
COMMENT ON COLUMN ` + n.table + `.actions IS 'the table has actions (finalizer announces each period that becomes final): its moves are written to the outbox by a trigger';
CREATE TABLE ` + n.acts + ` (pattern text PRIMARY KEY);
COMMENT ON TABLE ` + n.acts + ` IS 'finalizer: LIKE patterns of the tables whose rules have actions, written by the service at start from its config';
CREATE TABLE ` + n.outbox + ` (
	id         bigserial PRIMARY KEY,
	table_name text NOT NULL,
	from_until timestamptz,
	to_until   timestamptz NOT NULL,
	query_id   text,
	run_id     text,
	batch_id   bigint,
	moved_at   timestamptz NOT NULL DEFAULT now()
);
COMMENT ON TABLE ` + n.outbox + ` IS 'finalizer: each move of a table with actions, written in the transaction of the move; the service expands it into one event per period and action (the _sends table) and deletes it';
CREATE TABLE ` + n.anno + ` (
	table_name text PRIMARY KEY,
	generation bigint NOT NULL DEFAULT 0,
	high_water timestamptz
);
COMMENT ON TABLE ` + n.anno + ` IS 'finalizer: per table with actions, the announcement generation (one more at each rewind) and the highest verdict ever announced';
CREATE TABLE ` + n.sends + ` (
	seq          bigserial PRIMARY KEY,
	action       text NOT NULL,
	event_id     text NOT NULL,
	table_name   text NOT NULL,
	period_start timestamptz NOT NULL,
	period_end   timestamptz NOT NULL,
	payload      text NOT NULL,
	moved_at     timestamptz NOT NULL,
	created_at   timestamptz NOT NULL DEFAULT now(),
	state        text NOT NULL DEFAULT 'pending',
	attempts     integer NOT NULL DEFAULT 0,
	next_at      timestamptz NOT NULL DEFAULT now(),
	last_error   text,
	done_at      timestamptz,
	UNIQUE (action, event_id)
);
CREATE INDEX ON ` + n.sends + ` (action, table_name, seq) WHERE state = 'pending';
CREATE INDEX ON ` + n.sends + ` (done_at) WHERE state <> 'pending';
COMMENT ON TABLE ` + n.sends + ` IS 'finalizer: one row per event and action: pending (in order per table), delivered, dead (dead-lettered) or superseded (a rewind came first)';
CREATE FUNCTION ` + n.moved + `() RETURNS trigger LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $fn$
BEGIN
	IF TG_OP = 'INSERT' THEN
		IF NOT EXISTS (SELECT FROM ` + n.acts + ` WHERE NEW.table_name LIKE pattern) THEN
			RETURN NULL;
		END IF;
		UPDATE ` + n.table + ` SET actions = true WHERE table_name = NEW.table_name;
		INSERT INTO ` + n.outbox + ` (table_name, from_until, to_until, query_id, run_id, batch_id)
		VALUES (NEW.table_name, NULL, NEW.finalized_until, NEW.query_id, NEW.run_id, NEW.batch_id);
	ELSE
		INSERT INTO ` + n.outbox + ` (table_name, from_until, to_until, query_id, run_id, batch_id)
		VALUES (NEW.table_name, OLD.finalized_until, NEW.finalized_until, NEW.query_id, NEW.run_id, NEW.batch_id);
	END IF;
	RETURN NULL;
END
$fn$;
COMMENT ON FUNCTION ` + n.moved + `() IS 'finalizer: writes a move of a table with actions to the outbox; runs as its owner, so a role that may advance verdicts needs no grant on the outbox';
CREATE TRIGGER finalizer_outbox_first AFTER INSERT ON ` + n.table + ` FOR EACH ROW
	WHEN (NEW.finalized_until IS NOT NULL) EXECUTE FUNCTION ` + n.moved + `();
CREATE TRIGGER finalizer_outbox_move AFTER UPDATE OF finalized_until ON ` + n.table + ` FOR EACH ROW
	WHEN (NEW.actions AND NEW.finalized_until IS DISTINCT FROM OLD.finalized_until) EXECUTE FUNCTION ` + n.moved + `();
`
	}},
	{5, "solo tables: a table's one feeder kept in the table's own row (ADR 0015)", func(n names) string {
		return `
ALTER TABLE ` + n.table + ` ADD COLUMN solo boolean NOT NULL DEFAULT false;
COMMENT ON COLUMN ` + n.table + `.solo IS 'true: query_id is the table''s one active feeder and finalized_until its watermark (the feeders table is not read nor written for it); false: the table is at the lowest watermark of its active feeders in the feeders table';
UPDATE ` + n.table + ` c SET solo = true
WHERE c.finalized_until IS NOT NULL
	AND (SELECT count(*) FROM ` + n.feeds + ` f WHERE f.table_name = c.table_name AND f.retired_at IS NULL) = 1
	AND EXISTS (SELECT FROM ` + n.feeds + ` f WHERE f.table_name = c.table_name AND f.retired_at IS NULL
		AND f.feeder = coalesce(c.query_id, '') AND f.finalized_until = c.finalized_until);
`
	}},
	// Every row of the control table is rewritten at every boundary, all
	// the rows of a page in one group statement. With pages packed full
	// (the default fillfactor, 100) a new row version rarely fits on its
	// page, so 97% of the updates of a burst were not HOT: each wrote a
	// new primary-key entry and 529 bytes of WAL per row. Pages filled to
	// half leave room for every row of a page to be rewritten in place
	// (HOT: no index entry, 333 bytes of WAL), the old versions pruned
	// when the page is next read (ADR 0008 addendum, issue 12 sixth pass).
	// Pages written before the migration follow as their rows move.
	{6, "the control table's pages half full, so that a boundary's updates stay on their page (HOT)", func(n names) string {
		return `
ALTER TABLE ` + n.table + ` SET (fillfactor = 50);
`
	}},
	// finalizer rewind records the event stream's position after its
	// commit, so that a service that did not hear the rewind live judges
	// a progress read from the stream by its sequence instead of a
	// minute's margin across two servers' clocks (ADR 0019, addendum of
	// 2026-12-06, "judged by sequence"). Nullable, no default: no row is
	// rewritten. IF NOT EXISTS: its row deleted to go back to an older
	// binary, the next start records it again. rewound_seq_at is the
	// rewound_at the position was recorded for: an older binary's rewind
	// leaves the columns as they were, and the position is then not used.
	{7, "the event stream's position recorded with a rewind (ADR 0019)", func(n names) string {
		return rwposTable(n)
	}},
	// Migration 7 first added the position as three columns of the
	// control table; with them the first verdicts of 100,000 tables took
	// 44-47 s against 7-13 s without (finalizer bench --restart-only, one
	// hold, ADR 0019 addendum "the position beside the control table"),
	// so the position is kept in a table of its own, which the hot
	// statements never touch, and a database migrated by that first
	// version loses the columns (what they held is a rewind's position,
	// recorded again by the next rewind).
	{8, "the rewind's position beside the control table (ADR 0019)", func(n names) string {
		return rwposTable(n) + `
ALTER TABLE ` + n.table + ` DROP COLUMN IF EXISTS rewound_seq;
ALTER TABLE ` + n.table + ` DROP COLUMN IF EXISTS rewound_stream_created;
ALTER TABLE ` + n.table + ` DROP COLUMN IF EXISTS rewound_seq_at;
`
	}},
}

// SchemaVersion is the control-table schema version this binary migrates
// to and works with: the version of the last of its migrations.
const SchemaVersion = 8

// Migrate creates the control table and the tables beside it, or brings
// them up to SchemaVersion. It creates the schema if it is missing. It
// holds a transaction-level advisory lock for the control table while it
// works, so replicas migrating at once take turns; when the schema is
// current it changes nothing. A database migrated by a newer binary is left
// untouched and gives ErrSchemaTooNew.
func (s *Store) Migrate(ctx context.Context) error {
	if s.closed.Load() {
		return fmt.Errorf("migrate %s: %w", s.n.display, ErrClosed)
	}
	var applied []int
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		applied = applied[:0]
		if _, err := tx.Exec(ctx, "SELECT pg_advisory_xact_lock($1)", s.lockKey()); err != nil {
			return err
		}
		var nspExists bool
		if err := tx.QueryRow(ctx, "SELECT EXISTS (SELECT FROM pg_namespace WHERE nspname = $1)", s.n.nspName).Scan(&nspExists); err != nil {
			return err
		}
		if !nspExists {
			if _, err := tx.Exec(ctx, "CREATE SCHEMA IF NOT EXISTS "+s.n.nsp); err != nil {
				return err
			}
		}
		version, found, err := s.version(ctx, tx)
		if err != nil {
			return err
		}
		if !found {
			if _, err := tx.Exec(ctx, `CREATE TABLE `+s.n.schema+` (
	version    integer PRIMARY KEY,
	applied_at timestamptz NOT NULL DEFAULT now()
)`); err != nil {
				return err
			}
		}
		if version > SchemaVersion {
			return errTooNew(version)
		}
		for _, m := range migrations {
			if m.version <= version {
				continue
			}
			if _, err := tx.Exec(ctx, m.sql(s.n)); err != nil {
				return fmt.Errorf("version %d (%s): %w", m.version, m.about, err)
			}
			if _, err := tx.Exec(ctx, "INSERT INTO "+s.n.schema+" (version) VALUES ($1)", m.version); err != nil {
				return err
			}
			applied = append(applied, m.version)
		}
		return nil
	})
	if errors.Is(err, ErrSchemaTooNew) {
		return fmt.Errorf("migrate %s: %w", s.n.display, err)
	}
	if err != nil {
		return wrap(ctx, "migrate "+s.n.display, err)
	}
	for _, v := range applied {
		s.log.Info("control table migrated", zap.Int("version", v))
	}
	return nil
}

// CheckSchema reports whether the control table is at SchemaVersion
// without changing anything (serve --no-migrate): nil when it is,
// ErrNotMigrated when it is missing or older, ErrSchemaTooNew when newer.
func (s *Store) CheckSchema(ctx context.Context) error {
	if s.closed.Load() {
		return fmt.Errorf("check schema of %s: %w", s.n.display, ErrClosed)
	}
	version, found, err := s.version(ctx, s.pool)
	switch {
	case err != nil:
		return wrap(ctx, "check schema of "+s.n.display, err)
	case !found:
		return fmt.Errorf("check schema of %s: %w: %s does not exist; run finalizer serve without --no-migrate once",
			s.n.display, ErrNotMigrated, s.n.display+schemaSuffix)
	case version > SchemaVersion:
		return fmt.Errorf("check schema of %s: %w", s.n.display, errTooNew(version))
	case version < SchemaVersion:
		return fmt.Errorf("check schema of %s: %w: at version %d, this binary needs %d", s.n.display, ErrNotMigrated, version, SchemaVersion)
	}
	return nil
}

func errTooNew(version int) error {
	return fmt.Errorf("%w: version %d, this binary knows up to %d; upgrade finalizer", ErrSchemaTooNew, version, SchemaVersion)
}

// querier is what version needs of a pool or a transaction.
type querier interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// version returns the highest applied migration, and whether the schema
// table exists at all.
func (s *Store) version(ctx context.Context, q querier) (version int, found bool, err error) {
	if err := q.QueryRow(ctx, "SELECT to_regclass($1) IS NOT NULL", s.n.schema).Scan(&found); err != nil || !found {
		return 0, false, err
	}
	if err := q.QueryRow(ctx, "SELECT coalesce(max(version), 0) FROM "+s.n.schema).Scan(&version); err != nil {
		return 0, true, err
	}
	return version, true, nil
}

// lockKey is the advisory lock key of this control table's migrations.
func (s *Store) lockKey() int64 {
	h := fnv.New64a()
	h.Write([]byte("finalizer migrate " + s.n.table))
	return int64(h.Sum64())
}

// rwposTable creates the table of the event stream's positions recorded
// with the tables' rewinds (finalizer rewind, after its commit): one row
// per table, for the rewind stamped rewound_at; a row whose rewound_at is
// not the control row's is an older rewind's, never used.
func rwposTable(n names) string {
	return `
CREATE TABLE IF NOT EXISTS ` + n.rwpos + ` (
	table_name     text PRIMARY KEY,
	rewound_at     timestamptz NOT NULL,
	seq            bigint NOT NULL,
	stream_created timestamptz NOT NULL
);
COMMENT ON TABLE ` + n.rwpos + ` IS 'the event stream''s last sequence read by finalizer rewind after the rewind of table_name stamped rewound_at committed, and when that stream was created; used only while rewound_at is the control row''s (ADR 0019)';
`
}
