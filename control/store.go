package control

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"go.uber.org/zap"

	"github.com/finalizer-dev/finalizer/internal/lograte"
)

// Defaults of a Store.
const (
	// DefaultTable is the control table used when Options.Table is empty.
	DefaultTable = "public.table_finalization"
	// NotifyChannel is the channel a move is announced on, with the payload
	// {"table": ..., "finalized_until": RFC 3339 UTC}.
	NotifyChannel = "finalizer_verdict"
	// DefaultMaxConns is the pool size when Options.MaxConns is zero. The
	// LISTEN connection of Wait is not counted: it is its own.
	DefaultMaxConns = 8
	// DefaultConnectTimeout bounds one connection attempt when the URL
	// sets no connect_timeout.
	DefaultConnectTimeout = 10 * time.Second
	// DefaultApplicationName is reported to the server (pg_stat_activity)
	// when the URL sets no application_name; the LISTEN connection reports
	// it with the suffix "-listen".
	DefaultApplicationName = "finalizer"
)

// Options configure Open. The zero value is usable.
type Options struct {
	// Table is the control table, "[schema.]name" (see ParseTableName);
	// empty means DefaultTable.
	Table string
	// MaxConns caps the connection pool; zero means DefaultMaxConns.
	MaxConns int32
	// Logger receives what nobody can be returned an error for (the LISTEN
	// connection's reconnects); nil discards it.
	Logger *zap.Logger
	// LockWait bounds how long a statement of an advance waits for a lock
	// another session holds (PostgreSQL's lock_timeout, set for the
	// advance's transaction only); zero means DefaultLockWait. See
	// AdvanceBatch and ErrBusy.
	LockWait time.Duration
}

// Store is the control table in one PostgreSQL database. Its methods are
// safe for concurrent use.
type Store struct {
	pool *pgxpool.Pool
	log  *zap.Logger
	n    names
	sql  statements

	lockWait string // lock_timeout of an advance's transaction, e.g. "1000ms"
	// planMode is the connections' plan_cache_mode (the URL's, else
	// force_generic_plan), set again for the advance statement after
	// setCustomPlans (runShared).
	planMode string
	// warn rate-limits the warnings an advance or a join retried every
	// few seconds repeats while a lock is held (isolateBusy,
	// isolateBusyJoins).
	warn *lograte.Limiter
	lis  *listener
	// direct: the pool's connections prepare statements (pgx's default
	// exec mode), so a group's sole statement goes through soleDirect.
	direct    bool
	stats     storeStats
	shared    sharedHint
	closed    atomic.Bool
	closeOnce sync.Once
}

// poolConfig parses url into a pool's configuration with the settings
// every pool of the package shares: maxConns (or defaultConns when not
// positive), no idle minimum, DefaultConnectTimeout unless the URL sets
// one, and app as application_name unless the URL names one.
func poolConfig(url string, maxConns, defaultConns int32, app string) (*pgxpool.Config, error) {
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		return nil, err
	}
	cfg.MaxConns = maxConns
	if cfg.MaxConns <= 0 {
		cfg.MaxConns = defaultConns
	}
	cfg.MinConns = 0
	if cfg.ConnConfig.ConnectTimeout == 0 {
		cfg.ConnConfig.ConnectTimeout = DefaultConnectTimeout
	}
	if cfg.ConnConfig.RuntimeParams["application_name"] == "" {
		cfg.ConnConfig.RuntimeParams["application_name"] = app
	}
	return cfg, nil
}

// Open returns a Store for the database at url (a postgres:// URL or a
// key=value DSN) and the control table o.Table. It does not connect:
// PostgreSQL may be down at start, and every operation connects as needed
// (failing with ErrUnavailable while it is down). It fails on a malformed
// url and with ErrInvalidName on a bad table name. Call Migrate or
// CheckSchema before use, and Close after.
func Open(ctx context.Context, url string, o Options) (*Store, error) {
	if o.Table == "" {
		o.Table = DefaultTable
	}
	schema, name, err := ParseTableName(o.Table)
	if err != nil {
		return nil, fmt.Errorf("open control store: %w", err)
	}
	cfg, err := poolConfig(url, o.MaxConns, DefaultMaxConns, DefaultApplicationName)
	if err != nil {
		return nil, fmt.Errorf("open control store: %w", err)
	}
	if cfg.ConnConfig.RuntimeParams["plan_cache_mode"] == "" {
		// The advance statement is planned once per connection, not per
		// call: its plan does not depend on the values (arrays through
		// unnest, primary-key lookups), and planning it costs more than
		// running it. The transactions that write through the feeders
		// table set force_custom_plan for themselves (setCustomPlans).
		cfg.ConnConfig.RuntimeParams["plan_cache_mode"] = "force_generic_plan"
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("open control store: %w", err)
	}
	if o.LockWait <= 0 {
		o.LockWait = DefaultLockWait
	}
	s := &Store{pool: pool, log: o.Logger, n: newNames(schema, name), direct: cfg.ConnConfig.DefaultQueryExecMode == pgx.QueryExecModeCacheStatement,
		lockWait: fmt.Sprintf("%dms", max(o.LockWait.Milliseconds(), 1)), planMode: cfg.ConnConfig.RuntimeParams["plan_cache_mode"],
		warn: lograte.New(nil, busyWarnEvery)}
	if s.log == nil {
		s.log = zap.NewNop()
	}
	s.log = s.log.With(zap.String("control_table", s.n.display))
	s.sql = newStatements(s.n)
	listenCfg := cfg.ConnConfig.Copy()
	listenCfg.RuntimeParams["application_name"] = cfg.ConnConfig.RuntimeParams["application_name"] + "-listen"
	s.lis = newListener(s.n.display, func(ctx context.Context) (*pgx.Conn, error) {
		return pgx.ConnectConfig(ctx, listenCfg)
	}, s.log)
	return s, nil
}

// StoreStats counts the statements of a Store's advances since Open
// (ADR 0015): what a table with several feeders costs beyond one feeder.
type StoreStats struct {
	// SoleStatements are the sole statements that succeeded (the advance
	// of a table's one feeder, one row per table); Sole the advances they
	// were offered, including those they passed on to a shared
	// transaction.
	SoleStatements int64
	Sole           int64
	// AdvanceStatements are the shared transactions that succeeded (an
	// advance through the feeders table); Advanced the feeder rows they
	// were offered, FeederWrites the feeder rows they wrote.
	AdvanceStatements int64
	Advanced          int64
	FeederWrites      int64
	SettleStatements  int64 // settle statements that succeeded (retirements, Settle)
	Settled           int64 // tables they settled
	// KnownJoins are the feeder joins found known and written nothing
	// for, read without the tables' advisory locks (ADR 0023 addendum).
	KnownJoins int64
}

type storeStats struct {
	soleStatements, sole, advanceStatements, advanced, feederWrites, settleStatements, settled, knownJoins atomic.Int64
	direct                                                                                                 atomic.Int64 // sole statements through soleDirect (tests)
}

// Stats returns the counts of the Store's statements so far.
func (s *Store) Stats() StoreStats {
	return StoreStats{
		SoleStatements:    s.stats.soleStatements.Load(),
		Sole:              s.stats.sole.Load(),
		AdvanceStatements: s.stats.advanceStatements.Load(),
		Advanced:          s.stats.advanced.Load(),
		FeederWrites:      s.stats.feederWrites.Load(),
		SettleStatements:  s.stats.settleStatements.Load(),
		Settled:           s.stats.settled.Load(),
		KnownJoins:        s.stats.knownJoins.Load(),
	}
}

// Table returns the control table's name as "schema.name".
func (s *Store) Table() string { return s.n.display }

// Ping checks that PostgreSQL answers; ErrUnavailable when it does not.
func (s *Store) Ping(ctx context.Context) error {
	if s.closed.Load() {
		return fmt.Errorf("ping: %w", ErrClosed)
	}
	return wrap(ctx, "ping", s.pool.Ping(ctx))
}

// Close stops Wait's LISTEN connection (pending Waits return ErrClosed)
// and closes the pool, blocking until connections in use are returned.
// It is safe to call twice.
func (s *Store) Close() {
	s.closeOnce.Do(func() {
		s.closed.Store(true)
		s.lis.close()
		s.pool.Close()
	})
}

// wrap gives err its context and translates driver errors into this
// package's errors, keeping the driver's error as the cause:
//
//   - connection failures, broken connections, server shutdown or
//     overload: ErrUnavailable
//   - a missing control table or schema: ErrNotMigrated
//
// Once ctx is done, the error is ctx's (the caller gave up; the server is
// not to blame). Other errors (authentication, permissions, a missing
// database) are returned as they are, wrapped.
func wrap(ctx context.Context, op string, err error) error {
	if err == nil {
		return nil
	}
	if ctxErr := ctx.Err(); ctxErr != nil {
		if errors.Is(err, ctxErr) {
			return fmt.Errorf("%s: %w", op, err)
		}
		return fmt.Errorf("%s: %w: %w", op, ctxErr, err)
	}
	if sentinel := classify(err); sentinel != nil {
		return fmt.Errorf("%s: %w: %w", op, sentinel, err)
	}
	return fmt.Errorf("%s: %w", op, err)
}

// classify returns the sentinel error err stands for, or nil.
func classify(err error) error {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		switch {
		case len(pgErr.Code) == 5 && pgErr.Code[:2] == "08", // connection exception
			pgErr.Code == "57P01", // admin_shutdown (pg_terminate_backend, fast shutdown)
			pgErr.Code == "57P02", // crash_shutdown
			pgErr.Code == "57P03", // cannot_connect_now (starting up, shutting down)
			pgErr.Code == "53300", // too_many_connections
			pgErr.Code == "25006": // read_only_sql_transaction (a standby after failover)
			return ErrUnavailable
		case pgErr.Code == "42P01", // undefined_table
			pgErr.Code == "3F000": // invalid_schema_name
			return ErrNotMigrated
		}
		return nil
	}
	var connectErr *pgconn.ConnectError
	var netErr net.Error
	switch {
	case errors.As(err, &connectErr),
		errors.As(err, &netErr),
		errors.Is(err, pgconn.ErrConnClosed),
		errors.Is(err, io.EOF),
		errors.Is(err, io.ErrUnexpectedEOF),
		errors.Is(err, syscall.ECONNREFUSED),
		errors.Is(err, syscall.ECONNRESET),
		errors.Is(err, syscall.EPIPE),
		pgconn.SafeToRetry(err):
		return ErrUnavailable
	}
	return nil
}

// Refused reports whether err is a refusal of the request itself, which
// no retry changes: a request this package would not send (ErrInvalid*),
// a schema this binary must not touch (ErrSchemaTooNew), or what
// PostgreSQL refuses for its content (a data exception such as a NUL
// byte in a name, class 22; an integrity violation, 23; a syntax or
// access rule violation, 42). Any other failure (ErrBusy, ErrUnavailable,
// ErrNotMigrated, a context's end, a serialization failure, a statement
// cancelled) may pass when tried again.
func Refused(err error) bool {
	switch {
	case err == nil:
		return false
	case errors.Is(err, ErrInvalidAdvance), errors.Is(err, ErrInvalidTable), errors.Is(err, ErrInvalidTrack),
		errors.Is(err, ErrInvalidName), errors.Is(err, ErrInvalidRewind), errors.Is(err, ErrSchemaTooNew):
		return true
	}
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && len(pgErr.Code) == 5 {
		switch pgErr.Code[:2] {
		case "22", "23", "42":
			return true
		}
	}
	return false
}

// sharedHint remembers the tables the last advance found shared (several
// feeders), so that their next advance goes to the feeders table directly
// instead of trying the sole statement first. It is only a hint: a table
// that became solo again is advanced through the feeders table once more
// (which says it is solo), and one that became shared is passed on by the
// sole statement.
type sharedHint struct {
	mu     sync.Mutex
	tables map[string]struct{}
}

// maxSharedHints bounds the hint's memory; past it, shared tables try the
// sole statement first.
const maxSharedHints = 100_000

func (h *sharedHint) has(table string) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	_, ok := h.tables[table]
	return ok
}

// note records what a statement returned of each table: solo or shared.
func (h *sharedHint) note(m *moves) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for i := range m.rows {
		t, so := m.rows[i].v.Table, m.rows[i].solo
		switch {
		case so:
			delete(h.tables, t)
		case len(h.tables) < maxSharedHints:
			if h.tables == nil {
				h.tables = make(map[string]struct{})
			}
			h.tables[t] = struct{}{}
		}
	}
}
