// Package ownership lets one replica of the service write a table's
// verdict while the others hold their advances, so that a second and a
// third replica do not multiply the control database's statements
// (ADR 0020).
//
// The tables are hashed into buckets. A replica owns the buckets whose
// session-level PostgreSQL advisory lock it holds, on one connection of
// its own: PostgreSQL releases them when the replica dies or that
// connection drops, and another replica takes them at its next poll. The
// owner of a table's bucket writes its advances; a replica that does not
// own it keeps the newest advance of each (table, feeder) and writes it
// when it acquires the bucket (a takeover), when its lock connection comes
// back (a PostgreSQL failover may have lost the newest writes), or when no
// announcement on the control table's channel showed the table reach it
// within the grace (an owner that does not track the run). A replica
// whose lock connection is down (before its first poll, after a failed
// one) does not know who owns what, and writes every advance, as an
// active-active replica does.
//
// Ownership is an optimisation only. Every write is forward-only and
// idempotent (control.Store.Advance), so two replicas that both believe
// they own a bucket (a lock lost to a failover, a replica frozen while
// its session lives) only pay the statements active-active replicas pay.
package ownership

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"math/rand/v2"
	"slices"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/finalizer-dev/finalizer/control"
)

// Defaults of Options.
const (
	// DefaultBuckets is how many buckets the tables are hashed into: enough
	// to spread them over a few replicas evenly.
	DefaultBuckets = 64
	// DefaultPoll is how often a replica looks at the locks: the bound of
	// a takeover after the owner's session ended.
	DefaultPoll = time.Second
	// DefaultGrace is how long a replica that does not own a table's
	// bucket waits for an announcement that the table reached its held
	// advance before it writes the advance itself.
	DefaultGrace = 10 * time.Second
	// DefaultForget is how long a held advance that the table is known to
	// have reached is kept, to be written again after a failover.
	DefaultForget = 24 * time.Hour
	// forgetChunk is how many tables forget looks at under the lock at
	// once: the advances of the trackers wait for the lock meanwhile.
	forgetChunk = 1024
	// memberKey is the second key of the shared advisory lock every
	// replica holds, so that the replicas can count each other.
	memberKey = -1
	// memberObjID is memberKey as pg_locks shows it (an oid).
	memberObjID = 1<<32 - 1
)

// Options configures an Owner.
type Options struct {
	// URL is the control database (the store's URL: a multi-host URL with
	// target_session_attrs=read-write follows a failover).
	URL string
	// Table is the control table's name: the advisory locks' first key is
	// a hash of it, so two control tables in one database do not share
	// owners.
	Table string
	// Store applies the held advances this replica writes.
	Store BatchStore

	Buckets int // 0 = DefaultBuckets; every replica must use the same
	// Balance spreads the buckets over the live replicas (each takes
	// about buckets/replicas); without it a replica takes every free
	// bucket, so one replica normally owns them all. Spreading costs
	// statements: each replica's group commit (ADR 0008) sends its own
	// statement for the tables of a period crossing that it owns, so a
	// crossing of many tables costs one statement per owner instead of
	// one (BENCHMARKS.md).
	Balance bool
	Poll    time.Duration // 0 = DefaultPoll
	Grace   time.Duration // 0 = DefaultGrace
	Forget  time.Duration // 0 = DefaultForget

	Logger     *zap.Logger           // nil = no logs
	Registerer prometheus.Registerer // nil = unregistered metrics
}

// BatchStore is what the Owner needs of the control store.
// *control.Store implements it.
type BatchStore interface {
	AdvanceBatch(ctx context.Context, as []control.Advance) ([]control.AdvanceResult, error)
	List(ctx context.Context) ([]control.Verdict, error)
}

// held is the newest advance asked of one feeder of one table. The held
// advances of a table form a chain from Owner.held, one per feeder (most
// tables have one): one map entry per table and nothing more, where a map
// of feeders per table cost about 250 bytes more per tracked run (issue
// 12).
type held struct {
	a control.Advance
	// at is when it was asked (this process's clock, Unix nanoseconds).
	at int64
	// since is when it was last found not known reached (asked, or a
	// reconnect): the grace runs from it (Unix nanoseconds).
	since int64
	// next is the held advance of the table's next feeder, nil at the end.
	next *held
	// reached: an announcement (or this replica's own statement) showed
	// the table at or past a.FinalizedUntil since the last reconnect.
	reached bool
	// doubt: a reconnect happened since it was asked; an announcement
	// may have been missed, so the fallback reads the table's row before
	// it writes it (one the table stands at is not written). A rewind
	// missed meanwhile is not judged here: the statement refuses an
	// advance its tracker decided before it (Advance.Guard).
	doubt bool
	// sending counts this replica's statements of a in flight (the gate
	// let them through: owned, or ownership not known yet). A flush
	// leaves such an advance, not in doubt, to its statement: at the
	// first take after a start, those are every tracker's first advance,
	// which the flush would otherwise write a second time, at once, as
	// one statement beside the trackers' own (ADR 0023 addendum). Should
	// the statement fail, its tracker retries it, as on an owned bucket.
	sending int32
}

// find returns the held advance of feeder in the chain h, nil when none.
func (h *held) find(feeder string) *held {
	for ; h != nil; h = h.next {
		if h.a.QueryID == feeder {
			return h
		}
	}
	return nil
}

// heldOf returns the held advance of table's feeder, nil when none. w.mu
// held.
func (w *Owner) heldOf(table, feeder string) *held { return w.held[table].find(feeder) }

// Owner holds this replica's buckets and the advances of the others.
type Owner struct {
	o      Options
	log    *zap.Logger
	class  int64 // the advisory locks' first key
	offset int   // where this replica starts looking for free buckets
	m      metrics

	mu    sync.Mutex
	owned []bool // by bucket
	// known: the lock connection is up, so owned says who writes; while
	// it is not (before the first poll, after a failed one) this replica
	// writes every advance, as an active-active replica does.
	known bool
	dirty []bool           // owned buckets whose held advances are to be written
	held  map[string]*held // table -> the newest advance of each of its feeders (query ids), a chain
	// unreached indexes the held advances not known reached (to their
	// table): the only ones flush and fallback may write. A poll looks at
	// them, not at every table's: the advances of the trackers wait for
	// mu, and a walk of 100,000 tables under it each second was the
	// latency's p99 at that size (BENCHMARKS.md, "The latency tail").
	unreached map[*held]string
	nheld     int // the advances in held
	// epoch counts the doubts (reconnects, failed polls). A write marks
	// what it wrote reached, and a flush its buckets clean, only when no
	// doubt came between the collection of what it writes and its end: a
	// reconnect during a statement may have lost that statement's rows
	// with a failed primary, and its doubt must not be undone by it.
	epoch    uint64
	forgotAt time.Time // the last forget (the loop's)
	// refusedTo is told each held advance this replica wrote that its
	// statement refused as decided before its table's rewind (OnRefused).
	refusedTo func(a control.Advance, v control.Verdict)
	started   bool

	kick   chan struct{}
	stop   chan struct{}
	done   chan struct{}
	once   sync.Once
	conn   *pgx.Conn // the loop's
	failed bool      // the last poll failed (for logging the recovery)
}

// New returns an Owner that owns nothing yet; Start starts it.
func New(o Options) *Owner {
	if o.Buckets <= 0 {
		o.Buckets = DefaultBuckets
	}
	if o.Poll <= 0 {
		o.Poll = DefaultPoll
	}
	if o.Grace <= 0 {
		o.Grace = DefaultGrace
	}
	if o.Forget <= 0 {
		o.Forget = DefaultForget
	}
	if o.Logger == nil {
		o.Logger = zap.NewNop()
	}
	h := fnv.New32a()
	_, _ = h.Write([]byte("finalizer ownership " + o.Table))
	return &Owner{
		o:      o,
		log:    o.Logger,
		class:  int64(h.Sum32() & 0x7fffffff),
		offset: offset(o),
		m:      newMetrics(o.Registerer),
		owned:  make([]bool, o.Buckets),
		dirty:  make([]bool, o.Buckets),
		held:   make(map[string]*held),

		unreached: make(map[*held]string),
		kick:      make(chan struct{}, 1),
		stop:      make(chan struct{}),
		done:      make(chan struct{}),
	}
}

// offset is where a replica starts looking for free buckets: spread when
// balancing, 0 otherwise, so that two replicas taking over at once take
// the buckets in the same order and one of them most often gets them all.
func offset(o Options) int {
	if !o.Balance {
		return 0
	}
	return rand.IntN(o.Buckets)
}

// Start takes this replica's share of the buckets once, writes what it
// holds for them, and starts the loop that keeps polling. A first poll
// that fails is logged and retried by the loop: ownership is an
// optimisation, never a reason not to start.
func (w *Owner) Start(ctx context.Context) {
	w.started = true
	w.tick(ctx)
	go w.loop()
}

// Close releases the buckets (closing the lock connection) and stops the
// loop. It blocks until the loop has exited; safe to call twice.
func (w *Owner) Close() {
	if !w.started {
		return
	}
	w.once.Do(func() { close(w.stop) })
	<-w.done
}

// Bucket returns the bucket of table.
func (w *Owner) Bucket(table string) int {
	h := fnv.New32a()
	_, _ = h.Write([]byte(table))
	return int(h.Sum32() % uint32(w.o.Buckets))
}

// Owns reports whether this replica holds the lock of table's bucket.
// (While its lock connection is down it owns nothing, and writes every
// advance.)
func (w *Owner) Owns(table string) bool {
	b := w.Bucket(table)
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.owned[b]
}

// Owned returns how many buckets this replica holds.
func (w *Owner) Owned() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	n := 0
	for _, o := range w.owned {
		if o {
			n++
		}
	}
	return n
}

// Observed records an announcement that table's verdict moved to until:
// held advances it reaches need no write of this replica.
func (w *Owner) Observed(table string, until time.Time) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for h := w.held[table]; h != nil; h = h.next {
		if !until.Before(h.a.FinalizedUntil) {
			w.reachedLocked(h)
		}
	}
}

// reachedLocked marks h known reached. w.mu held.
func (w *Owner) reachedLocked(h *held) {
	h.reached = true
	delete(w.unreached, h)
}

// dropLocked removes the held advances of table ("" = of every table),
// or only its feeder's when query is not empty. w.mu held.
func (w *Owner) dropLocked(table, query string) {
	switch {
	case table == "":
		clear(w.held)
		clear(w.unreached)
		w.nheld = 0
	case query == "":
		for h := w.held[table]; h != nil; h = h.next {
			delete(w.unreached, h)
			w.nheld--
		}
		delete(w.held, table)
	default:
		w.dropOneLocked(table, query)
	}
}

// dropOneLocked removes the held advance of table's feeder query (which
// may be "", the feeder of advances without a query id). w.mu held.
func (w *Owner) dropOneLocked(table, query string) {
	first := w.held[table]
	for prev, h := (*held)(nil), first; h != nil; prev, h = h, h.next {
		if h.a.QueryID != query {
			continue
		}
		delete(w.unreached, h)
		w.nheld--
		switch {
		case prev != nil:
			prev.next = h.next
		case h.next != nil:
			w.held[table] = h.next
		default:
			delete(w.held, table)
		}
		return
	}
}

// OnRefused sets f to be told each held advance this replica wrote (a
// takeover, a reconnect, the fallback) that its statement refused as
// decided before its table's last rewind (control.ErrBeforeRewind), with
// the table's row as the statement read it: the advance is dropped, and
// its tracker, told it was held and not written, would otherwise show
// nothing of it (ADR 0020, addendum of 2026-12-06). f runs on the
// Owner's loop, without its lock; it must not block. Call it before
// Start.
func (w *Owner) OnRefused(f func(a control.Advance, v control.Verdict)) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.refusedTo = f
}

// Rewound drops the held advances of table ("" = of every table) that
// its rewind stored as at (the notification's rewound_at; zero when not
// known) refuses: an operator moved its verdict back, and writing an
// advance decided before would undo the rewind. A held advance whose
// tracker knew that rewind already (Advance.Guard: it learnt it from a
// refused statement or a re-read of the rows before the notification
// came) was decided after it, and stays held: dropping it lost it for
// good when its run had ended (ADR 0020, addendum of 2026-12-06).
func (w *Owner) Rewound(table string, at time.Time) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if at.IsZero() {
		w.dropLocked(table, "")
		return
	}
	drop := func(first *held) []string {
		var qs []string
		for h := first; h != nil; h = h.next {
			if !h.a.Guard.Guarded() || h.a.Guard.Refuses(at) {
				qs = append(qs, h.a.QueryID)
			}
		}
		return qs
	}
	if table != "" {
		for _, q := range drop(w.held[table]) {
			w.dropOneLocked(table, q)
		}
		return
	}
	for tb, first := range w.held {
		for _, q := range drop(first) {
			w.dropOneLocked(tb, q)
		}
	}
}

// Reconnected says that the control database's LISTEN connection was
// re-established: announcements may have been lost, and a failover may
// have lost the newest writes. Every held advance is written again by the
// owner of its bucket; a rewind announced while the connection was down is
// not undone: each advance carries the rewind its tracker knew
// (Advance.Guard), and the statement refuses one decided before the
// table's rewind (control.ErrBeforeRewind, told to OnRefused).
func (w *Owner) Reconnected() {
	w.mu.Lock()
	w.doubtLocked()
	w.mu.Unlock()
	w.poke()
}

// doubtLocked marks every held advance as not known reached and in doubt,
// and every owned bucket as to be written. w.mu held.
func (w *Owner) doubtLocked() {
	w.epoch++
	now := time.Now().UnixNano()
	for table, first := range w.held {
		for h := first; h != nil; h = h.next {
			h.reached, h.doubt, h.since = false, true, now
			w.unreached[h] = table
		}
	}
	for b, o := range w.owned {
		if o {
			w.dirty[b] = true
		}
	}
}

func (w *Owner) poke() {
	select {
	case w.kick <- struct{}{}:
	default:
	}
}

func (w *Owner) loop() {
	defer close(w.done)
	t := time.NewTicker(w.o.Poll)
	defer t.Stop()
	for {
		select {
		case <-w.stop:
			w.release()
			return
		case <-t.C:
		case <-w.kick:
		}
		ctx, cancel := context.WithTimeout(context.Background(), max(5*time.Second, 2*w.o.Poll))
		w.tick(ctx)
		cancel()
	}
}

// release closes the lock connection: PostgreSQL releases every lock of
// its session.
func (w *Owner) release() {
	w.mu.Lock()
	w.known = false
	clear(w.owned)
	clear(w.dirty)
	w.mu.Unlock()
	w.m.owned.Set(0)
	if w.conn != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		_ = w.conn.Close(ctx)
		cancel()
		w.conn = nil
	}
}

// tick is one poll: the locks, then the writes this replica owes.
func (w *Owner) tick(ctx context.Context) {
	if err := w.balance(ctx); err != nil {
		w.lost(err)
	} else if w.failed {
		w.failed = false
		w.log.Info("ownership: the lock connection is back", zap.Int("buckets_owned", w.Owned()))
	}
	w.flush(ctx)
	w.fallback(ctx)
	w.forget()
}

// lost drops the connection after a failed poll: a session that may be
// gone holds no locks any more, and what this replica wrote may be lost
// with a failed primary, so every held advance is in doubt.
func (w *Owner) lost(err error) {
	if w.conn != nil {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		_ = w.conn.Close(ctx)
		cancel()
		w.conn = nil
	}
	w.mu.Lock()
	had := slices.Contains(w.owned, true)
	w.known = false
	clear(w.owned)
	clear(w.dirty)
	w.doubtLocked()
	w.mu.Unlock()
	w.m.owned.Set(0)
	w.m.connected.Set(0)
	if !w.failed || had {
		w.log.Warn("ownership: the lock connection failed; this replica owns no table until it is back (the other replicas, or this one's held advances after the grace, write meanwhile)",
			zap.Error(err), zap.Bool("owned_buckets", had))
	}
	w.failed = true
}

// balance connects when needed, counts the replicas, and takes or gives
// back buckets so that each holds about buckets/replicas.
func (w *Owner) balance(ctx context.Context) error {
	if w.conn == nil {
		cfg, err := pgx.ParseConfig(w.o.URL)
		if err != nil {
			return fmt.Errorf("ownership: %w", err)
		}
		if cfg.RuntimeParams["application_name"] == "" {
			cfg.RuntimeParams["application_name"] = "finalizer-ownership"
		}
		if cfg.ConnectTimeout == 0 {
			cfg.ConnectTimeout = 5 * time.Second
		}
		conn, err := pgx.ConnectConfig(ctx, cfg)
		if err != nil {
			return fmt.Errorf("ownership: connect: %w", err)
		}
		if _, err := conn.Exec(ctx, `SELECT pg_advisory_lock_shared($1::int4, $2::int4)`, w.class, memberKey); err != nil {
			_ = conn.Close(ctx)
			return fmt.Errorf("ownership: join: %w", err)
		}
		w.conn = conn
		w.m.connected.Set(1)
	}
	var (
		members      int
		mine, others []int32
	)
	err := w.conn.QueryRow(ctx, `
SELECT count(*) FILTER (WHERE mode = 'ShareLock' AND objid::int8 = $2),
	coalesce(array_agg(objid::int8::int4) FILTER (WHERE mode = 'ExclusiveLock' AND pid = pg_backend_pid()), '{}'),
	coalesce(array_agg(objid::int8::int4) FILTER (WHERE mode = 'ExclusiveLock' AND pid <> pg_backend_pid()), '{}')
FROM pg_locks
WHERE locktype = 'advisory' AND granted AND objsubid = 2 AND classid::int8 = $1
	AND database = (SELECT oid FROM pg_database WHERE datname = current_database())`,
		w.class, int64(memberObjID)).Scan(&members, &mine, &others)
	if err != nil {
		return fmt.Errorf("ownership: read the locks: %w", err)
	}
	members = max(members, 1)
	target := w.o.Buckets
	if w.o.Balance {
		target = (w.o.Buckets + members - 1) / members
	}
	w.m.members.Set(float64(members))
	taken := map[int32]bool{}
	for _, b := range others {
		taken[b] = true
	}
	for _, b := range mine {
		taken[b] = true
	}
	var gained, given []int32
	switch {
	case len(mine) < target:
		var want []int32
		for i := range w.o.Buckets {
			b := int32((w.offset + i) % w.o.Buckets)
			if !taken[b] {
				want = append(want, b)
			}
		}
		if len(want) > 0 {
			rows, err := w.conn.Query(ctx, `SELECT b FROM unnest($2::int4[]) AS b WHERE pg_try_advisory_lock($1::int4, b)`, w.class, want[:min(len(want), target-len(mine))])
			if err != nil {
				return fmt.Errorf("ownership: take buckets: %w", err)
			}
			gained, err = pgx.CollectRows(rows, pgx.RowTo[int32])
			if err != nil {
				return fmt.Errorf("ownership: take buckets: %w", err)
			}
		}
	case len(mine) > target:
		// Another replica joined: give back the extra buckets; it takes
		// them at its next poll, writing what it holds for them.
		slices.Sort(mine)
		given = mine[target:]
		if _, err := w.conn.Exec(ctx, `SELECT pg_advisory_unlock($1::int4, b) FROM unnest($2::int4[]) AS b`, w.class, given); err != nil {
			return fmt.Errorf("ownership: give back buckets: %w", err)
		}
		mine = mine[:target]
	}
	w.mu.Lock()
	w.known = true
	clear(w.owned)
	for _, b := range mine {
		w.owned[b] = true
	}
	for _, b := range given {
		w.dirty[b] = false
	}
	for _, b := range gained {
		w.owned[b], w.dirty[b] = true, true
	}
	n := 0
	for _, o := range w.owned {
		if o {
			n++
		}
	}
	w.mu.Unlock()
	w.m.owned.Set(float64(n))
	if len(gained) > 0 {
		w.m.acquired.Add(float64(len(gained)))
		w.log.Info("ownership: buckets taken; writing what this replica holds for their tables",
			zap.Int("taken", len(gained)), zap.Int("owned", n), zap.Int("replicas", members), zap.Int("buckets", w.o.Buckets))
	}
	if len(given) > 0 {
		w.log.Info("ownership: buckets given back to balance the replicas",
			zap.Int("given", len(given)), zap.Int("owned", n), zap.Int("replicas", members))
	}
	return nil
}

// flush writes the held advances of the owned buckets marked dirty (just
// taken, or in doubt after a reconnect) that the table is not known to
// have reached.
func (w *Owner) flush(ctx context.Context) {
	w.mu.Lock()
	var buckets []int
	for b, d := range w.dirty {
		if d && w.owned[b] {
			buckets = append(buckets, b)
		}
	}
	if len(buckets) == 0 {
		w.mu.Unlock()
		return
	}
	var as []control.Advance
	var doubt bool
	for h, table := range w.unreached {
		if b := w.Bucket(table); !w.owned[b] || !w.dirty[b] {
			continue
		}
		if h.sending > 0 && !h.doubt {
			continue // its own statement is in flight (held.sending)
		}
		as = append(as, h.a)
		doubt = doubt || h.doubt
	}
	epoch := w.epoch
	w.mu.Unlock()
	if err := w.write(ctx, as, doubt, "flush", epoch); errors.Is(err, errDoubted) {
		return // the buckets stay dirty: written at the next poll
	} else if err != nil {
		w.log.Warn("ownership: could not write the held advances of the buckets taken; tried again at the next poll",
			zap.Int("advances", len(as)), zap.Error(err))
		return
	}
	w.mu.Lock()
	if w.epoch == epoch {
		// A doubt since (a reconnect during the write) marked the
		// buckets dirty again: written at the next poll.
		for _, b := range buckets {
			w.dirty[b] = false
		}
	}
	w.mu.Unlock()
}

// fallback writes the held advances of buckets this replica does not own
// that no announcement showed reached within the grace: the owner may not
// track the run (it missed a track request, its cap refused the run), or
// may be frozen with its session alive. Safe (forward-only); it costs what
// an active-active replica pays.
func (w *Owner) fallback(ctx context.Context) {
	now := time.Now()
	w.mu.Lock()
	if !w.known {
		// The lock connection is down: the trackers' own advances go
		// through meanwhile, and what is held is written at the next
		// takeover (every bucket taken back is flushed).
		w.mu.Unlock()
		return
	}
	var as []control.Advance
	doubt := false
	for h, table := range w.unreached {
		if w.owned[w.Bucket(table)] || now.Sub(time.Unix(0, h.since)) < w.o.Grace {
			continue
		}
		as = append(as, h.a)
		doubt = doubt || h.doubt
	}
	epoch := w.epoch
	w.mu.Unlock()
	if len(as) == 0 {
		return
	}
	if err := w.write(ctx, as, doubt, "fallback", epoch); err != nil && !errors.Is(err, errDoubted) {
		w.log.Warn("ownership: could not write held advances whose owner did not; tried again at the next poll",
			zap.Int("advances", len(as)), zap.Error(err))
	}
}

// errDoubted: a doubt (a reconnect) came while a write read the rows; it
// is made again at the next poll.
var errDoubted = errors.New("ownership: the control database's connection was re-established during the write")

// write applies as and marks them reached, unless a doubt came after
// epoch (when as was collected): then what it wrote stays to be written
// again. In doubt (a reconnect since some were held), the fallback first
// reads the rows, and does not write what a table stands at already.
//
// A rewind is not judged here by the clocks: each advance carries the
// rewind its tracker knew (Advance.Guard), and the statement refuses one
// decided before its table's last rewind (control.ErrBeforeRewind), by
// the row itself, under its lock. Such a held advance is dropped (writing
// it again would be refused again) and told to OnRefused, for its
// tracker to show it. Before (ADR 0020, addendum of 2026-12-06), an
// advance in doubt held later than a minute before its table's rewind
// was dropped here, one decided after the rewind by a tracker that knew
// it included, and its table stayed at the rewound verdict with its run
// showing nothing.
func (w *Owner) write(ctx context.Context, as []control.Advance, doubt bool, why string, epoch uint64) error {
	if len(as) == 0 {
		return nil
	}
	if doubt {
		var rows map[string]control.Verdict
		if why == "fallback" {
			vs, err := w.o.Store.List(ctx)
			if err != nil {
				return err
			}
			rows = make(map[string]control.Verdict, len(vs))
			for _, v := range vs {
				rows[v.Table] = v
			}
		}
		w.mu.Lock()
		if rows != nil && w.epoch != epoch {
			// The rows were read across a reconnect: an advance
			// collected as not in doubt may be now, and what they show
			// reached may be lost with a failed primary.
			w.mu.Unlock()
			return errDoubted
		}
		kept := as[:0]
		seen := 0
		for _, a := range as {
			h := w.heldOf(a.Table, a.QueryID)
			if h == nil || h.a.FinalizedUntil != a.FinalizedUntil {
				continue // replaced or dropped meanwhile: the newer one is written by its own path
			}
			v, ok := rows[a.Table]
			switch {
			case ok && !v.FinalizedUntil.Before(a.FinalizedUntil):
				// Not owned (only the fallback reads the rows), and the
				// table stands at or past it as read after the
				// reconnect: what an announcement lost while the
				// connection was down would have shown (Observed). The
				// owner wrote it again (or a newer one); writing it too
				// would be a read per advance held, every unowned
				// table's, after every reconnect.
				h.doubt = false
				w.reachedLocked(h)
				seen++
			default:
				h.doubt = false
				kept = append(kept, a)
			}
		}
		w.mu.Unlock()
		if seen > 0 {
			w.log.Debug("ownership: held advances the tables stand at after a reconnect; not written",
				zap.String("why", why), zap.Int("advances", seen))
		}
		as = kept
		if len(as) == 0 {
			return nil
		}
	}
	// Only what is still held as it was collected: one a rewind dropped
	// since (Rewound) would undo the rewind; one replaced by a newer is
	// written by the newer's own path. A held advance whose table was
	// rewound after its tracker decided it (a rewind missed while the
	// connection was down, or one that commits while the statement waits
	// for the row) is refused by the statement itself (below).
	w.mu.Lock()
	kept := as[:0]
	for _, a := range as {
		if h := w.heldOf(a.Table, a.QueryID); h != nil && h.a.FinalizedUntil.Equal(a.FinalizedUntil) {
			kept = append(kept, a)
		}
	}
	w.mu.Unlock()
	if as = kept; len(as) == 0 {
		return nil
	}
	res, err := w.o.Store.AdvanceBatch(ctx, as)
	if err != nil {
		return err
	}
	moved := 0
	type refusal struct {
		a control.Advance
		v control.Verdict
	}
	var refusals []refusal
	w.mu.Lock()
	tell := w.refusedTo
	for i, r := range res {
		if errors.Is(r.Err, control.ErrBeforeRewind) {
			// Decided before a rewind of its table: writing it again
			// would be refused again. Its tracker is told (OnRefused):
			// it answered the tracker's advance as held, not refused.
			if h := w.heldOf(as[i].Table, as[i].QueryID); h != nil && h.a.FinalizedUntil.Equal(as[i].FinalizedUntil) {
				w.dropOneLocked(as[i].Table, as[i].QueryID)
				refusals = append(refusals, refusal{as[i], r.Verdict})
			}
			continue
		}
		if r.Err != nil {
			continue
		}
		if r.Moved {
			moved++
		}
		if w.epoch != epoch {
			continue // doubted during the statement: written again
		}
		if h := w.heldOf(as[i].Table, as[i].QueryID); h != nil && h.a.FinalizedUntil.Equal(as[i].FinalizedUntil) {
			w.reachedLocked(h) // written; a later reconnect writes it again
		}
	}
	w.mu.Unlock()
	w.m.written.WithLabelValues(why).Add(float64(len(as)))
	w.m.moved.WithLabelValues(why).Add(float64(moved))
	for _, x := range refusals {
		w.m.refused.Inc()
		w.log.Info("ownership: a held advance decided before its table's last rewind was refused by the control table (it would undo the rewind); dropped, and its run told",
			zap.String("why", why), zap.String("table", x.a.Table), zap.String("query_id", x.a.QueryID), zap.String("run_id", x.a.RunID),
			zap.Time("finalized_until", x.a.FinalizedUntil), zap.Time("rewound_at", x.v.RewoundAt), zap.Time("known_rewind", x.a.Guard.Known()))
		if tell != nil {
			tell(x.a, x.v)
		}
	}
	if why == "fallback" && moved > 0 {
		w.log.Warn("ownership: held advances the owner of their tables did not write within the grace were written by this replica (does the owner track these runs?)",
			zap.Int("advances", len(as)), zap.Int("moved", moved), zap.Duration("grace", w.o.Grace))
	} else {
		w.log.Debug("ownership: held advances written", zap.String("why", why), zap.Int("advances", len(as)), zap.Int("moved", moved))
	}
	for _, r := range res {
		if r.Err != nil && !errors.Is(r.Err, control.ErrInvalidAdvance) && !errors.Is(r.Err, control.ErrBeforeRewind) {
			return r.Err
		}
	}
	return nil
}

// refused drops a's held advance when its statement refused it
// (control.ErrBeforeRewind): it was decided before a rewind of its
// table, which writing it would undo, and writing it again (a reconnect,
// a takeover, the fallback) would be refused again.
func (w *Owner) refused(a control.Advance) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if h := w.heldOf(a.Table, a.QueryID); h != nil && h.a.FinalizedUntil.Equal(a.FinalizedUntil) {
		w.dropOneLocked(a.Table, a.QueryID)
	}
}

// forget drops held advances known reached long ago. It walks every
// table, so it runs at most every forgetEvery (a held advance is kept for
// up to Forget and that interval), and lets go of the lock every
// forgetChunk tables, for the advances of the trackers that wait for it.
func (w *Owner) forget() {
	now := time.Now()
	if now.Sub(w.forgotAt) < w.forgetEvery() {
		w.mu.Lock()
		n := w.nheld
		w.mu.Unlock()
		w.m.heldNow.Set(float64(n))
		return
	}
	w.forgotAt = now
	cut := now.Add(-w.o.Forget).UnixNano()
	w.mu.Lock()
	seen := 0
	for table, first := range w.held {
		// Keep the chain's order; drop what was reached long ago.
		var kept, last *held
		for h := first; h != nil; h = h.next {
			if h.reached && h.at < cut {
				w.nheld--
				continue
			}
			if last == nil {
				kept = h
			} else {
				last.next = h
			}
			last = h
		}
		switch {
		case kept == nil:
			delete(w.held, table)
		default:
			last.next = nil
			if kept != first {
				w.held[table] = kept
			}
		}
		if seen++; seen%forgetChunk == 0 {
			// The map may change meanwhile: a table added is looked at
			// now or at the next forget, one removed is not seen.
			w.mu.Unlock()
			w.mu.Lock()
		}
	}
	n := w.nheld
	w.mu.Unlock()
	w.m.heldNow.Set(float64(n))
}

// forgetEvery is how often forget walks the held advances: a tenth of
// Forget, at most an hour, at least a poll.
func (w *Owner) forgetEvery() time.Duration {
	return max(w.o.Poll, min(w.o.Forget/10, time.Hour))
}

// hold records a as the newest advance of its feeder when it is, and
// reports whether this replica writes it: it owns the table's bucket, or
// it does not know who does (its lock connection is down).
func (w *Owner) hold(a control.Advance, now time.Time) bool {
	write, _ := w.holdEpoch(a, now)
	return write
}

// holdEpoch is hold, and returns the doubt epoch to give reached once
// the write is done.
func (w *Owner) holdEpoch(a control.Advance, now time.Time) (bool, uint64) {
	return w.holdSend(a, now, false)
}

// holdSend is holdEpoch for the gate, which sends a when it is to be
// written (send): the held advance then counts the statement in flight
// until sent (held.sending).
func (w *Owner) holdSend(a control.Advance, now time.Time, send bool) (bool, uint64) {
	w.mu.Lock()
	defer w.mu.Unlock()
	// Kept for a day once reached (Forget): without the progress's
	// buffers, which it would keep alive (free when the tracker detached
	// it already: the held advance then shares the tracker's last one).
	first, t := w.held[a.Table], now.UnixNano()
	switch h := first.find(a.QueryID); {
	case h == nil:
		h = &held{a: a.Detached(), at: t, since: t, next: first}
		w.held[a.Table] = h
		w.unreached[h] = a.Table
		w.nheld++
	case a.FinalizedUntil.After(h.a.FinalizedUntil):
		h.a, h.at, h.since, h.reached, h.doubt, h.sending = a.Detached(), t, t, false, false, 0
		w.unreached[h] = a.Table
	}
	write := !w.known || w.owned[w.Bucket(a.Table)]
	if h := w.held[a.Table].find(a.QueryID); send && write && h != nil && h.a.FinalizedUntil.Equal(a.FinalizedUntil) {
		h.sending++
	}
	return write, w.epoch
}

// sent records that the statements of as that holdSend let through
// have answered, whatever their outcome (see held.sending).
func (w *Owner) sent(as ...control.Advance) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, a := range as {
		if h := w.heldOf(a.Table, a.QueryID); h != nil && h.sending > 0 && h.a.FinalizedUntil.Equal(a.FinalizedUntil) {
			h.sending--
		}
	}
}

// reached marks a's held advance reached when v shows the table at or
// past it, and no doubt (a reconnect) came since epoch, when a was held:
// a write made before a failover may be lost with it, so what a
// reconnect doubted during the statement stays to be written again.
func (w *Owner) reached(a control.Advance, v control.Verdict, epoch uint64) {
	if v.FinalizedUntil.Before(a.FinalizedUntil) {
		return
	}
	w.mu.Lock()
	if w.epoch != epoch {
		w.mu.Unlock()
		return
	}
	if h := w.heldOf(a.Table, a.QueryID); h != nil && !v.FinalizedUntil.Before(h.a.FinalizedUntil) {
		w.reachedLocked(h)
	}
	w.mu.Unlock()
}
