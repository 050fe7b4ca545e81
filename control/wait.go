package control

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"go.uber.org/zap"
)

// Timing of the LISTEN connection shared by Wait calls.
const (
	// DefaultListenPing is how long the LISTEN connection may stay silent
	// before it is pinged, so that a connection that died without a word
	// (a failover, a dropped network path) is noticed and replaced; the
	// ping itself may take as long before the connection is given up.
	DefaultListenPing = 30 * time.Second
	// DefaultReconnectMin and DefaultReconnectMax bound the exponential
	// delay between attempts to reconnect it.
	DefaultReconnectMin = 50 * time.Millisecond
	DefaultReconnectMax = 5 * time.Second
)

// Wait blocks until table's verdict reaches until (finalized_until >=
// until as instants) and returns it; a verdict already there returns at
// once. It waits on NotifyChannel, not by polling: all Waits of a Store share
// one LISTEN connection, opened by the first, which re-checks every waiter
// after each (re)connect, so a notification lost while it was down cannot
// leave a waiter hanging. It returns ctx's error wrapped when ctx is done,
// ErrClosed when the Store is closed, ErrInvalidTable for a name
// CheckTableName refuses, and ErrUnavailable when a check of
// the table fails because PostgreSQL is unreachable (a broken LISTEN
// connection alone is not an error: it is replaced, and Wait keeps waiting).
func (s *Store) Wait(ctx context.Context, table string, until time.Time) (Verdict, error) {
	if err := CheckTableName(table); err != nil {
		return Verdict{}, fmt.Errorf("wait: %w", err)
	}
	op := "wait for " + table
	w, err := s.lis.register(table, until)
	if err != nil {
		return Verdict{}, fmt.Errorf("%s: %w", op, err)
	}
	defer s.lis.unregister(w)
	for {
		v, err := s.Get(ctx, table)
		switch {
		case err == nil && v.Reaches(until):
			return v, nil
		case err != nil && !errors.Is(err, ErrNotFound):
			return Verdict{}, fmt.Errorf("%s: %w", op, err)
		}
		select {
		case <-ctx.Done():
			return Verdict{}, fmt.Errorf("%s: %w", op, ctx.Err())
		case <-s.lis.closing:
			return Verdict{}, fmt.Errorf("%s: %w", op, ErrClosed)
		case <-w.wake:
		}
	}
}

// waiter is one Wait call, woken (never blocking the listener) when its
// table may have reached until.
type waiter struct {
	table string
	until time.Time
	wake  chan struct{} // capacity 1: wakes coalesce
}

func (w *waiter) signal() {
	select {
	case w.wake <- struct{}{}:
	default:
	}
}

// listener owns the LISTEN connection shared by the Waits of one Store: a
// goroutine started by the first Wait and stopped by close.
type listener struct {
	control string // the store's control table, "schema.name"
	connect func(context.Context) (*pgx.Conn, error)
	log     *zap.Logger
	ping    time.Duration // silence before a ping
	// pingWait bounds a ping's answer: apart from ping, so that a short
	// interval (the tests') does not give up a live connection whose
	// server is slow to answer on a loaded machine.
	pingWait time.Duration
	minWait  time.Duration
	maxWait  time.Duration

	closing chan struct{} // closed by close
	done    chan struct{} // closed when the goroutine has returned

	mu       sync.Mutex
	waiters  map[string]map[*waiter]struct{}
	watchers map[*watcher]struct{}
	running  bool // the goroutine was started
	closed   bool
	pid      uint32 // backend pid of the current LISTEN connection, 0 when none
	cancel   context.CancelFunc

	// Owned by run's goroutine: since when the connection has been down
	// (zero while up), how many tries failed since, and when the last
	// warning went out (listenWarnEvery).
	downSince time.Time
	tries     int
	warned    time.Time
}

// listenWarnEvery bounds the "LISTEN connection lost" warnings: through
// an outage the reconnect is tried every few seconds, and a line per try
// (12 a minute) said nothing the first had not; the next line says how
// many tries failed and for how long, and the connection's return is
// said once, at INFO.
const listenWarnEvery = time.Minute

func newListener(controlTable string, connect func(context.Context) (*pgx.Conn, error), log *zap.Logger) *listener {
	return &listener{
		control:  controlTable,
		connect:  connect,
		log:      log,
		ping:     DefaultListenPing,
		pingWait: DefaultListenPing,
		minWait:  DefaultReconnectMin,
		maxWait:  DefaultReconnectMax,
		closing:  make(chan struct{}),
		done:     make(chan struct{}),
		waiters:  map[string]map[*waiter]struct{}{},
		watchers: map[*watcher]struct{}{},
	}
}

// register adds a waiter, starting the goroutine on first use.
func (l *listener) register(table string, until time.Time) (*waiter, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return nil, ErrClosed
	}
	l.startLocked()
	w := &waiter{table: table, until: until, wake: make(chan struct{}, 1)}
	if l.waiters[table] == nil {
		l.waiters[table] = map[*waiter]struct{}{}
	}
	l.waiters[table][w] = struct{}{}
	return w, nil
}

// startLocked starts the goroutine unless it runs already. l.mu is held.
func (l *listener) startLocked() {
	if l.running {
		return
	}
	l.running = true
	ctx, cancel := context.WithCancel(context.Background())
	l.cancel = cancel
	go l.run(ctx)
}

func (l *listener) unregister(w *waiter) {
	l.mu.Lock()
	defer l.mu.Unlock()
	delete(l.waiters[w.table], w)
	if len(l.waiters[w.table]) == 0 {
		delete(l.waiters, w.table)
	}
}

// close stops the goroutine and waits for it; pending Waits see closing.
func (l *listener) close() {
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return
	}
	l.closed = true
	close(l.closing)
	running := l.running
	if running {
		l.cancel()
	}
	l.mu.Unlock()
	if running {
		<-l.done
	}
}

// backendPID returns the server process of the LISTEN connection, 0 while
// there is none.
func (l *listener) backendPID() uint32 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.pid
}

// run keeps a LISTEN connection up until ctx is done, reconnecting with an
// exponential delay.
func (l *listener) run(ctx context.Context) {
	defer close(l.done)
	delay := l.minWait
	for {
		listened, err := l.session(ctx)
		l.setPID(0)
		if ctx.Err() != nil {
			return
		}
		if listened {
			delay = l.minWait
		}
		now := time.Now()
		if l.downSince.IsZero() {
			l.downSince, l.tries = now, 0
		}
		l.tries++
		if l.tries == 1 || now.Sub(l.warned) >= listenWarnEvery {
			l.log.Warn("LISTEN connection lost; reconnecting", zap.Error(err), zap.Duration("in", delay),
				zap.Int("failed_tries", l.tries), zap.Duration("down_for", now.Sub(l.downSince).Round(time.Millisecond)))
			l.warned = now
		}
		t := time.NewTimer(delay)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
		delay = min(delay*2, l.maxWait)
	}
}

// session connects, listens, re-checks every waiter, then dispatches
// notifications until the connection fails or ctx is done. listened says
// whether it got as far as LISTEN.
func (l *listener) session(ctx context.Context) (listened bool, err error) {
	conn, err := l.connect(ctx)
	if err != nil {
		return false, err
	}
	defer func() {
		closeCtx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		_ = conn.Close(closeCtx)
	}()
	if _, err := conn.Exec(ctx, "LISTEN "+pgx.Identifier{NotifyChannel}.Sanitize()); err != nil {
		return false, err
	}
	// Anything announced before LISTEN took effect was missed: every waiter
	// looks at the table again. The pid is set under the same lock, so
	// that a Watch sees the connection up or is told of it, once.
	l.wakeAll(true, conn.PgConn().PID())
	if !l.downSince.IsZero() {
		l.log.Info("LISTEN connection back", zap.Duration("down_for", time.Since(l.downSince).Round(time.Millisecond)), zap.Int("failed_tries", l.tries))
		l.downSince, l.tries = time.Time{}, 0
	}
	// The wait for notifications is bounded by the connection's read
	// deadline (the ping interval after the last message heard) and ended
	// by ctx through that deadline: a context per notification (a timer,
	// and pgconn's watch of it for every message) was about a third of
	// this connection's CPU when every table of a burst moved (issue 12,
	// sixth pass). A read that times out leaves the connection usable
	// (pgconn closes it on any other read error).
	nc := conn.PgConn().Conn()
	stop := context.AfterFunc(ctx, func() { _ = nc.SetReadDeadline(time.Now()) })
	defer stop()
	heard := time.Now()
	for {
		if err := nc.SetReadDeadline(heard.Add(l.ping)); err != nil {
			return true, err
		}
		if ctx.Err() != nil { // checked after the deadline is set: a cancel before it is not undone
			return true, ctx.Err()
		}
		var err error
		for {
			var n *pgconn.Notification
			if n, err = conn.WaitForNotification(context.Background()); err != nil {
				break
			}
			l.dispatch(n.Payload)
			heard = time.Now()
		}
		switch {
		case ctx.Err() != nil:
			return true, ctx.Err()
		case !pgconn.Timeout(err):
			return true, err
		case time.Since(heard) >= l.ping:
			// Silent for a while: make sure the connection is alive,
			// without the deadline that has passed.
			if err := nc.SetReadDeadline(time.Time{}); err != nil {
				return true, err
			}
			pingCtx, cancel := context.WithTimeout(ctx, l.pingWait)
			err := conn.Ping(pingCtx)
			cancel()
			if err != nil {
				return true, fmt.Errorf("ping: %w", err)
			}
			heard = time.Now()
		}
	}
}

func (l *listener) setPID(pid uint32) {
	l.mu.Lock()
	l.pid = pid
	l.mu.Unlock()
}

// wakeAll wakes every waiter and tells every watcher to re-read;
// reconnected says that it is because the connection was (re)established,
// with backend pid pid (recorded, under the same hold of l.mu).
func (l *listener) wakeAll(reconnected bool, pid uint32) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if reconnected {
		l.pid = pid
	}
	for _, ws := range l.waiters {
		for w := range ws {
			w.signal()
		}
	}
	for w := range l.watchers {
		w.fn(Notification{Reconnected: reconnected})
	}
}

// dispatch wakes the waiters of the notified table that the new verdict
// reaches; a payload it cannot read wakes all of that table's (or, without
// a table, everyone), who then look for themselves.
func (l *listener) dispatch(payload string) {
	n, err := readNotification(payload)
	if err != nil || n.Table == "" {
		l.wakeAll(false, 0)
		return
	}
	if n.ControlTable != "" && n.ControlTable != l.control {
		// Another control table's move or rewind (the channel is the
		// database's): not this store's table of that name.
		return
	}
	until, err := time.Parse(time.RFC3339Nano, n.FinalizedUntil)
	note := Notification{Table: n.Table, FinalizedUntil: until.UTC(), Rewound: n.Rewound}
	if n.RewoundAt != "" {
		if at, perr := time.Parse(time.RFC3339Nano, n.RewoundAt); perr == nil {
			note.RewoundAt = at.UTC()
		}
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	for w := range l.watchers {
		if err != nil {
			w.fn(Notification{})
		} else {
			w.fn(note)
		}
	}
	for w := range l.waiters[n.Table] {
		if err != nil || !w.until.After(until) {
			w.signal()
		}
	}
}

// Notification is one verdict move announced on NotifyChannel. One
// without a Table means "re-read every verdict": the LISTEN connection was
// (re)established (Reconnected), so moves announced while it was down are
// lost, or an announcement could not be read (anyone who may NOTIFY on the
// channel can send one).
type Notification struct {
	Table          string
	FinalizedUntil time.Time // UTC
	// Rewound is true when the move went back: an operator's rewind (see
	// Store.Rewind), the one backward move there is.
	Rewound bool
	// RewoundAt is, on a rewind's notification, the rewound_at the rewind
	// stored: what an advance decided after hearing it carries as known
	// (Advance.Guard, KnownRewind). Zero on a move, and on a rewind
	// announced by an earlier release.
	RewoundAt time.Time
	// Reconnected is true, on a Notification without a Table, when the
	// LISTEN connection was (re)established; false when an announcement
	// could not be read.
	Reconnected bool
}

// watcher is one Watch call.
type watcher struct{ fn func(Notification) }

// Watch calls fn with every verdict move announced on NotifyChannel, by
// this process or any other writer of the database (the channel is the
// database's, so moves of another control table in the same database are
// announced too), with Notification{Reconnected: true} each time the
// LISTEN connection is (re)established (and from Watch itself, before it
// returns, when the connection is up already), and with the zero Notification for
// an announcement it could not read. fn runs on the goroutine of the LISTEN
// connection that Wait shares, in the order of the announcements (the
// call from Watch itself on the caller's goroutine, under the same lock);
// it must not block, call the Store or call stop. Call stop to end the calls: once stop
// returns, fn is not called again. Watch fails with ErrClosed on a closed
// Store.
func (s *Store) Watch(fn func(Notification)) (stop func(), err error) {
	l := s.lis
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return nil, fmt.Errorf("watch: %w", ErrClosed)
	}
	w := &watcher{fn: fn}
	l.watchers[w] = struct{}{}
	l.startLocked()
	if l.pid != 0 {
		// Up already (a Wait opened it): for this watcher it is
		// established now, and what was announced before was not heard.
		fn(Notification{Reconnected: true})
	}
	return func() {
		l.mu.Lock()
		delete(l.watchers, w)
		l.mu.Unlock()
	}, nil
}
