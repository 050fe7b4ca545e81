package finalizer

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/finalizer-dev/finalizer/control"
	"github.com/finalizer-dev/finalizer/internal/lograte"
	"github.com/finalizer-dev/finalizer/listener"
	"github.com/finalizer-dev/finalizer/progress"
)

// Defaults of the registry.
const (
	// DefaultStaleAfter is how long a run may send no event before its
	// trackers are shown as stale. Spark posts a progress or an idle event
	// about every 10 s while a query runs.
	DefaultStaleAfter = 15 * time.Minute
	// DefaultExpireAfter is how long a run may send no event before its
	// trackers are stopped (a driver that died without a termination).
	DefaultExpireAfter = 24 * time.Hour
	// DefaultRemember is how many finished or ignored runs the registry
	// remembers, so that their stray events are dropped without a parse.
	DefaultRemember = 100_000
	// DefaultRecoverParallelism is how many runs are subscribed at once
	// when the service recovers its runs at start.
	DefaultRecoverParallelism = 16
	// MaxQueryNameLen is the longest query name, in bytes, under which a
	// rule tracks a run; a run of a query with a longer name is refused
	// (RefusedQueryName).
	MaxQueryNameLen = 1024
	// refuseLogEvery is how often a refusal is logged, at most, per reason.
	refuseLogEvery = 10 * time.Second
	// janitorEvery is how often stale and expired runs are looked for, at
	// most: with a StaleAfter or ExpireAfter shorter than twice this, the
	// janitor looks every half of the shorter one (but not more often than
	// minJanitorEvery), so that a short threshold is honoured.
	janitorEvery    = 30 * time.Second
	minJanitorEvery = 100 * time.Millisecond
)

// Reasons of Metrics.Refused.
const (
	// RefusedTableName: the table name is invalid or too long
	// (control.CheckTableName).
	RefusedTableName = "table_name"
	// RefusedQueryName: the query's name is longer than MaxQueryNameLen.
	RefusedQueryName = "query_name"
	// RefusedRunCap: the registry tracks RegistryConfig.MaxRuns runs
	// already.
	RefusedRunCap = "run_cap"
)

// The registry's errors.
var (
	// ErrUnknownRun means no tracker of that run exists or is remembered.
	ErrUnknownRun = errors.New("run is not tracked")
	// ErrClosed means the registry is shutting down.
	ErrClosed = errors.New("registry closed")
)

// FeederStore is what the registry needs of the control table's feeders
// (ADR 0015). *control.Store implements it; a Store without it retires
// nothing.
type FeederStore interface {
	RetireFeeder(ctx context.Context, table, query, why string) ([]control.Feeder, control.Verdict, bool, error)
}

// TrackStore persists explicit tracks so that they survive a restart.
// *control.Store implements it.
type TrackStore interface {
	SaveTrack(ctx context.Context, t control.Track) error
	FinishTrack(ctx context.Context, runID, table string) error
}

// RegistryConfig configures a Registry. Events and Store are required.
type RegistryConfig struct {
	Events Events
	Store  Store
	Tracks TrackStore // nil: explicit tracks are not persisted
	Rules  []Rule     // declarative tracking

	Clock   Clock       // nil = SystemClock
	Logger  *zap.Logger // nil = no logs
	Metrics *Metrics    // nil = unregistered collectors

	// Tracker holds the retry, timeout and skew settings of every tracker.
	Tracker TrackerOptions

	// MaxBatch is the most advances one group commit applies when Store is
	// a BatchStore (ADR 0008): 0 means DefaultMaxBatch, a negative value
	// turns group commit off (one statement per advance).
	MaxBatch int
	// Committers is how many group commits may be in flight at once; 0
	// means DefaultCommitters.
	Committers int

	StaleAfter         time.Duration // 0 = DefaultStaleAfter
	ExpireAfter        time.Duration // 0 = DefaultExpireAfter; negative = never
	Remember           int           // 0 = DefaultRemember
	RecoverParallelism int           // 0 = DefaultRecoverParallelism
}

// Request asks for one run to be tracked into one table.
type Request struct {
	QueryID string
	RunID   string
	Table   string
	Spec    progress.Spec
	// Explicit marks a `finalizer track` request: it is persisted (when the
	// registry has a TrackStore) and survives a restart.
	Explicit bool
	// Supersede stops the trackers of this query's other runs on the same
	// table: a new run means the old one's driver is gone.
	Supersede bool
	// QueryName is the query's name, "" when it has none or is unknown.
	QueryName string
	// RetireOnCleanTermination retires the query from the table's feeders
	// when the run terminates without an exception (Rule.Retire).
	RetireOnCleanTermination bool

	// resumed marks an explicit track read back from the TrackStore by
	// Recover: it is persisted already.
	resumed bool
}

// JoinResult is the outcome of a Join.
type JoinResult struct {
	// Done is true when every tracker of the run has finished.
	Done bool
	// LastError is the last failed advance of a finished tracker, "" when
	// its last advance succeeded.
	LastError string
}

type trackKey struct{ runID, table string }

type entry struct {
	req     Request
	ready   chan struct{} // closed once t is set or the start failed
	reaped  chan struct{} // closed once the finished tracker is unsubscribed and recorded
	t       *Tracker
	box     *listener.Mailbox
	sub     Subscription
	lastErr string
}

// Registry owns every tracker of the service: it starts them (explicitly,
// from discovery of new runs, or at recovery), supersedes and expires
// them, joins them, and stops them all on Close.
type Registry struct {
	cfg    RegistryConfig
	log    *zap.Logger
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup // every goroutine the registry started
	found  chan listener.Run
	stop   chan struct{}
	every  time.Duration // janitor interval
	store  Store         // what trackers advance through: cfg.Store, or its group commit
	commit *committer    // nil without group commit

	mu       sync.RWMutex
	closed   bool
	trackers map[trackKey]*entry
	runs     map[string][]*entry // runID -> its trackers not finished
	queries  map[string][]*entry // queryID -> its trackers not finished
	starting map[string]int      // runID -> trackers not yet subscribed
	finished *memo               // runID -> last JoinResult
	ignored  *memo               // runs no rule matches, or refused

	refuseLog *lograte.Limiter
}

// NewRegistry returns a running registry. Call Close to stop it.
func NewRegistry(cfg RegistryConfig) *Registry {
	if cfg.Clock == nil {
		cfg.Clock = SystemClock{}
	}
	if cfg.Logger == nil {
		cfg.Logger = zap.NewNop()
	}
	if cfg.Metrics == nil {
		cfg.Metrics = NewMetrics(nil, cfg.Clock.Now)
	}
	if cfg.StaleAfter == 0 {
		cfg.StaleAfter = DefaultStaleAfter
	}
	if cfg.ExpireAfter == 0 {
		cfg.ExpireAfter = DefaultExpireAfter
	}
	if cfg.Remember == 0 {
		cfg.Remember = DefaultRemember
	}
	if cfg.RecoverParallelism == 0 {
		cfg.RecoverParallelism = DefaultRecoverParallelism
	}
	if cfg.MaxBatch == 0 {
		cfg.MaxBatch = DefaultMaxBatch
	}
	if cfg.Committers <= 0 {
		cfg.Committers = DefaultCommitters
	}
	every := janitorEvery
	for _, d := range []time.Duration{cfg.StaleAfter / 2, cfg.ExpireAfter / 2} {
		if d > 0 && d < every {
			every = max(d, minJanitorEvery)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	r := &Registry{
		every:    every,
		cfg:      cfg,
		log:      cfg.Logger,
		ctx:      ctx,
		cancel:   cancel,
		found:    make(chan listener.Run, 1024),
		stop:     make(chan struct{}),
		trackers: make(map[trackKey]*entry),
		runs:     make(map[string][]*entry),
		queries:  make(map[string][]*entry),
		starting: make(map[string]int),
		finished: newMemo(cfg.Remember),
		ignored:  newMemo(cfg.Remember),

		refuseLog: lograte.New(cfg.Clock.Now, refuseLogEvery),
	}
	r.store = cfg.Store
	if bs, ok := cfg.Store.(BatchStore); ok && cfg.MaxBatch > 0 {
		timeout := cfg.Tracker.AdvanceTimeout
		if timeout <= 0 {
			timeout = DefaultAdvanceTimeout
		}
		r.commit = newCommitter(ctx, bs, cfg.Metrics, cfg.MaxBatch, cfg.Committers, timeout)
		r.store = r.commit
	}
	r.wg.Add(2)
	go r.discoverLoop()
	go r.janitorLoop()
	return r
}

// Track starts a tracker for req unless one for the same run and table
// exists. It reports whether it started one. Explicit requests are
// persisted before the tracker starts. A table name the control table
// cannot hold (control.CheckTableName) is refused with
// control.ErrInvalidTable and counted in Metrics.Refused.
func (r *Registry) Track(ctx context.Context, req Request) (bool, error) {
	if err := control.CheckTableName(req.Table); err != nil {
		r.cfg.Metrics.Refused.WithLabelValues(RefusedTableName).Inc()
		return false, fmt.Errorf("track run %s: %w", req.RunID, err)
	}
	key := trackKey{req.RunID, req.Table}
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		return false, ErrClosed
	}
	if _, ok := r.trackers[key]; ok {
		r.mu.Unlock()
		return false, nil
	}
	e := &entry{req: req, ready: make(chan struct{}), reaped: make(chan struct{})}
	r.add(e)
	r.starting[req.RunID]++
	r.finished.del(req.RunID)
	r.ignored.del(req.RunID)
	var superseded []*entry
	if req.Supersede {
		for _, o := range r.queries[req.QueryID] {
			if o.req.Table == req.Table && o.req.RunID != req.RunID {
				superseded = append(superseded, o)
			}
		}
	}
	r.mu.Unlock()

	err := r.start(ctx, e)
	r.mu.Lock()
	if r.starting[req.RunID]--; r.starting[req.RunID] <= 0 {
		delete(r.starting, req.RunID)
	}
	if err != nil {
		r.remove(e)
	}
	r.mu.Unlock()
	close(e.ready)
	if err != nil {
		return false, err
	}
	for _, o := range superseded {
		<-o.ready
		if o.t != nil {
			r.log.Info("run superseded by a new run of the same query; stopping its tracker",
				zap.String("table", req.Table), zap.String("query_id", req.QueryID),
				zap.String("run_id", o.req.RunID), zap.String("new_run_id", req.RunID))
			o.t.Stop()
		}
	}
	return true, nil
}

// start persists (when explicit), subscribes and starts e's tracker.
func (r *Registry) start(ctx context.Context, e *entry) error {
	req := e.req
	if req.Explicit && !req.resumed && r.cfg.Tracks != nil {
		spec, err := json.Marshal(req.Spec.Options())
		if err != nil {
			return fmt.Errorf("track %s: %w", req.RunID, err)
		}
		t := control.Track{QueryID: req.QueryID, RunID: req.RunID, Table: req.Table, Spec: spec, CreatedAt: r.cfg.Clock.Now()}
		if err := r.cfg.Tracks.SaveTrack(ctx, t); err != nil {
			return fmt.Errorf("persist track of run %s: %w", req.RunID, err)
		}
	}
	box := listener.NewMailbox()
	sub, err := r.cfg.Events.Subscribe(req.QueryID, req.RunID, box)
	if err != nil {
		return fmt.Errorf("subscribe to run %s: %w", req.RunID, err)
	}
	o := r.cfg.Tracker
	tc := TrackerConfig{
		QueryID: req.QueryID, RunID: req.RunID, Table: req.Table, Spec: req.Spec, Box: box, Store: r.store,
		Clock: r.cfg.Clock, Logger: r.cfg.Logger, Metrics: r.cfg.Metrics,
		RetryDelay: o.RetryDelay, Retries: o.Retries, WarnEvery: o.WarnEvery, FutureSkew: o.FutureSkew, AdvanceTimeout: o.AdvanceTimeout,
		QueryName: req.QueryName,
	}
	if fs, ok := r.cfg.Store.(FeederStore); ok && req.RetireOnCleanTermination {
		tc.Retire = func(ctx context.Context, why string) error {
			_, _, _, err := fs.RetireFeeder(ctx, req.Table, req.QueryID, why)
			if errors.Is(err, control.ErrNoFeeder) {
				return nil // never reported, or retired already
			}
			return err
		}
	}
	e.sub, e.box = sub, box
	r.wg.Add(1)
	r.cfg.Metrics.TrackedRuns.Inc()
	e.t = newTracker(tc)
	// One goroutine per tracker: its worker, then its reaping.
	go func() {
		e.t.run(r.ctx)
		r.reap(e)
	}()
	r.log.Info("tracking run", zap.String("table", req.Table), zap.String("query_id", req.QueryID),
		zap.String("run_id", req.RunID), zap.String("spec", req.Spec.String()), zap.Bool("explicit", req.Explicit))
	return nil
}

// reap runs on e's worker goroutine once the worker has exited: it
// unsubscribes and records the result.
func (r *Registry) reap(e *entry) {
	defer r.wg.Done()
	defer close(e.reaped)
	r.cfg.Metrics.TrackedRuns.Dec()
	if err := e.sub.Unsubscribe(); err != nil {
		r.log.Warn("unsubscribe failed", zap.String("run_id", e.req.RunID), zap.Error(err))
	}
	st := e.t.Status()
	if e.req.Explicit && st.Terminated && r.cfg.Tracks != nil {
		ctx, cancel := context.WithTimeout(context.Background(), DefaultAdvanceTimeout)
		if err := r.cfg.Tracks.FinishTrack(ctx, e.req.RunID, e.req.Table); err != nil {
			r.log.Warn("could not mark the explicit track done; it is resumed (and finishes at once) on the next start",
				zap.String("run_id", e.req.RunID), zap.String("table", e.req.Table), zap.Error(err))
		}
		cancel()
	}
	r.mu.Lock()
	r.remove(e)
	if st.LastError != "" {
		e.lastErr = st.LastError
	}
	prev, _ := r.finished.get(e.req.RunID)
	if prev.LastError == "" {
		prev.LastError = e.lastErr
	}
	prev.Done = true
	r.finished.put(e.req.RunID, prev)
	r.mu.Unlock()
}

// add indexes e. r.mu held.
func (r *Registry) add(e *entry) {
	r.trackers[trackKey{e.req.RunID, e.req.Table}] = e
	r.runs[e.req.RunID] = append(r.runs[e.req.RunID], e)
	r.queries[e.req.QueryID] = append(r.queries[e.req.QueryID], e)
}

// remove drops e from the indexes. r.mu held.
func (r *Registry) remove(e *entry) {
	delete(r.trackers, trackKey{e.req.RunID, e.req.Table})
	drop := func(m map[string][]*entry, k string) {
		list := m[k]
		for i, o := range list {
			if o == e {
				list = append(list[:i:i], list[i+1:]...)
				break
			}
		}
		if len(list) == 0 {
			delete(m, k)
		} else {
			m[k] = list
		}
	}
	drop(r.runs, e.req.RunID)
	drop(r.queries, e.req.QueryID)
}

// Join waits until every tracker of the run has finished, or ctx is done.
// It returns ErrUnknownRun when the run is neither tracked nor remembered.
func (r *Registry) Join(ctx context.Context, runID string) (JoinResult, error) {
	r.mu.RLock()
	live := append([]*entry(nil), r.runs[runID]...)
	fin, ok := r.finished.get(runID)
	r.mu.RUnlock()
	if len(live) == 0 {
		if ok {
			return fin, nil
		}
		return JoinResult{}, fmt.Errorf("join %s: %w", runID, ErrUnknownRun)
	}
	var res JoinResult
	for _, e := range live {
		select {
		case <-e.ready:
		case <-ctx.Done():
			return JoinResult{}, nil
		}
		if e.t == nil {
			continue
		}
		select {
		case <-e.reaped:
		case <-ctx.Done():
			return JoinResult{}, nil
		}
		if _, err := e.t.Failures(); err != nil && res.LastError == "" {
			res.LastError = err.Error()
		}
	}
	res.Done = true
	return res, nil
}

// Reassert asks every live tracker to write its last advance again
// (Tracker.Reassert) and returns how many were asked. The service calls it
// when its connection to the control database is re-established: after a
// failover to a standby that asynchronous replication left behind, the
// newest verdicts come back at once instead of at the next period. It
// does not block.
func (r *Registry) Reassert() int {
	r.mu.RLock()
	defer r.mu.RUnlock()
	n := 0
	for _, e := range r.trackers {
		select {
		case <-e.ready:
		default:
			continue
		}
		if e.t != nil {
			e.t.Reassert()
			n++
		}
	}
	return n
}

// Status returns a snapshot of every live tracker, sorted by table and run.
func (r *Registry) Status() []TrackerStatus {
	seen := r.snapshot()
	out := make([]TrackerStatus, len(seen))
	for i, x := range seen {
		out[i] = x.status
	}
	return out
}

// seenTracker is one tracker and its status at one moment.
type seenTracker struct {
	e      *entry
	status TrackerStatus
}

// snapshot returns every tracker that has started, with its status, sorted
// by table and run. Trackers still starting are left out.
func (r *Registry) snapshot() []seenTracker {
	now := r.cfg.Clock.Now()
	r.mu.RLock()
	out := make([]seenTracker, 0, len(r.trackers))
	for _, e := range r.trackers {
		select {
		case <-e.ready: // e.t is set, or nil when the start failed
		default:
			continue
		}
		if e.t == nil {
			continue
		}
		s := e.t.Status()
		s.Explicit = e.req.Explicit
		s.Stale = !s.Done && now.Sub(s.LastEvent) > r.cfg.StaleAfter
		out = append(out, seenTracker{e: e, status: s})
	}
	r.mu.RUnlock()
	sort.Slice(out, func(i, j int) bool {
		a, b := out[i].status, out[j].status
		if a.Table != b.Table {
			return a.Table < b.Table
		}
		return a.RunID < b.RunID
	})
	return out
}

// Close stops intake, asks every tracker to apply what is pending and
// stop, and waits for them until ctx is done; then it cancels what is
// still running and waits for it. It blocks; safe to call twice.
func (r *Registry) Close(ctx context.Context) error {
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		r.wg.Wait()
		return nil
	}
	r.closed = true
	close(r.stop)
	var all []*entry
	for _, e := range r.trackers {
		all = append(all, e)
	}
	r.mu.Unlock()
	for _, e := range all {
		<-e.ready
		if e.t != nil {
			e.t.Stop()
		}
	}
	done := make(chan struct{})
	go func() { r.wg.Wait(); close(done) }()
	var err error
	select {
	case <-done:
	case <-ctx.Done():
		err = fmt.Errorf("trackers still applying at shutdown deadline: %w", ctx.Err())
		r.cancel()
		<-done
	}
	r.cancel()
	if r.commit != nil {
		r.commit.close()
	}
	return err
}
