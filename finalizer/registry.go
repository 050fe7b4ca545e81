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

// Events is what the registry needs of the event bus: a subscription to
// one run's events that fills a Mailbox. *listener.Listener implements it
// through an adapter in cmd/finalizer.
type Events interface {
	Subscribe(queryID, runID string, box *listener.Mailbox) (Subscription, error)
}

// Subscription is one run's live subscription.
type Subscription interface {
	Unsubscribe() error
}

// Namer looks up a run's query name when its first event carried none (an
// idle or terminated event). Optional: Events may implement it.
type Namer interface {
	RunName(ctx context.Context, queryID, runID string) (string, error)
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

	// Tracker holds the retry and skew settings applied to every tracker
	// (its identity, Box, Store, Clock, Logger and Metrics are ignored).
	Tracker TrackerConfig

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
	tc := r.cfg.Tracker
	tc.QueryID, tc.RunID, tc.Table, tc.Spec = req.QueryID, req.RunID, req.Table, req.Spec
	tc.Box, tc.Store = box, r.store
	tc.Clock, tc.Logger, tc.Metrics = r.cfg.Clock, r.cfg.Logger, r.cfg.Metrics
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

// Known reports whether runID is tracked (and subscribed), finished or
// ignored, so that discovery can drop its events without parsing them. It
// is cheap. While a run's subscription is being made it is not known, so
// discovery hands its events over (see Discovered) instead of losing them.
func (r *Registry) Known(runID string) bool {
	r.mu.RLock()
	defer r.mu.RUnlock()
	if r.starting[runID] > 0 {
		return false
	}
	if len(r.runs[runID]) > 0 {
		return true
	}
	if _, ok := r.finished.get(runID); ok {
		return true
	}
	_, ok := r.ignored.get(runID)
	return ok
}

// Discovered hands a newly seen run to the registry, which tracks it when a
// rule matches. It blocks while the queue is full and returns at once
// once the registry is closed. Safe to call from a NATS callback.
func (r *Registry) Discovered(run listener.Run) {
	select {
	case r.found <- run:
	case <-r.stop:
	}
}

func (r *Registry) discoverLoop() {
	defer r.wg.Done()
	for {
		select {
		case <-r.stop:
			return
		case run := <-r.found:
			r.consider(r.ctx, run, run.Kind == progress.KindStarted)
		}
	}
}

// consider tracks run into every table whose rule matches it, and hands
// the event it was discovered through to the run's trackers.
func (r *Registry) consider(ctx context.Context, run listener.Run, supersede bool) {
	if r.deliver(run) {
		return
	}
	if len(r.cfg.Rules) == 0 || r.Known(run.RunID) {
		return
	}
	name := run.Name
	if name == "" {
		if n, ok := r.cfg.Events.(Namer); ok {
			got, err := n.RunName(ctx, run.QueryID, run.RunID)
			if err != nil {
				r.log.Debug("no name found for run", zap.String("run_id", run.RunID), zap.Error(err))
			}
			name = got
		}
	}
	if len(name) > MaxQueryNameLen {
		r.refuse(RefusedQueryName, run, fmt.Errorf("query name of %d bytes, at most %d", len(name), MaxQueryNameLen))
		return
	}
	matched := false
	for _, rule := range r.cfg.Rules {
		table, ok := rule.Match(run.QueryID, name)
		if !ok {
			continue
		}
		matched = true
		req := Request{QueryID: run.QueryID, RunID: run.RunID, Table: table, Spec: rule.Spec, Supersede: supersede}
		_, err := r.Track(ctx, req)
		switch {
		case err == nil:
		case errors.Is(err, control.ErrInvalidTable):
			r.refuse("", run, err) // counted by Track
		case !errors.Is(err, ErrClosed):
			r.log.Error("could not track run", zap.String("table", table), zap.String("query_id", run.QueryID),
				zap.String("run_id", run.RunID), zap.Error(err))
		}
	}
	if !matched {
		r.mu.Lock()
		if len(r.runs[run.RunID]) == 0 {
			r.ignored.put(run.RunID, JoinResult{})
		}
		r.mu.Unlock()
		r.log.Debug("run matches no table; ignored", zap.String("query_id", run.QueryID),
			zap.String("run_id", run.RunID), zap.String("name", name))
		return
	}
	r.deliver(run)
}

// refuse records that run will not be tracked (a name the service does
// not accept), so that its further events are dropped unparsed: it counts
// the refusal under reason (unless reason is "", when the caller counted
// it), and logs it at most once per reason every refuseLogEvery.
func (r *Registry) refuse(reason string, run listener.Run, err error) {
	if reason != "" {
		r.cfg.Metrics.Refused.WithLabelValues(reason).Inc()
	} else {
		reason = RefusedTableName
	}
	r.mu.Lock()
	if len(r.runs[run.RunID]) == 0 {
		r.ignored.put(run.RunID, JoinResult{})
	}
	r.mu.Unlock()
	if ok, n := r.refuseLog.Allow(reason); ok {
		r.log.Warn("run refused; its events are dropped", zap.String("reason", reason),
			zap.String("query_id", run.QueryID), zap.String("run_id", run.RunID), zap.Error(err),
			zap.Int("suppressed", n))
	}
}

// deliver offers the event a run was discovered through to the mailboxes
// of its trackers, once they are subscribed. The event may also arrive
// through the subscription or the JetStream catch-up; the mailbox keeps
// only the newest. It reports whether the run has trackers.
func (r *Registry) deliver(run listener.Run) bool {
	r.mu.RLock()
	es := append([]*entry(nil), r.runs[run.RunID]...)
	r.mu.RUnlock()
	for _, e := range es {
		<-e.ready
		if e.box != nil && run.Event != nil {
			e.box.Offer(run.Event)
		}
	}
	return len(es) > 0
}

// Recover resumes the persisted explicit tracks that are not done and
// tracks every retained run that a rule matches, subscribing several at
// once. Each tracker applies its run's retained progress at once. Errors of
// single runs are logged; Recover returns the first of them, if any.
func (r *Registry) Recover(ctx context.Context, tracks []control.Track, runs []listener.Run) error {
	var (
		mu    sync.Mutex
		first error
		wg    sync.WaitGroup
	)
	sem := make(chan struct{}, r.cfg.RecoverParallelism)
	note := func(err error) {
		mu.Lock()
		if first == nil {
			first = err
		}
		mu.Unlock()
	}
	for _, t := range tracks {
		if !t.DoneAt.IsZero() {
			continue
		}
		var opts progress.SpecOptions
		if err := json.Unmarshal(t.Spec, &opts); err != nil {
			note(fmt.Errorf("track of run %s: bad spec: %w", t.RunID, err))
			continue
		}
		spec, err := progress.ParseSpec(opts)
		if err != nil {
			note(fmt.Errorf("track of run %s: %w", t.RunID, err))
			continue
		}
		req := Request{QueryID: t.QueryID, RunID: t.RunID, Table: t.Table, Spec: spec, Explicit: true, resumed: true}
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer func() { <-sem; wg.Done() }()
			if _, err := r.Track(ctx, req); err != nil {
				note(err)
			}
		}()
	}
	for _, run := range runs {
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer func() { <-sem; wg.Done() }()
			r.consider(ctx, run, false)
		}()
	}
	wg.Wait()
	if first != nil {
		r.log.Error("some runs could not be recovered", zap.Error(first))
	}
	return first
}

// Status returns a snapshot of every live tracker, sorted by table and run.
func (r *Registry) Status() []TrackerStatus {
	now := r.cfg.Clock.Now()
	r.mu.RLock()
	out := make([]TrackerStatus, 0, len(r.trackers))
	for _, e := range r.trackers {
		select {
		case <-e.ready:
		default:
			continue
		}
		if e.t == nil {
			continue
		}
		s := e.t.Status()
		s.Explicit = e.req.Explicit
		s.Stale = !s.Done && now.Sub(s.LastEvent) > r.cfg.StaleAfter
		out = append(out, s)
	}
	r.mu.RUnlock()
	sort.Slice(out, func(i, j int) bool {
		if out[i].Table != out[j].Table {
			return out[i].Table < out[j].Table
		}
		return out[i].RunID < out[j].RunID
	})
	return out
}

// janitorLoop marks stale runs and stops trackers of runs silent for
// longer than ExpireAfter.
func (r *Registry) janitorLoop() {
	defer r.wg.Done()
	timer := r.cfg.Clock.NewTimer()
	defer timer.Stop()
	for {
		timer.Start(r.every)
		select {
		case <-r.stop:
			return
		case <-timer.C():
		}
		r.sweep()
	}
}

func (r *Registry) sweep() {
	stale := 0
	now := r.cfg.Clock.Now()
	for _, s := range r.Status() {
		silent := now.Sub(s.LastEvent)
		if s.Stale {
			stale++
		}
		if r.cfg.ExpireAfter > 0 && silent > r.cfg.ExpireAfter {
			r.mu.RLock()
			e := r.trackers[trackKey{s.RunID, s.Table}]
			r.mu.RUnlock()
			if e != nil && e.t != nil {
				r.log.Warn("run silent for too long; stopping its tracker (a driver that died without a termination?)",
					zap.String("table", s.Table), zap.String("query_id", s.QueryID), zap.String("run_id", s.RunID),
					zap.Duration("silent", silent))
				e.t.Stop()
			}
		}
	}
	r.cfg.Metrics.StaleRuns.Set(float64(stale))
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

// memo is a bounded map that forgets its oldest keys first.
type memo struct {
	max   int
	m     map[string]JoinResult
	order []string
}

func newMemo(max int) *memo { return &memo{max: max, m: make(map[string]JoinResult)} }

func (m *memo) get(k string) (JoinResult, bool) { v, ok := m.m[k]; return v, ok }

func (m *memo) del(k string) { delete(m.m, k) }

func (m *memo) put(k string, v JoinResult) {
	if _, ok := m.m[k]; !ok {
		m.order = append(m.order, k)
	}
	m.m[k] = v
	for len(m.m) > m.max && len(m.order) > 0 {
		old := m.order[0]
		m.order = m.order[1:]
		delete(m.m, old)
	}
	if len(m.order) > 2*m.max+16 { // deleted keys linger in order: compact
		kept := make([]string, 0, len(m.m))
		for _, k := range m.order {
			if _, ok := m.m[k]; ok {
				kept = append(kept, k)
			}
		}
		m.order = kept
	}
}

// ListenerEvents adapts a *listener.Listener to Events and Namer: its
// Subscribe returns the concrete *listener.Subscription.
type ListenerEvents struct{ L *listener.Listener }

var (
	_ Events = ListenerEvents{}
	_ Namer  = ListenerEvents{}
)

// Subscribe subscribes box to the run's events (see listener.Subscribe).
func (b ListenerEvents) Subscribe(queryID, runID string, box *listener.Mailbox) (Subscription, error) {
	s, err := b.L.Subscribe(queryID, runID, box)
	if err != nil {
		return nil, err // not a typed nil in the interface
	}
	return s, nil
}

// RunName looks the run's query name up in what JetStream retained.
func (b ListenerEvents) RunName(ctx context.Context, queryID, runID string) (string, error) {
	return b.L.RunName(ctx, queryID, runID)
}
