package control

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"go.uber.org/zap"
)

// The states of a Send.
const (
	SendPending    = "pending"    // waiting for its delivery (in order per action and table)
	SendDelivered  = "delivered"  // delivered
	SendDead       = "dead"       // dead-lettered: out of attempts, or its queue was full
	SendSuperseded = "superseded" // a rewind of its table came before its delivery
)

// Defaults of an Outbox.
const (
	// DefaultOutboxConns is the Outbox's own pool size when
	// OutboxOptions.MaxConns is zero: deliveries hold a transaction while
	// they deliver, and never take a connection of the Store's pool, which
	// the advances use. The service sizes it to its actions
	// (actions.Connections: one per action and a few spare).
	DefaultOutboxConns = 4
	// maxSendError bounds the last error kept with a Send.
	maxSendError = 500
)

// OutboxOptions configure OpenOutbox. The zero value is usable.
type OutboxOptions struct {
	// Table is the control table, as in Options.Table.
	Table string
	// MaxConns caps the Outbox's own pool; zero means DefaultOutboxConns.
	MaxConns int32
	// Logger; nil discards.
	Logger *zap.Logger
}

// Outbox is the actions' side of the control table (issue 19): the moves
// of tables with actions, written by a trigger in the transaction of each
// move, and the events (Send) each action delivers. It has its own
// connection pool. Its methods are safe for concurrent use, also from
// several replicas of the service on one database: one replica at a time
// expands the moves (an advisory lock), and each event is delivered by one
// replica at a time (FOR UPDATE SKIP LOCKED).
type Outbox struct {
	pool      *pgxpool.Pool
	log       *zap.Logger
	n         names
	closed    atomic.Bool
	closeOnce sync.Once
}

// OpenOutbox returns the Outbox of the control table o.Table in the
// database at url. It does not connect. The control table must be
// migrated (Store.Migrate) before use; Close it after.
func OpenOutbox(ctx context.Context, url string, o OutboxOptions) (*Outbox, error) {
	if o.Table == "" {
		o.Table = DefaultTable
	}
	schema, name, err := ParseTableName(o.Table)
	if err != nil {
		return nil, fmt.Errorf("open outbox: %w", err)
	}
	cfg, err := poolConfig(url, o.MaxConns, DefaultOutboxConns, DefaultApplicationName+"-actions")
	if err != nil {
		return nil, fmt.Errorf("open outbox: %w", err)
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("open outbox: %w", err)
	}
	ob := &Outbox{pool: pool, log: o.Logger, n: newNames(schema, name)}
	if ob.log == nil {
		ob.log = zap.NewNop()
	}
	return ob, nil
}

// Close closes the pool, blocking until connections in use are returned.
// Safe to call twice.
func (o *Outbox) Close() {
	o.closeOnce.Do(func() {
		o.closed.Store(true)
		o.pool.Close()
	})
}

// TablePattern is the LIKE pattern of a table name template with {name}
// and {id} placeholders (finalizer.Rule.Table): each placeholder matches
// any text; every other character matches itself.
func TablePattern(template string) string {
	esc := strings.NewReplacer(`\`, `\\`, `%`, `\%`, `_`, `\_`).Replace(template)
	return strings.NewReplacer("{name}", "%", "{id}", "%").Replace(esc)
}

// SetActionTables records which tables have actions: the LIKE patterns
// of TablePattern, replacing those recorded before (the config of the
// replica that starts last wins: replicas must share their actions), and
// marks every existing row of the control table that matches (and
// unmarks the others), in one transaction. From then on, each move of a
// marked table writes one outbox row in the transaction of the move; a
// table's first verdict marks it when it matches a pattern.
func (o *Outbox) SetActionTables(ctx context.Context, patterns []string) error {
	if o.closed.Load() {
		return fmt.Errorf("set action tables: %w", ErrClosed)
	}
	err := pgx.BeginFunc(ctx, o.pool, func(tx pgx.Tx) error {
		rows, err := tx.Query(ctx, "SELECT pattern FROM "+o.n.acts+" ORDER BY pattern")
		if err != nil {
			return err
		}
		have, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			return err
		}
		want := slices.Clone(patterns)
		slices.Sort(want)
		want = slices.Compact(want)
		if slices.Equal(have, want) {
			return nil // the rows' flags followed the patterns when they were set
		}
		if _, err := tx.Exec(ctx, "DELETE FROM "+o.n.acts); err != nil {
			return err
		}
		if len(patterns) > 0 {
			if _, err := tx.Exec(ctx, "INSERT INTO "+o.n.acts+" (pattern) SELECT DISTINCT unnest($1::text[])", patterns); err != nil {
				return err
			}
		}
		// Only rows whose flag changes are written.
		_, err = tx.Exec(ctx, `
UPDATE `+o.n.table+` c SET actions = m.want
FROM (SELECT table_name, EXISTS (SELECT FROM `+o.n.acts+` a WHERE t.table_name LIKE a.pattern) AS want FROM `+o.n.table+` t) m
WHERE c.table_name = m.table_name AND c.actions <> m.want`)
		return err
	})
	var pgErr *pgconn.PgError
	if len(patterns) == 0 && errors.As(err, &pgErr) && pgErr.Code == "42501" {
		// A role without the grants of the actions' tables (an upgrade
		// that kept the old grants) and a config without actions: nothing
		// to record. Were an earlier config's patterns left, their tables'
		// moves would queue in the outbox unread: say so.
		o.log.Warn("cannot read the tables with actions (permission denied); with no actions configured this is harmless unless an earlier config had actions (see SECURITY.md for the grants)",
			zap.String("table", o.n.display+actsSuffix))
		return nil
	}
	return wrap(ctx, "set action tables", err)
}

// Move is one move of a table with actions, read from the outbox.
type Move struct {
	ID    int64
	Table string
	// From is the verdict before the move; zero for the table's first
	// verdict.
	From time.Time
	// To is the verdict after it.
	To      time.Time
	QueryID string
	RunID   string
	BatchID int64
	// MovedAt is the time of the move's transaction.
	MovedAt time.Time
	// Generation counts the table's rewinds seen before this move: the
	// events of a period announced again after a rewind have a new id.
	Generation int64
	// HighWater is the highest verdict of the table announced before this
	// move (zero: none): a period ending at or before it is announced
	// again.
	HighWater time.Time
}

// Send is one event of one action: the row an expansion writes and a
// delivery reads.
type Send struct {
	Seq     int64
	Action  string // the action's key
	EventID string
	Table   string
	// PeriodStart and PeriodEnd are the period the event announces.
	PeriodStart, PeriodEnd time.Time
	Payload                []byte
	MovedAt                time.Time
	Attempts               int // deliveries tried before this one
}

// ExpandResult counts what one Expand wrote.
type ExpandResult struct {
	Moves   int            // outbox rows consumed (rewinds included)
	Rewinds int            // of them, rewinds
	Queued  map[string]int // events queued per action
	Dead    map[string]int // events dead-lettered at once per action: the queue was full
	Skipped bool           // another replica was expanding
}

// Expand consumes up to limit moves from the outbox, oldest first, in one
// transaction: each forward move becomes the events expand returns for it
// (one per period and action), queued in the same transaction that
// deletes the move, so a crash loses nothing and queues nothing twice. A
// rewind (To before From) adds one to the table's generation, supersedes
// its pending events of periods that are no longer final, and queues what
// expand returns for it (the withdrawal of markers).
// An action's events beyond maxPending[action] pending ones (0: no bound)
// are dead-lettered at once ("queue full"). One replica expands at a time
// (an advisory lock): a call that finds another expanding returns with
// Skipped set. An error of expand aborts the whole call: nothing is
// consumed.
func (o *Outbox) Expand(ctx context.Context, limit int, maxPending map[string]int, expand func(Move) ([]Send, error)) (ExpandResult, error) {
	res := ExpandResult{Queued: map[string]int{}, Dead: map[string]int{}}
	if o.closed.Load() {
		return res, fmt.Errorf("expand outbox: %w", ErrClosed)
	}
	err := pgx.BeginFunc(ctx, o.pool, func(tx pgx.Tx) error {
		res = ExpandResult{Queued: map[string]int{}, Dead: map[string]int{}}
		var locked bool
		if err := tx.QueryRow(ctx, "SELECT pg_try_advisory_xact_lock($1)", o.lockKey()).Scan(&locked); err != nil {
			return err
		}
		if !locked {
			res.Skipped = true
			return nil
		}
		rows, err := tx.Query(ctx, `SELECT id, table_name, from_until, to_until, coalesce(query_id, ''), coalesce(run_id, ''), coalesce(batch_id, 0), moved_at
FROM `+o.n.outbox+` ORDER BY id LIMIT $1`, limit)
		if err != nil {
			return err
		}
		moves, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (Move, error) {
			var m Move
			var from *time.Time
			err := r.Scan(&m.ID, &m.Table, &from, &m.To, &m.QueryID, &m.RunID, &m.BatchID, &m.MovedAt)
			if from != nil {
				m.From = from.UTC()
			}
			m.To, m.MovedAt = m.To.UTC(), m.MovedAt.UTC()
			return m, err
		})
		if err != nil || len(moves) == 0 {
			return err
		}
		type anno struct {
			gen  int64
			high time.Time
		}
		states := map[string]*anno{}
		var tables []string
		for _, m := range moves {
			if states[m.Table] == nil {
				states[m.Table] = &anno{}
				tables = append(tables, m.Table)
			}
		}
		rows, err = tx.Query(ctx, "SELECT table_name, generation, high_water FROM "+o.n.anno+" WHERE table_name = ANY($1)", tables)
		if err != nil {
			return err
		}
		for rows.Next() {
			var t string
			var gen int64
			var high *time.Time
			if err := rows.Scan(&t, &gen, &high); err != nil {
				rows.Close()
				return err
			}
			states[t].gen = gen
			if high != nil {
				states[t].high = high.UTC()
			}
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return err
		}
		pending := map[string]int{}
		if len(maxPending) > 0 {
			rows, err = tx.Query(ctx, "SELECT action, count(*) FROM "+o.n.sends+" WHERE state = 'pending' GROUP BY action")
			if err != nil {
				return err
			}
			for rows.Next() {
				var a string
				var c int
				if err := rows.Scan(&a, &c); err != nil {
					rows.Close()
					return err
				}
				pending[a] = c
			}
			rows.Close()
			if err := rows.Err(); err != nil {
				return err
			}
		}
		ids := make([]int64, 0, len(moves))
		for _, m := range moves {
			ids = append(ids, m.ID)
			st := states[m.Table]
			res.Moves++
			if !m.From.IsZero() && m.To.Before(m.From) {
				res.Rewinds++
				st.gen++
				if m.From.After(st.high) {
					st.high = m.From
				}
				if _, err := tx.Exec(ctx, `UPDATE `+o.n.sends+` SET state = 'superseded', done_at = now(), last_error = $3
WHERE table_name = $1 AND state = 'pending' AND period_end > $2`, m.Table, m.To, "rewound to "+m.To.Format(time.RFC3339Nano)+" before its delivery"); err != nil {
					return err
				}
				// What the rewind withdraws (a marker of a period no
				// longer final), queued after what it superseded and
				// before any announcement again.
				m.Generation, m.HighWater = st.gen, st.high
				sends, err := expand(m)
				if err != nil {
					return fmt.Errorf("expand the rewind of %s to %s: %w", m.Table, m.To.Format(time.RFC3339), err)
				}
				if err := o.queue(ctx, tx, sends, maxPending, pending, &res); err != nil {
					return err
				}
				continue
			}
			m.Generation, m.HighWater = st.gen, st.high
			sends, err := expand(m)
			if err != nil {
				return fmt.Errorf("expand the move of %s to %s: %w", m.Table, m.To.Format(time.RFC3339), err)
			}
			if err := o.queue(ctx, tx, sends, maxPending, pending, &res); err != nil {
				return err
			}
			if m.To.After(st.high) {
				st.high = m.To
			}
		}
		var (
			ts    []string
			gens  []int64
			highs []*time.Time
		)
		for _, t := range tables {
			st := states[t]
			ts, gens = append(ts, t), append(gens, st.gen)
			var h *time.Time
			if !st.high.IsZero() {
				hh := st.high
				h = &hh
			}
			highs = append(highs, h)
		}
		if _, err := tx.Exec(ctx, `INSERT INTO `+o.n.anno+` (table_name, generation, high_water)
SELECT * FROM unnest($1::text[], $2::bigint[], $3::timestamptz[])
ON CONFLICT (table_name) DO UPDATE SET generation = EXCLUDED.generation, high_water = EXCLUDED.high_water`, ts, gens, highs); err != nil {
			return err
		}
		_, err = tx.Exec(ctx, "DELETE FROM "+o.n.outbox+" WHERE id = ANY($1)", ids)
		return err
	})
	if err != nil {
		return ExpandResult{Queued: map[string]int{}, Dead: map[string]int{}}, wrap(ctx, "expand outbox", err)
	}
	return res, nil
}

// queue inserts sends, dead-lettering those beyond their action's bound.
func (o *Outbox) queue(ctx context.Context, tx pgx.Tx, sends []Send, maxPending map[string]int, pending map[string]int, res *ExpandResult) error {
	if len(sends) == 0 {
		return nil
	}
	n := len(sends)
	var (
		actions, ids, tables, payloads, states, errs = make([]string, n), make([]string, n), make([]string, n), make([]string, n), make([]string, n), make([]*string, n)
		starts, ends, moved                          = make([]time.Time, n), make([]time.Time, n), make([]time.Time, n)
	)
	for i, s := range sends {
		actions[i], ids[i], tables[i], payloads[i] = s.Action, s.EventID, s.Table, string(s.Payload)
		starts[i], ends[i], moved[i] = s.PeriodStart, s.PeriodEnd, s.MovedAt
		states[i] = SendPending
		if limit := maxPending[s.Action]; limit > 0 && pending[s.Action] >= limit {
			states[i] = SendDead
			e := fmt.Sprintf("queue full: %d events of this action pending", pending[s.Action])
			errs[i] = &e
			res.Dead[s.Action]++
			continue
		}
		pending[s.Action]++
		res.Queued[s.Action]++
	}
	_, err := tx.Exec(ctx, `INSERT INTO `+o.n.sends+` (action, event_id, table_name, period_start, period_end, payload, moved_at, state, last_error, done_at)
SELECT a, e, t, ps, pe, p, m, st, le, CASE WHEN st = 'pending' THEN NULL ELSE now() END
FROM unnest($1::text[], $2::text[], $3::text[], $4::timestamptz[], $5::timestamptz[], $6::text[], $7::timestamptz[], $8::text[], $9::text[])
	AS i(a, e, t, ps, pe, p, m, st, le)
ORDER BY ps
ON CONFLICT (action, event_id) DO NOTHING`, actions, ids, tables, starts, ends, payloads, moved, states, errs)
	return err
}

// Outcome is what a delivery did with one Send.
type Outcome struct {
	// Err is nil when the event was delivered.
	Err error
	// Dead dead-letters the event (with Err): out of attempts, or refused
	// for good.
	Dead bool
	// RetryAt is when to try again after a failure that is not Dead.
	RetryAt time.Time
}

// DeliverResult counts what one Deliver did.
type DeliverResult struct {
	Claimed, Delivered, Failed, Dead int
}

// Deliver claims up to limit of action's events that are due, the oldest
// pending event of each table only (so each table's events are delivered
// in order), and hands them to deliver in one transaction that holds
// their rows (FOR UPDATE SKIP LOCKED: another replica's Deliver takes
// other tables' events meanwhile, never these), then records the
// outcomes, one per Send in order. deliver runs while the rows are held:
// a crash before the commit leaves them pending, and they are delivered
// again (at least once; receivers deduplicate by event id).
func (o *Outbox) Deliver(ctx context.Context, action string, limit int, deliver func(context.Context, []Send) []Outcome) (DeliverResult, error) {
	var res DeliverResult
	if o.closed.Load() {
		return res, fmt.Errorf("deliver: %w", ErrClosed)
	}
	err := pgx.BeginFunc(ctx, o.pool, func(tx pgx.Tx) error {
		res = DeliverResult{}
		rows, err := tx.Query(ctx, `SELECT d.seq, d.action, d.event_id, d.table_name, d.period_start, d.period_end, d.payload, d.moved_at, d.attempts
FROM `+o.n.sends+` d
WHERE d.action = $1 AND d.state = 'pending' AND d.next_at <= now()
	AND NOT EXISTS (SELECT FROM `+o.n.sends+` e WHERE e.action = d.action AND e.table_name = d.table_name AND e.state = 'pending' AND e.seq < d.seq)
ORDER BY d.seq LIMIT $2 FOR UPDATE OF d SKIP LOCKED`, action, limit)
		if err != nil {
			return err
		}
		sends, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (Send, error) {
			var s Send
			var payload string
			err := r.Scan(&s.Seq, &s.Action, &s.EventID, &s.Table, &s.PeriodStart, &s.PeriodEnd, &payload, &s.MovedAt, &s.Attempts)
			s.Payload = []byte(payload)
			s.PeriodStart, s.PeriodEnd, s.MovedAt = s.PeriodStart.UTC(), s.PeriodEnd.UTC(), s.MovedAt.UTC()
			return s, err
		})
		if err != nil || len(sends) == 0 {
			return err
		}
		res.Claimed = len(sends)
		outcomes := deliver(ctx, sends)
		if len(outcomes) != len(sends) {
			return fmt.Errorf("deliver: %d outcomes for %d events", len(outcomes), len(sends))
		}
		n := len(sends)
		seqs, states, errs, nexts := make([]int64, n), make([]string, n), make([]*string, n), make([]time.Time, n)
		now := time.Now()
		for i, oc := range outcomes {
			seqs[i] = sends[i].Seq
			nexts[i] = now
			switch {
			case oc.Err == nil:
				states[i] = SendDelivered
				res.Delivered++
			case oc.Dead:
				states[i] = SendDead
				res.Dead++
			default:
				states[i] = SendPending
				res.Failed++
				if !oc.RetryAt.IsZero() {
					nexts[i] = oc.RetryAt
				}
			}
			if oc.Err != nil {
				e := oc.Err.Error()
				if len(e) > maxSendError {
					e = e[:maxSendError]
				}
				e = strings.ToValidUTF8(e, "?")
				errs[i] = &e
			}
		}
		_, err = tx.Exec(ctx, `UPDATE `+o.n.sends+` d SET state = u.st, attempts = d.attempts + 1, next_at = u.nx,
	last_error = coalesce(u.le, d.last_error), done_at = CASE WHEN u.st = 'pending' THEN NULL ELSE now() END
FROM unnest($1::bigint[], $2::text[], $3::text[], $4::timestamptz[]) AS u(seq, st, le, nx)
WHERE d.seq = u.seq`, seqs, states, errs, nexts)
		return err
	})
	if err != nil {
		return DeliverResult{}, wrap(ctx, "deliver "+action, err)
	}
	return res, nil
}

// Backlog is what is waiting or dead for one action and table (or, with
// Action empty, moves waiting in the outbox to be expanded).
type Backlog struct {
	Action string
	Table  string
	// Pending events, and the move time of the oldest.
	Pending       int
	OldestMovedAt time.Time
	// Attempts and LastError of the oldest pending event (the one the
	// others wait for), and when it is tried next.
	Attempts  int
	LastError string
	NextAt    time.Time
	// Dead counts the dead-lettered events kept.
	Dead int
}

// Backlogs returns, per action and table (table "" for every table),
// the pending and dead events, and, with Action "", the moves not
// expanded yet. Delivered events are not listed.
func (o *Outbox) Backlogs(ctx context.Context, table string) ([]Backlog, error) {
	if o.closed.Load() {
		return nil, fmt.Errorf("read action backlog: %w", ErrClosed)
	}
	return backlogs(ctx, o.pool, o.n, table)
}

// ActionBacklogs is Outbox.Backlogs on the Store's pool (for `finalizer
// status`, which opens a Store only). Backlogs and ActionBacklogs return
// none, and no error, for a role that may not read the actions' tables or
// a database without them.
func (s *Store) ActionBacklogs(ctx context.Context, table string) ([]Backlog, error) {
	if s.closed.Load() {
		return nil, fmt.Errorf("read action backlog: %w", ErrClosed)
	}
	return backlogs(ctx, s.pool, s.n, table)
}

// unreadable reports an error of a role that may not read the actions'
// tables (42501) or of a database without them (42P01): the backlog is
// then unknown, which must not fail a status (a read-only role, an
// upgrade that kept the old grants).
func unreadable(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && (pgErr.Code == "42501" || pgErr.Code == "42P01")
}

// queryer is what backlogs needs of a pool.
type queryer interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
}

func backlogs(ctx context.Context, pool queryer, n names, table string) ([]Backlog, error) {
	o := struct{ n names }{n}
	rows, err := pool.Query(ctx, `
WITH s AS (
	SELECT action, table_name, state, moved_at, attempts, last_error, next_at, seq FROM `+o.n.sends+`
	WHERE state IN ('pending', 'dead') AND ($1 = '' OR table_name = $1)
), head AS (
	SELECT DISTINCT ON (action, table_name) action, table_name, attempts, last_error, next_at
	FROM s WHERE state = 'pending' ORDER BY action, table_name, seq
)
SELECT s.action, s.table_name, count(*) FILTER (WHERE state = 'pending'), min(moved_at) FILTER (WHERE state = 'pending'),
	coalesce(h.attempts, 0), coalesce(h.last_error, ''), h.next_at, count(*) FILTER (WHERE state = 'dead')
FROM s LEFT JOIN head h USING (action, table_name)
GROUP BY s.action, s.table_name, h.attempts, h.last_error, h.next_at
UNION ALL
SELECT '', table_name, count(*), min(moved_at), 0, '', NULL, 0 FROM `+o.n.outbox+`
WHERE $1 = '' OR table_name = $1 GROUP BY table_name
ORDER BY 2, 1`, table)
	if err != nil {
		if unreadable(err) {
			return nil, nil
		}
		return nil, wrap(ctx, "read action backlog", err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (Backlog, error) {
		var b Backlog
		var oldest, next *time.Time
		err := r.Scan(&b.Action, &b.Table, &b.Pending, &oldest, &b.Attempts, &b.LastError, &next, &b.Dead)
		if oldest != nil {
			b.OldestMovedAt = oldest.UTC()
		}
		if next != nil {
			b.NextAt = next.UTC()
		}
		return b, err
	})
	if err != nil {
		if unreadable(err) {
			return nil, nil
		}
		return nil, wrap(ctx, "read action backlog", err)
	}
	return out, nil
}

// ActionTotals are one action's pending and dead events.
type ActionTotals struct {
	Pending       int
	OldestMovedAt time.Time // of the oldest pending event; zero: none
	Dead          int
}

// Totals returns the pending and dead events per action (for the
// metrics), and under "" the moves not expanded yet.
func (o *Outbox) Totals(ctx context.Context) (map[string]ActionTotals, error) {
	if o.closed.Load() {
		return nil, fmt.Errorf("read action totals: %w", ErrClosed)
	}
	rows, err := o.pool.Query(ctx, `
SELECT action, count(*) FILTER (WHERE state = 'pending'), min(moved_at) FILTER (WHERE state = 'pending'), count(*) FILTER (WHERE state = 'dead')
FROM `+o.n.sends+` WHERE state IN ('pending', 'dead') GROUP BY action
UNION ALL
SELECT '', count(*), min(moved_at), 0 FROM `+o.n.outbox)
	if err != nil {
		return nil, wrap(ctx, "read action totals", err)
	}
	defer rows.Close()
	out := map[string]ActionTotals{}
	for rows.Next() {
		var a string
		var t ActionTotals
		var oldest *time.Time
		if err := rows.Scan(&a, &t.Pending, &oldest, &t.Dead); err != nil {
			return nil, wrap(ctx, "read action totals", err)
		}
		if oldest != nil {
			t.OldestMovedAt = oldest.UTC()
		}
		out[a] = t
	}
	return out, wrap(ctx, "read action totals", rows.Err())
}

// Sends returns every event of table (for tests and operators), in the
// order they were queued.
func (o *Outbox) Sends(ctx context.Context, table string) ([]SendState, error) {
	rows, err := o.pool.Query(ctx, `SELECT action, event_id, period_start, period_end, state, attempts, coalesce(last_error, '')
FROM `+o.n.sends+` WHERE table_name = $1 ORDER BY seq`, table)
	if err != nil {
		return nil, wrap(ctx, "read sends", err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (SendState, error) {
		var s SendState
		err := r.Scan(&s.Action, &s.EventID, &s.PeriodStart, &s.PeriodEnd, &s.State, &s.Attempts, &s.LastError)
		s.PeriodStart, s.PeriodEnd = s.PeriodStart.UTC(), s.PeriodEnd.UTC()
		return s, err
	})
	return out, wrap(ctx, "read sends", err)
}

// SendState is one event of one action as it stands.
type SendState struct {
	Action, EventID        string
	PeriodStart, PeriodEnd time.Time
	State                  string
	Attempts               int
	LastError              string
}

// Purge deletes delivered and superseded events finished before done,
// and dead ones finished before dead. It returns how many it deleted.
func (o *Outbox) Purge(ctx context.Context, done, dead time.Time) (int64, error) {
	if o.closed.Load() {
		return 0, fmt.Errorf("purge sends: %w", ErrClosed)
	}
	tag, err := o.pool.Exec(ctx, `DELETE FROM `+o.n.sends+`
WHERE (state IN ('delivered', 'superseded') AND done_at < $1) OR (state = 'dead' AND done_at < $2)`, done, dead)
	if err != nil {
		return 0, wrap(ctx, "purge sends", err)
	}
	return tag.RowsAffected(), nil
}

// lockKey is the advisory lock key of this control table's expansion.
func (o *Outbox) lockKey() int64 {
	h := fnv.New64a()
	h.Write([]byte("finalizer actions expand " + o.n.table))
	return int64(h.Sum64())
}
