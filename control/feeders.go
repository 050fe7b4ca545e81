package control

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"go.uber.org/zap"
)

// Feeder is one query that writes a table, as the feeders table holds it
// (ADR 0015). A table's verdict is the lowest watermark of its feeders
// that are not retired, and never moves back.
type Feeder struct {
	Table string
	// Feeder is the query id; for an expected feeder that has not reported
	// yet, the query name or id the config names.
	Feeder    string
	QueryName string // the query's name, as last reported; "" when unknown
	// FinalizedUntil is the feeder's own watermark (UTC), forward-only;
	// zero for an expected feeder that has not reported yet, which holds
	// its table where it stands.
	FinalizedUntil time.Time
	EndTime        time.Time // the progress time of its last move
	RunID          string    // the run of its last move
	BatchID        int64     // the batch of its last move
	Expected       bool      // named in the config's feeders: list of the table
	JoinedAt       time.Time // when it first reported (or was first expected)
	UpdatedAt      time.Time // when its watermark last moved
	RetiredAt      time.Time // zero while it holds its table
	RetiredWhy     string
}

// Retired reports whether the feeder no longer holds its table.
func (f Feeder) Retired() bool { return !f.RetiredAt.IsZero() }

// Name is how the feeder is best shown: its query name when known, else
// its id.
func (f Feeder) Name() string {
	if f.QueryName != "" {
		return f.QueryName
	}
	return f.Feeder
}

// Holder returns the feeder that holds a table: of feeders (one table's,
// as Feeders returns them), the one not retired with the lowest watermark,
// one that has not reported first. ok is false when none is active.
func Holder(feeders []Feeder) (f Feeder, ok bool) {
	for _, c := range feeders {
		if c.Retired() {
			continue
		}
		switch {
		case !ok,
			c.FinalizedUntil.IsZero() && !f.FinalizedUntil.IsZero(),
			!f.FinalizedUntil.IsZero() && c.FinalizedUntil.Before(f.FinalizedUntil):
			f, ok = c, true
		}
	}
	return f, ok
}

// ErrNoFeeder means no feeder of the table matches the query name or id
// given (or every one that does is retired already).
var ErrNoFeeder = errors.New("no such feeder")

// ErrAmbiguousFeeder means a query name given to retire matches several
// active feeders of the table (a query redeployed on a new checkpoint
// keeps its name and gets a new id): retiring them all would retire the
// live one with the old, so the caller must name the query id.
var ErrAmbiguousFeeder = errors.New("the name matches several feeders; give the query id")

// AmbiguousFeederError is the ErrAmbiguousFeeder of one name: the feeders
// of Table that have it (active ones, or retired ones for an unretire).
type AmbiguousFeederError struct {
	Name  string
	Table string
	IDs   []string
	What  string // "active" or "retired"
}

// Error says the name is ambiguous and what to pass instead, without
// claiming that no feeder has it.
func (e *AmbiguousFeederError) Error() string {
	return fmt.Sprintf("feeder name %q is ambiguous: %d %s feeders of %s have it (ids %s); pass the query id (after a checkpoint reset the old and the new query share the name: name the old one by its id)",
		e.Name, len(e.IDs), e.What, e.Table, strings.Join(e.IDs, ", "))
}

// Is makes it an ErrAmbiguousFeeder.
func (e *AmbiguousFeederError) Is(target error) bool { return target == ErrAmbiguousFeeder }

// Feeders returns the feeders of table, retired ones included, oldest
// first; table "" returns every table's, ordered by table.
func (s *Store) Feeders(ctx context.Context, table string) ([]Feeder, error) {
	if s.closed.Load() {
		return nil, fmt.Errorf("list feeders: %w", ErrClosed)
	}
	var (
		rows pgx.Rows
		err  error
	)
	if table == "" {
		rows, err = s.pool.Query(ctx, s.sql.allFeeders)
	} else {
		rows, err = s.pool.Query(ctx, s.sql.feeders, table)
	}
	if err != nil {
		return nil, wrap(ctx, "list feeders", err)
	}
	fs, err := pgx.CollectRows(rows, scanFeeder)
	if err != nil {
		return nil, wrap(ctx, "list feeders", err)
	}
	if fs == nil {
		fs = []Feeder{}
	}
	return fs, nil
}

// ExpectFeeders records that each of feeders (a query name or id) writes
// table: one that has not reported yet holds the table where it stands (or
// keeps it without a verdict) until it does. A query already known to the
// table by that name or id, or expected already, is left as it is, retired
// or not, so calling it again (every start of the service) changes
// nothing. It returns the feeders it added.
func (s *Store) ExpectFeeders(ctx context.Context, table string, feeders []string) ([]string, error) {
	op := "expect feeders of " + table
	if s.closed.Load() {
		return nil, fmt.Errorf("%s: %w", op, ErrClosed)
	}
	if err := CheckTableName(table); err != nil {
		return nil, fmt.Errorf("expect feeders: %w", err)
	}
	for _, f := range feeders {
		if strings.TrimSpace(f) == "" || CheckTableName(f) != nil {
			return nil, fmt.Errorf("%s: %w: a feeder name must be a non-empty query name or id without control characters", op, ErrInvalidAdvance)
		}
	}
	var added []string
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		if err := s.lockTables(ctx, tx, table); err != nil {
			return err
		}
		rows, err := tx.Query(ctx, `
INSERT INTO `+s.n.feeds+` AS f (table_name, feeder, expected)
SELECT $1, e.name, true FROM unnest($2::text[]) AS e(name)
WHERE NOT EXISTS (SELECT FROM `+s.n.feeds+` x WHERE x.table_name = $1 AND (x.feeder = e.name OR x.query_name = e.name))
	AND NOT EXISTS (SELECT FROM `+s.n.table+` c WHERE c.table_name = $1 AND c.solo AND c.query_id = e.name)
ORDER BY e.name
ON CONFLICT (table_name, feeder) DO NOTHING
RETURNING feeder`, table, feeders)
		if err != nil {
			return err
		}
		if added, err = pgx.CollectRows(rows, pgx.RowTo[string]); err != nil {
			return err
		}
		if len(added) > 0 {
			// A solo table's one feeder joins the feeders table beside
			// the expected ones, which hold the table from now on.
			_, err = tx.Exec(ctx, s.sql.promoteOne, table)
		}
		return err
	})
	if err != nil {
		return nil, wrap(ctx, op, err)
	}
	return added, nil
}

// JoinFeeder records that query (an id; name is its name, "" when
// unknown) writes table, as soon as a rule or a track maps it there and
// before it ever reports: a feeder with no watermark holds the table where
// it stands, so a query still running its first batch (or held by a guard)
// is never passed by the table on the word of the others (ADR 0015). A
// feeder the table knows already, retired or not, is left as it is, so
// calling it again (every start of a tracker) changes nothing and writes
// nothing; a query that was retired does not rejoin this way either:
// Joined says so (RetiredAt, RetiredWhy), so that the caller can warn that
// this run's data may land in periods the table already declared final.
// It is JoinFeeders of one.
func (s *Store) JoinFeeder(ctx context.Context, table, query, name string) (Joined, error) {
	r := s.JoinFeeders(ctx, []FeederJoin{{Table: table, Query: query, Name: name}})
	return r[0].Joined, r[0].Err
}

// FeederJoin is one query to record as a feeder of one table
// (JoinFeeders).
type FeederJoin struct {
	Table string
	Query string // the query id
	Name  string // the query's name, "" when unknown
}

// JoinedResult is the outcome of one FeederJoin of a JoinFeeders: what
// JoinFeeder would have returned for it.
type JoinedResult struct {
	Joined Joined
	Err    error
}

// JoinFeeders is JoinFeeder for many queries and tables at once (ADR
// 0023): the runs tracked together, at a restart or by discovery, join in
// one round trip and one transaction instead of one each. Its result at
// index i is what JoinFeeder would have returned for js[i]; of two joins
// of the same query and table, the first reports Added. An invalid join
// gets ErrInvalidAdvance and is not sent. One join the database refuses
// never fails the others: a transaction that fails for any reason but the
// database's availability is tried again in halves, down to single joins,
// so that only the refused one carries an error. When the database is
// unavailable (or ctx ends), every join not applied carries that error.
func (s *Store) JoinFeeders(ctx context.Context, js []FeederJoin) []JoinedResult {
	res := make([]JoinedResult, len(js))
	if s.closed.Load() {
		for i, j := range js {
			res[i].Err = fmt.Errorf("join feeder %s of %s: %w", j.Query, j.Table, ErrClosed)
		}
		return res
	}
	names := make(map[feederKey]string, len(js))
	var order []feederKey
	for i, j := range js {
		if err := CheckTableName(j.Table); err != nil {
			res[i].Err = fmt.Errorf("join feeder: %w", err)
			continue
		}
		if strings.TrimSpace(j.Query) == "" || CheckTableName(j.Query) != nil {
			res[i].Err = fmt.Errorf("join feeder %s of %s: %w: a feeder must be a non-empty query id without control characters", j.Query, j.Table, ErrInvalidAdvance)
			continue
		}
		k := feederKey{j.Table, j.Query}
		n, ok := names[k]
		if !ok {
			order = append(order, k)
		}
		if n == "" {
			names[k] = j.Name
		}
	}
	slices.SortFunc(order, func(a, b feederKey) int {
		return cmp.Or(cmp.Compare(a.table, b.table), cmp.Compare(a.feeder, b.feeder))
	})
	out := make(map[feederKey]JoinedResult, len(order))
	if rest := s.known(ctx, order, names, out); len(rest) > 0 {
		s.joinAll(ctx, rest, names, out, true)
	}
	reported := make(map[feederKey]bool, len(order))
	for i, j := range js {
		if res[i].Err != nil {
			continue
		}
		k := feederKey{j.Table, j.Query}
		r := out[k]
		if r.Joined.Added && reported[k] {
			r.Joined.Added = false
		}
		reported[k] = true
		res[i] = r
	}
	return res
}

// joinAll joins the feeders of order (sorted, distinct) and records each
// one's result in out. A transaction that fails for a reason that may be
// one join's is tried again in halves; a failure of the database as a
// whole is every remaining join's result.
func (s *Store) joinAll(ctx context.Context, order []feederKey, names map[feederKey]string, out map[feederKey]JoinedResult, top bool) {
	err := s.join(ctx, order, names, out)
	if err != nil && !batchWide(ctx, err) && lockTimedOut(err) {
		// Another session holds a lock this group waited for (a control
		// row read FOR SHARE or updated in an open transaction, a feeder
		// row, a table's advisory lock): join the tables it does not
		// hold, fail the ones it does (ErrBusy), as a group of advances
		// does (isolateBusy), rather than have one open transaction hold
		// every run of the group until its deadline.
		if s.isolateBusyJoins(ctx, order, names, out, err) {
			return
		}
	}
	switch {
	case err == nil:
		return
	case len(order) == 1 && lockTimedOut(err):
		// Alone, it still waited too long for a lock the probe could
		// not see (a row another session inserted and has not
		// committed): busy like the others.
		k := order[0]
		out[k] = JoinedResult{Err: fmt.Errorf("join feeder %s of %s: %w (waited more than lock_timeout %s; an open transaction that inserted its row? see pg_stat_activity, state 'idle in transaction'): %w",
			k.feeder, k.table, ErrBusy, s.lockWait, err)}
		return
	case batchWide(ctx, err), len(order) == 1:
		for _, k := range order {
			out[k] = JoinedResult{Err: wrap(ctx, fmt.Sprintf("join feeder %s of %s", k.feeder, k.table), err)}
		}
		return
	case top:
		s.log.Warn("postgresql refused a batch of feeder joins; joining it in halves so that one cannot fail the others",
			zap.Int("joins", len(order)), zap.Error(err))
	}
	n := len(order)
	s.joinAll(ctx, order[:n/2], names, out, false)
	if r := out[order[n/2-1]]; r.Err != nil && batchWide(ctx, r.Err) {
		for _, k := range order[n/2:] {
			out[k] = r
		}
		return
	}
	s.joinAll(ctx, order[n/2:], names, out, false)
}

// known records in out the result of each join of order (sorted,
// distinct) that would write nothing, read in one statement without the
// tables' advisory locks, and returns the others, in order, for joinAll: a
// restart's joins of feeders the tables know (every run's, ADR 0023
// addendum) cost one read per group and never wait behind an advance
// that holds one of the group's tables. The read is what the locked join
// would have found had it run at this statement's snapshot: a feeder row
// is never deleted, only retired or un-retired, and a join that finds its
// row (named, or with no name to add) on a table that needs no promotion
// writes nothing. A failed read leaves every join to joinAll, which
// reports the error if it is the database's.
func (s *Store) known(ctx context.Context, order []feederKey, names map[feederKey]string, out map[feederKey]JoinedResult) []feederKey {
	tables := make([]string, len(order))
	queries := make([]string, len(order))
	qnames := make([]string, len(order))
	for i, k := range order {
		tables[i], queries[i], qnames[i] = k.table, k.feeder, names[k]
	}
	rows, err := s.pool.Query(ctx, s.sql.known, tables, queries, qnames)
	if err != nil {
		return order
	}
	found := make([]bool, len(order))
	joined := make([]Joined, len(order))
	var (
		ord int
		at  *time.Time
		why *string
	)
	if _, err := pgx.ForEachRow(rows, []any{&ord, &at, &why}, func() error {
		if ord < 1 || ord > len(order) {
			return fmt.Errorf("known feeders: row %d of %d", ord, len(order))
		}
		found[ord-1] = true
		if at != nil {
			joined[ord-1].RetiredAt = at.UTC()
		}
		if why != nil {
			joined[ord-1].RetiredWhy = *why
		}
		return nil
	}); err != nil {
		return order
	}
	var rest []feederKey
	for i, k := range order {
		if found[i] {
			out[k] = JoinedResult{Joined: joined[i]}
			continue
		}
		rest = append(rest, k)
	}
	s.stats.knownJoins.Add(int64(len(order) - len(rest)))
	return rest
}

// join joins the feeders of order (sorted, distinct) in one round trip and
// one implicit transaction: the tables' advisory locks, the promotion of
// solo tables another query joins, the feeder rows that do not exist yet
// (one that exists is not offered, so a join again is a read), and the
// retired ones among them. Every statement looks rows up by primary key
// from the input, so its cost follows the group, not the tables tracked.
func (s *Store) join(ctx context.Context, order []feederKey, names map[feederKey]string, out map[feederKey]JoinedResult) error {
	tables := make([]string, len(order))
	queries := make([]string, len(order))
	qnames := make([]string, len(order))
	for i, k := range order {
		tables[i], queries[i], qnames[i] = k.table, k.feeder, names[k]
	}
	var pb pgx.Batch
	// Every statement waits at most the lock wait for a lock another
	// session holds (see isolateBusyJoins).
	pb.Queue(setLockWait, s.lockWait)
	pb.Queue(setCustomPlans)
	pb.Queue(s.sql.lockKeys, tables, s.n.table)
	pb.Queue(s.sql.promote, tables, queries)
	pb.Queue(s.sql.join, tables, queries, qnames)
	pb.Queue(s.sql.retired, tables, queries)
	br := s.pool.SendBatch(ctx, &pb)
	got := make(map[feederKey]Joined, len(order))
	_, err := br.Exec()
	for range 3 { // setCustomPlans, lockKeys, promote
		if err == nil {
			_, err = br.Exec()
		}
	}
	if err == nil {
		var rows pgx.Rows
		if rows, err = br.Query(); err == nil {
			var (
				k     feederKey
				added bool
			)
			_, err = pgx.ForEachRow(rows, []any{&k.table, &k.feeder, &added}, func() error {
				j := got[k]
				j.Added = added
				got[k] = j
				return nil
			})
		}
	}
	if err == nil {
		var rows pgx.Rows
		if rows, err = br.Query(); err == nil {
			var (
				k   feederKey
				at  time.Time
				why *string
			)
			_, err = pgx.ForEachRow(rows, []any{&k.table, &k.feeder, &at, &why}, func() error {
				j := got[k]
				j.RetiredAt = at.UTC()
				if why != nil {
					j.RetiredWhy = *why
				}
				got[k] = j
				return nil
			})
		}
	}
	if cerr := br.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return err
	}
	for _, k := range order {
		out[k] = JoinedResult{Joined: got[k]}
	}
	return nil
}

// Joined is what JoinFeeder did: whether it added the feeder, and, when
// the query is a retired feeder of the table, since when and why (it
// does not hold the table: the table may run ahead of what it writes).
type Joined struct {
	Added      bool
	RetiredAt  time.Time
	RetiredWhy string
}

// Retired reports whether the query joined is a retired feeder.
func (j Joined) Retired() bool { return !j.RetiredAt.IsZero() }

// RetireFeeder retires the feeders of table whose query name or id is
// query, and returns them: they no longer hold the table, which then moves
// forward to the lowest watermark of the others (never back; a table with
// no feeder left stays where it is). why is kept with them. It returns the
// table's verdict after the move and whether it moved; ErrNoFeeder when no
// active feeder matches.
//
// The retirement and the table's move are one transaction under the
// table's advisory lock, as every advance through the feeders table is, so
// an advance of another feeder running at the same time is seen by it, or
// sees it.
func (s *Store) RetireFeeder(ctx context.Context, table, query, why string) ([]Feeder, Verdict, bool, error) {
	op := fmt.Sprintf("retire feeder %s of %s", query, table)
	if s.closed.Load() {
		return nil, Verdict{}, false, fmt.Errorf("%s: %w", op, ErrClosed)
	}
	if table == "" || query == "" {
		return nil, Verdict{}, false, fmt.Errorf("%s: %w: table and query are required", op, ErrNoFeeder)
	}
	if err := CheckTableName(table); err != nil {
		return nil, Verdict{}, false, fmt.Errorf("retire feeder: %w", err)
	}
	if err := CheckTableName(query); err != nil { // the same rules as a name
		return nil, Verdict{}, false, fmt.Errorf("retire feeder of %s: %w: the query name or id is invalid", table, ErrNoFeeder)
	}
	if err := CheckOperatorText("the reason", why); err != nil {
		return nil, Verdict{}, false, fmt.Errorf("%s: %w", op, err)
	}
	var (
		retired []Feeder
		ids     []string
		m       moves
	)
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		retired, ids = nil, nil
		if err := s.lockTables(ctx, tx, table); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, s.sql.promoteOne, table); err != nil {
			return err
		}
		// By id (or an expected feeder's configured name): that feeder.
		// By name: only when the name is one active feeder's, so that the
		// old and the new query of a redeploy (one name, two ids) are
		// never retired together.
		rows, err := tx.Query(ctx, `
UPDATE `+s.n.feeds+` SET retired_at = now(), retired_why = $3
WHERE table_name = $1 AND retired_at IS NULL AND (feeder = $2 OR (query_name = $2
	AND NOT EXISTS (SELECT FROM `+s.n.feeds+` x WHERE x.table_name = $1 AND x.feeder = $2 AND x.retired_at IS NULL)
	AND (SELECT count(*) FROM `+s.n.feeds+` x WHERE x.table_name = $1 AND x.query_name = $2 AND x.retired_at IS NULL) = 1))
RETURNING `+feederColumns, table, query, nullString(why))
		if err != nil {
			return err
		}
		if retired, err = pgx.CollectRows(rows, scanFeeder); err != nil {
			return err
		}
		if len(retired) == 0 {
			rows, err := tx.Query(ctx, `SELECT feeder FROM `+s.n.feeds+` WHERE table_name = $1 AND query_name = $2 AND retired_at IS NULL ORDER BY feeder`, table, query)
			if err != nil {
				return err
			}
			if ids, err = pgx.CollectRows(rows, pgx.RowTo[string]); err != nil {
				return err
			}
			return errNothingRetired // rolls the promotion back: nothing changed
		}
		// The table moves forward to the lowest watermark of the others,
		// in the same transaction, under the table's lock.
		m, err = s.settle(ctx, tx, []string{table})
		return err
	})
	switch {
	case errors.Is(err, errNothingRetired) && len(ids) > 1:
		return nil, Verdict{}, false, fmt.Errorf("%s: %w", op, &AmbiguousFeederError{Name: query, Table: table, IDs: ids, What: "active"})
	case errors.Is(err, errNothingRetired):
		return nil, Verdict{}, false, fmt.Errorf("%s: %w", op, ErrNoFeeder)
	case err != nil:
		return nil, Verdict{}, false, wrap(ctx, op, err)
	}
	v, moved, ok := m.verdict(table)
	if !ok {
		v = Verdict{Table: table}
	}
	return retired, v, moved, nil
}

// errNothingRetired rolls back a retirement or un-retirement that matched
// no feeder.
var errNothingRetired = errors.New("no feeder matched")

// UnretireFeeder takes a retired feeder of table back (by query id, or by
// name when exactly one retired feeder has that name): it holds the table
// again from its watermark on, as a feeder joining behind does (the table
// never moves back; it holds until the feeder passes it). Its retired_why
// is cleared, and an audit entry (ActionUnretire: who, why, the feeder as
// FromQueryID, the table's verdict as From and To) is written for each
// feeder taken back, in the same transaction. by is required. It returns
// the feeders taken back and the table's verdict; ErrNoFeeder when no
// retired feeder matches, ErrAmbiguousFeeder when a name matches several.
func (s *Store) UnretireFeeder(ctx context.Context, table, query, reason, by string) ([]Feeder, Verdict, error) {
	op := fmt.Sprintf("unretire feeder %s of %s", query, table)
	if s.closed.Load() {
		return nil, Verdict{}, fmt.Errorf("%s: %w", op, ErrClosed)
	}
	if table == "" || query == "" || strings.TrimSpace(by) == "" {
		return nil, Verdict{}, fmt.Errorf("%s: %w: table, query and the operator are required", op, ErrNoFeeder)
	}
	if err := CheckTableName(table); err != nil {
		return nil, Verdict{}, fmt.Errorf("unretire feeder: %w", err)
	}
	if err := CheckTableName(query); err != nil {
		return nil, Verdict{}, fmt.Errorf("unretire feeder of %s: %w: the query name or id is invalid", table, ErrNoFeeder)
	}
	if err := CheckOperatorText("the reason", reason); err != nil {
		return nil, Verdict{}, fmt.Errorf("%s: %w", op, err)
	}
	if err := CheckOperatorText("by", by); err != nil {
		return nil, Verdict{}, fmt.Errorf("%s: %w", op, err)
	}
	var (
		back []Feeder
		ids  []string
		v    Verdict
	)
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		back, ids = nil, nil
		if err := s.lockTables(ctx, tx, table); err != nil {
			return err
		}
		// A solo table's feeder joins the feeders table first, so that
		// the one taken back holds the table beside it.
		if _, err := tx.Exec(ctx, s.sql.promoteOne, table); err != nil {
			return err
		}
		rows, err := tx.Query(ctx, `
UPDATE `+s.n.feeds+` SET retired_at = NULL, retired_why = NULL
WHERE table_name = $1 AND retired_at IS NOT NULL AND (feeder = $2 OR (query_name = $2
	AND NOT EXISTS (SELECT FROM `+s.n.feeds+` x WHERE x.table_name = $1 AND x.feeder = $2)
	AND (SELECT count(*) FROM `+s.n.feeds+` x WHERE x.table_name = $1 AND x.query_name = $2 AND x.retired_at IS NOT NULL) = 1))
RETURNING `+feederColumns, table, query)
		if err != nil {
			return err
		}
		if back, err = pgx.CollectRows(rows, scanFeeder); err != nil {
			return err
		}
		if len(back) == 0 {
			rows, err := tx.Query(ctx, `SELECT feeder FROM `+s.n.feeds+` WHERE table_name = $1 AND query_name = $2 AND retired_at IS NOT NULL ORDER BY feeder`, table, query)
			if err != nil {
				return err
			}
			if ids, err = pgx.CollectRows(rows, pgx.RowTo[string]); err != nil {
				return err
			}
			return errNothingRetired
		}
		v, err = scanVerdict(tx.QueryRow(ctx, s.sql.get, table))
		if errors.Is(err, pgx.ErrNoRows) {
			v, err = Verdict{Table: table}, nil
		}
		if err != nil {
			return err
		}
		for _, f := range back {
			why := "feeder " + f.Feeder + " takes the table back"
			if reason != "" {
				why += ": " + reason
			}
			// The audit entry's provenance is the feeder's: who holds
			// the table again.
			if _, err := s.audit(ctx, tx, ActionUnretire, table, why, by,
				Verdict{FinalizedUntil: v.FinalizedUntil, QueryID: f.Feeder, RunID: f.RunID, BatchID: f.BatchID, EndTime: f.EndTime},
				v.FinalizedUntil, time.Time{}); err != nil {
				return err
			}
		}
		return nil
	})
	switch {
	case errors.Is(err, errNothingRetired) && len(ids) > 1:
		return nil, Verdict{}, fmt.Errorf("%s: %w", op, &AmbiguousFeederError{Name: query, Table: table, IDs: ids, What: "retired"})
	case errors.Is(err, errNothingRetired):
		return nil, Verdict{}, fmt.Errorf("%s: %w: no retired feeder of that name or id", op, ErrNoFeeder)
	case err != nil:
		return nil, Verdict{}, wrap(ctx, op, err)
	}
	return back, v, nil
}

// Settle moves table forward to the lowest watermark of its feeders as
// they stand, as an advance or a retirement does, and returns its verdict
// and whether it moved. Nothing needs to call it for correctness; it is
// the operator's "try again now".
func (s *Store) Settle(ctx context.Context, table string) (Verdict, bool, error) {
	if s.closed.Load() {
		return Verdict{}, false, fmt.Errorf("settle %s: %w", table, ErrClosed)
	}
	var m moves
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		if err := s.lockTables(ctx, tx, table); err != nil {
			return err
		}
		var err error
		m, err = s.settle(ctx, tx, []string{table})
		return err
	})
	if err != nil {
		return Verdict{}, false, wrap(ctx, "settle "+table, err)
	}
	v, moved, ok := m.verdict(table)
	if !ok {
		return Verdict{}, false, fmt.Errorf("settle %s: %w", table, ErrNotFound)
	}
	return v, moved, nil
}

// scanFeeder reads feederColumns.
func scanFeeder(row pgx.CollectableRow) (Feeder, error) {
	var (
		f                         Feeder
		name, runID, why          *string
		until, endTime, retiredAt *time.Time
		batchID                   *int64
	)
	if err := row.Scan(&f.Table, &f.Feeder, &name, &until, &endTime, &runID, &batchID, &f.Expected, &f.JoinedAt, &f.UpdatedAt, &retiredAt, &why); err != nil {
		return Feeder{}, err
	}
	if name != nil {
		f.QueryName = *name
	}
	if until != nil {
		f.FinalizedUntil = until.UTC()
	}
	if endTime != nil {
		f.EndTime = endTime.UTC()
	}
	if runID != nil {
		f.RunID = *runID
	}
	if batchID != nil {
		f.BatchID = *batchID
	}
	if retiredAt != nil {
		f.RetiredAt = retiredAt.UTC()
	}
	if why != nil {
		f.RetiredWhy = *why
	}
	f.JoinedAt, f.UpdatedAt = f.JoinedAt.UTC(), f.UpdatedAt.UTC()
	return f, nil
}

// HeldBy returns the feeder that holds a table back: of feeders (one
// table's), the holder (see Holder) when it has not reported yet or
// another active feeder is ahead of it. A table with one feeder, or whose
// feeders stand at the same point, is held by none.
func HeldBy(feeders []Feeder) (Feeder, bool) {
	h, ok := Holder(feeders)
	if !ok {
		return Feeder{}, false
	}
	if h.FinalizedUntil.IsZero() {
		return h, true
	}
	for _, f := range feeders {
		if !f.Retired() && f.FinalizedUntil.After(h.FinalizedUntil) {
			return h, true
		}
	}
	return Feeder{}, false
}
