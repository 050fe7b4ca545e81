package finalizer

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cenkalti/backoff/v4"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/finalizer-dev/finalizer/control"
	"github.com/finalizer-dev/finalizer/internal/lograte"
	"github.com/finalizer-dev/finalizer/listener"
	"github.com/finalizer-dev/finalizer/progress"
)

// Defaults of a tracker's behaviour.
const (
	// DefaultRetryDelay is the wait before the first retry of a failed
	// advance; each later retry waits twice as long (1 s, then 2 s).
	DefaultRetryDelay = time.Second
	// DefaultRetries is how many times a failed advance is retried in place
	// before it is logged and left to the run's next event.
	DefaultRetries = 2
	// DefaultWarnEvery is the least time between two warnings of one
	// tracker's failure streak (the first failure is always an error line).
	DefaultWarnEvery = 10 * time.Minute
	// DefaultFutureSkew is how far beyond the service's own clock a
	// progress's time may be before the progress gives no candidate. A
	// time within it never finalizes a period that has not ended by the
	// service's clock minus the delay.
	DefaultFutureSkew = 5 * time.Minute
	// DefaultAdvanceTimeout bounds one advance statement.
	DefaultAdvanceTimeout = 10 * time.Second
)

// minTime is the earliest progress time a tracker uses: a time before
// the Unix epoch counts as no time.
var minTime = time.Unix(0, 0).UTC()

// Store is what a tracker needs of the control table: a forward-only
// advance that returns the verdict as it now stands and whether this call
// moved it. *control.Store implements it.
type Store interface {
	Advance(ctx context.Context, a control.Advance) (control.Verdict, bool, error)
}

// TrackerConfig configures one tracker. QueryID, RunID, Table, Box and
// Store are required; zero values of the others take the defaults above.
type TrackerConfig struct {
	QueryID string
	RunID   string
	Table   string
	Spec    progress.Spec
	Box     *listener.Mailbox
	Store   Store
	// Marker and Reader, when set, let the tracker record signs that the
	// table's history changed under its verdict and read the verdict at a
	// run's batch 0 (history.go).
	Marker Marker
	Reader VerdictReader

	// QueryName is the query's name ("" when it has none): it resolves an
	// expected feeder of that name (ADR 0015).
	QueryName string
	// Retire, when set, retires the query from the table's feeders once
	// the run terminates without an exception, after its last progress was
	// applied (Rule.Retire). A run that fails is never retired.
	Retire func(ctx context.Context, why string) error

	Clock  Clock       // nil = SystemClock
	Logger *zap.Logger // nil = no logs
	// sampler, when set (by the registry), rate-limits the lines every
	// run logs in the normal course (a verdict moved, a run terminated, a
	// guard holding a run, an advance failing) across the trackers that
	// share it: the first few of a kind in an interval are logged at their
	// level, the others at DEBUG, and the next one logged says how many
	// were (or, when none comes, the registry's janitor: reportHeld). nil
	// logs each at its level.
	sampler        *lograte.Limiter
	Metrics        *Metrics      // nil = unregistered collectors
	RetryDelay     time.Duration // 0 = DefaultRetryDelay
	Retries        int           // 0 = DefaultRetries; negative = no retry
	WarnEvery      time.Duration // 0 = DefaultWarnEvery
	FutureSkew     time.Duration // 0 = DefaultFutureSkew
	AdvanceTimeout time.Duration // 0 = DefaultAdvanceTimeout

	// OnStart, when set, is told when the run started (exact: the time of
	// its started event) and, before that is known, a time by which it had
	// started (inexact: the time of its first progress taken). The
	// registry supersedes older runs by it.
	OnStart func(at time.Time, exact bool)
	// CatchUp, when set, offers the run's retained progress and termination
	// to Box once more. The worker calls it when the run terminates, so
	// that a progress that reached the stream but not the subscription (a
	// reconnect, a hand-over) is still applied. Bounded by AdvanceTimeout.
	CatchUp func(ctx context.Context) error
	// host, when set (by the registry), replaces OnStart and CatchUp.
	host runHost
}

// TrackerOptions are the tunables that every tracker of a registry shares;
// zero values take the defaults above.
type TrackerOptions struct {
	RetryDelay     time.Duration // 0 = DefaultRetryDelay
	Retries        int           // 0 = DefaultRetries; negative = no retry
	WarnEvery      time.Duration // 0 = DefaultWarnEvery
	FutureSkew     time.Duration // 0 = DefaultFutureSkew
	AdvanceTimeout time.Duration // 0 = DefaultAdvanceTimeout
}

// TrackerStatus is a snapshot of one tracker, for status and the HTTP API.
type TrackerStatus struct {
	QueryID string `json:"query_id"`
	RunID   string `json:"run_id"`
	Table   string `json:"table"`
	Spec    string `json:"spec"`
	// Written is the last candidate this tracker wrote (or found already
	// reached); zero when none yet.
	Written time.Time `json:"written,omitzero"`
	// LastEvent is when the tracker last received an event of its run.
	LastEvent time.Time `json:"last_event,omitzero"`
	// NotHeard is true while no event of the run was heard live since the
	// tracker started (a restart recovered its events from the stream):
	// LastEvent is then the tracker's start, not an event's arrival.
	NotHeard bool `json:"not_heard,omitempty"`
	// LastError is the last failed advance's error, "" after a success.
	LastError string `json:"last_error,omitempty"`
	// Failures is the number of failed advances in a row.
	Failures int `json:"failures,omitempty"`
	// Held says why the run's newest progress gave no candidate, as
	// "<guard>: <reason>" (guard is the finalizer_candidates_total outcome:
	// watermark_unbounded, not_executed, not_caught_up, implausible,
	// future, no_time); "" once a progress gives one (ADR 0012).
	Held string `json:"held,omitempty"`
	// Guards counts, by outcome, the progresses of this run that gave no
	// candidate.
	Guards map[string]int64 `json:"guards,omitempty"`
	// RowsDroppedByWatermark is the sum of numRowsDroppedByWatermark over
	// the progresses this tracker parsed (a lower bound: a progress
	// superseded in the slot is never parsed, ADR 0011).
	RowsDroppedByWatermark int64 `json:"rows_dropped_by_watermark,omitempty"`
	// Quiet is the last time the verdict moved because the source was
	// quiet (ADR 0014): by which signal, the time T the source was known
	// caught up, and the verdict it supported; nil when never.
	Quiet *QuietMove `json:"quiet,omitempty"`
	// Idle is true when the run's newest event said it has no new data
	// (an idle event, or a progress no newer than the last one), false
	// after a new progress.
	Idle bool `json:"idle,omitempty"`
	// Terminated is true once the run's termination arrived.
	Terminated bool `json:"terminated,omitempty"`
	// Done is true once the worker has stopped.
	Done bool `json:"done,omitempty"`
	// Stale is true when the run has been silent longer than the registry's
	// stale threshold (set by the registry).
	Stale bool `json:"stale,omitempty"`
	// Explicit is true for tracks made with `finalizer track`.
	Explicit bool `json:"explicit,omitempty"`
	// QueryName is the query's name, "" when it has none.
	QueryName string `json:"query_name,omitempty"`
	// Failed is true when the run terminated with an exception.
	Failed bool `json:"failed,omitempty"`
	// Retired is true once the run's clean termination retired its query
	// from the table's feeders (Rule.Retire).
	Retired bool `json:"retired,omitempty"`
	// Behind counts this run's candidates below the verdict's stored end
	// (finalizer_history_signs_total{kind="behind"}).
	Behind int64 `json:"behind,omitempty"`
	// Sign is the first sign this run gave that the table's history
	// changed under the verdict (a reset, a candidate behind, a source
	// that changed); "" when none.
	Sign string `json:"sign,omitempty"`
}

// QuietMove is a verdict move made because the source was quiet.
type QuietMove struct {
	// Signal is idle_event, no_data_progress or caught_up.
	Signal string `json:"signal"`
	// At is the time T the source was known caught up (capped by the
	// service's clock).
	At time.Time `json:"at"`
	// Until is the verdict it supported: floor(T - quiet.after - delay).
	Until time.Time `json:"until"`
}

// Tracker advances one table from one run. Its worker goroutine takes the
// newest progress from the run's Mailbox, turns it into a candidate and
// advances the table's verdict when the candidate is later than the one it
// last wrote. It stops after applying what is left when the run terminates,
// when Stop is called, or when its context is cancelled.
//
// There is one per tracked run and table: its bools sit together, without
// padding after each, and it stays within the allocator's 1,024-byte size
// class (TestTrackerSize).
type Tracker struct {
	cfg   trackerCfg
	log   runLog
	done  latch // closed once the tracker has exited
	start time.Time

	// Scheduling on the registry's pool (ADR 0022). The tracker has no
	// goroutine of its own: whatever gives it work (mail in its box, Stop,
	// Reassert, a retry that is due) submits it, and a worker runs one
	// step. At most one step of a tracker runs at a time.
	ctx         context.Context // bounds every step; its end stops the tracker
	pool        *pool
	onExit      func()       // run on the worker once the tracker has exited
	state       atomic.Int32 // stateNew, stateIdle, stateQueued, ...
	stopReq     atomic.Bool  // Stop was called
	reassertReq atomic.Bool  // Reassert was called, not yet taken by a step
	retryFired  atomic.Bool  // the armed retry timer fired
	woken       atomic.Bool  // schedule was called since the last step began that was not parked
	// refusedReq: the registry keeps a held advance of this tracker's
	// that ownership wrote later and the control table refused
	// (Registry.RefusedHeld), not yet taken by a step (takeHeldRefusal).
	// Four bytes in the padding before pending (TestTrackerSize).
	refusedReq atomic.Bool

	// Owned by the steps (one at a time).
	pending *progress.Event // newest progress not yet applied
	// pendingHeard is when pending was heard live (Unix ns, this
	// service's clock), when it may come from the stream's retained copy
	// minus when the stream stored it (-Unix ns, the NATS server's clock:
	// Mail.ProgressStored), or 0 when it may come from the retained copy
	// and its stored time is not known. A rewind after it holds it
	// (beforeRewind, rewindAt), whatever came since. One field for the
	// three.
	pendingHeard int64
	// pendingSeq is the stream sequence of pending when it may come from
	// the stream's retained copy (Mail.ProgressSeq), 0 otherwise or when
	// not known: a retained progress is judged against a rewind by it,
	// never by a clock (beforeRewind; ADR 0019, addendum of 2026-12-06,
	// "judged by sequence"). Its 8 bytes come out of lastWarn, kept as
	// Unix ns (TestTrackerSize).
	pendingSeq   uint64
	retries      int         // retries armed in the current failure streak
	retryStop    func() bool // stops the armed retry timer; nil when none
	holding      bool        // the armed wake-up is a hold's (holdUntil), which a stop ends
	stepErr      error       // this step's failed advance, and its candidate
	stepCand     progress.Candidate
	parked       *parked // the step's advance waits for its group commit
	wantReassert bool    // a re-assert is asked for and not done yet
	sawProgress  bool
	retryWanted  bool // this step's advance or re-assert failed
	mayPark      bool // write may hand its advance over and return (parked)
	// Owned by the worker goroutine until done is closed; beside the bools
	// above, where they take no room of their own (TestTrackerSize).
	movedLast bool // the last advance moved the verdict
	batchZero bool // the run's batch 0 arrived, perhaps replaced in the mailbox (checkReset)
	named     bool // the query's name was learnt from a progress (write), its feeder's row not told yet (host.namedFeeder)

	// Owned by the worker goroutine.
	written  time.Time
	lastAdv  *control.Advance // the last advance this tracker wrote, for Reassert
	lastWarn int64            // when fail last logged, Unix ns (the registry's clock)
	warned   map[string]bool  // guards already logged at WARN for this run
	heldBy   string           // the guard holding the newest progress, "" when none
	quietAt  time.Time        // the newest time the source was known caught up, not yet applied
	quietSig string           // the signal of quietAt
	last     *progress.Event  // the newest progress taken: the provenance of a quiet move; nil without quiet.after
	// droppedRows is the table's counter of rows dropped by the
	// watermark, looked up at the first rows dropped instead of at every
	// progress.
	droppedRows *atomic.Int64

	// Owned by the worker goroutine until done is closed.
	out         outcome
	hist        history
	seenRewinds uint64
	rewinds     atomic.Uint64 // bumped by rewound, from any goroutine

	mu         sync.Mutex
	lastErr    error
	failures   int
	lastEvent  time.Time
	heard      bool // an event was heard live since the tracker started
	idle       bool
	terminated bool
	failed     bool
	retired    bool
	// heldByQuiet: heldBy was set by a quiet signal, not by the newest
	// progress, so it does not stop a later quiet signal. Worker only.
	heldByQuiet bool
	shownWrite  time.Time
	held        string
	guards      map[string]int64
	dropped     int64
	quiet       *QuietMove
	behind      int64
	signText    string
}

// trackerCfg is a tracker's configuration: its run's own part, and the
// settings every tracker of a registry shares behind one pointer (128
// bytes per tracked run when each tracker had a copy, issue 12).
type trackerCfg struct {
	QueryID   string
	RunID     string
	Table     string
	Spec      progress.Spec
	Box       *listener.Mailbox
	QueryName string
	Retire    func(ctx context.Context, why string) error
	// host is told when the run started, asked for the final catch-up and
	// told when the tracker exited: the registry's entry, or funcHost for
	// a TrackerConfig's OnStart and CatchUp; nil when neither.
	host runHost
	*trackerShared
}

// runHost is what runs a tracker (the registry's entry): one interface
// value instead of a closure or method value per tracker for each of
// OnStart, CatchUp and begin's onExit, each a heap object per tracked run
// for the collector to mark (issue 12).
type runHost interface {
	// started is TrackerConfig.OnStart.
	started(at time.Time, exact bool)
	// catchUp is TrackerConfig.CatchUp; ok is false when there is none.
	catchUp(ctx context.Context) (ok bool, err error)
	// exited runs on the worker once the tracker has exited, after
	// begin's onExit.
	exited()
	// notifier returns where the host keeps the tracker as its mailbox's
	// listener.Notifier, set to it, so that the mailbox points at it
	// without an allocation; nil when the host keeps none.
	notifier(t *Tracker) *listener.Notifier
	// rewindsPending reports whether a re-read of the tables' rewinds
	// (RereadRewinds: a rewind may have been missed) is under way: no
	// advance is sent before it is known.
	rewindsPending() bool
	// afterRereads calls fn once the re-read of the rewinds under way
	// completes (or the host closes), at once when none is; stop forgets
	// fn.
	afterRereads(fn func()) (stop func() bool)
	// afterJoins calls fn once the tracker's table waits for no feeder's
	// join (or the host closes), at once when it waits for none; stop
	// forgets fn.
	afterJoins(fn func()) (stop func() bool)
	// closing reports whether the host is shutting down (Registry.Close
	// began).
	closing() bool
	// joinPending reports whether the tracker's table waits for a new
	// feeder's join that did not succeed (another session holds the
	// table locked, the database is unavailable): the table must not move
	// before that feeder holds it.
	joinPending() bool
	// namedFeeder is told the query's name the tracker learnt from its
	// progress (an explicit track names none), once an advance carrying
	// it succeeded: a solo table's advance writes only the table's row,
	// so the feeder's row, joined without the name, is given it
	// (Registry.nameFeeder).
	namedFeeder(name string)
	// rewoundAt is when an operator last rewound the tracker's table, in
	// silent when the run was found silent or terminated since that
	// rewind at the tracker's start or a restart's recovery, in since when
	// the rewind came after the start was judged, in latest always; zero
	// otherwise (see Tracker.rewindAt).
	rewoundAt() (silent, since, latest time.Time)
	// knownRewind is the tracker's table's last rewind this service
	// knows of, as the control table stored it (rewound_at: from a
	// recovery's or a re-read's read of the rows, a rewind's
	// notification, or a refused advance's row); zero when none. Every
	// advance carries it (control.KnownRewind), read before the progress
	// is judged against the rewinds: the statement refuses the advance
	// when the table was rewound since (ADR 0019, addendum of
	// 2026-12-06).
	knownRewind() time.Time
	// learnRewind is told the table's row as a statement that refused
	// one of the tracker's advances read it (control.ErrBeforeRewind):
	// its rewind, when not known yet, is then known as if its
	// notification had been heard.
	learnRewind(v control.Verdict)
	// rewindMark is the event stream's last sequence once the tracker's
	// table's rewind at had committed, with how it was read
	// (Registry.markInfo); ok is false when none is known for that
	// rewind (then rewindMargin applies).
	rewindMark(at time.Time) (mark streamMark, ok bool)
	// takeHeldRefusal returns, once, the held advance of this tracker's
	// that ownership wrote later and the control table refused as
	// decided before the table's rewind (Registry.RefusedHeld).
	takeHeldRefusal() (heldRefusal, bool)
	// storedRewind is the rewound_at the control table stored for the
	// rewind kept as at, when this service heard it live with it (the
	// notification's), zero otherwise; live says whether at is when this
	// service heard or learnt that rewind (its own clock).
	storedRewind(at time.Time) (stored time.Time, live bool)
	// heardLive is told when the tracker first hears of its run live
	// (an event not read from the stream's retained copy).
	heardLive()
}

// errJoinPending fails an advance while the table waits for another
// query's feeder join (Registry.JoinWaits); the tracker retries it.
// errRewindsPending fails an advance while the tables' rewinds are read
// again (a rewind announced while the control database's notifications
// were down may not be known yet); the tracker retries it, and judges its
// progress against the rewinds read.
var errRewindsPending = errors.New("the tables' rewinds are being read again from the control database (a rewind may have been missed while its notifications were down); no advance is sent before they are known")

var errJoinPending = errors.New("a new feeder of the table waits to join it (its join failed: another session holds the table locked in the control database, or the database is unavailable; retried); the table does not move before it joined")

// notifier returns the host's listener.Notifier of t, or nil.
func (t *Tracker) notifier() *listener.Notifier {
	if t.cfg.host == nil {
		return nil
	}
	return t.cfg.host.notifier(t)
}

// funcHost is a runHost of a TrackerConfig's OnStart and CatchUp, and
// the host of a tracker without a registry: it knows the rewinds its
// tracker's refused advances taught it.
type funcHost struct {
	onStart  func(at time.Time, exact bool)
	catchUpF func(ctx context.Context) error
	known    atomic.Int64 // the latest rewind learnt, Unix µs; 0 when none
}

func (h *funcHost) started(at time.Time, exact bool) {
	if h.onStart != nil {
		h.onStart(at, exact)
	}
}

func (h *funcHost) catchUp(ctx context.Context) (bool, error) {
	if h.catchUpF == nil {
		return false, nil
	}
	return true, h.catchUpF(ctx)
}

func (h *funcHost) exited() {}

func (h *funcHost) notifier(*Tracker) *listener.Notifier { return nil }

func (h *funcHost) joinPending() bool { return false }

func (h *funcHost) namedFeeder(string) {}

func (h *funcHost) rewindsPending() bool { return false }

func (h *funcHost) afterRereads(fn func()) func() bool { fn(); return func() bool { return false } }

func (h *funcHost) afterJoins(fn func()) func() bool { fn(); return func() bool { return false } }

func (h *funcHost) closing() bool { return false }

func (h *funcHost) rewoundAt() (silent, since, latest time.Time) {
	return time.Time{}, time.Time{}, time.Time{}
}

func (h *funcHost) knownRewind() time.Time {
	if us := h.known.Load(); us != 0 {
		return time.UnixMicro(us).UTC()
	}
	return time.Time{}
}

func (h *funcHost) learnRewind(v control.Verdict) {
	if v.RewoundAt.IsZero() {
		return
	}
	us := v.RewoundAt.UnixMicro()
	for {
		old := h.known.Load()
		if old >= us || h.known.CompareAndSwap(old, us) {
			return
		}
	}
}

func (h *funcHost) rewindMark(time.Time) (streamMark, bool) { return streamMark{}, false }

func (h *funcHost) takeHeldRefusal() (heldRefusal, bool) { return heldRefusal{}, false }

func (h *funcHost) storedRewind(time.Time) (time.Time, bool) { return time.Time{}, false }

func (h *funcHost) heardLive() {}

// Notify schedules the tracker, or only stamps its status
// (listener.Notifier, see begin and notified).
func (n *trackerNotify) Notify(stampOnly bool) { (*Tracker)(n).notified(stampOnly) }

// trackerNotify is a Tracker as its mailbox's listener.Notifier.
type trackerNotify Tracker

// trackerShared is what the trackers of a registry have in common (see
// TrackerConfig), with the defaults filled.
type trackerShared struct {
	Store          Store
	Marker         Marker
	Reader         VerdictReader
	Clock          Clock
	Logger         *zap.Logger
	sampler        *lograte.Limiter
	Metrics        *Metrics
	RetryDelay     time.Duration
	Retries        int
	WarnEvery      time.Duration
	FutureSkew     time.Duration
	AdvanceTimeout time.Duration
}

// sharedOf returns the shared part of cfg, with the defaults filled.
func sharedOf(cfg TrackerConfig) *trackerShared {
	sh := &trackerShared{
		Store: cfg.Store, Marker: cfg.Marker, Reader: cfg.Reader, Clock: cfg.Clock, Logger: cfg.Logger,
		sampler: cfg.sampler, Metrics: cfg.Metrics, RetryDelay: cfg.RetryDelay, Retries: cfg.Retries,
		WarnEvery: cfg.WarnEvery, FutureSkew: cfg.FutureSkew, AdvanceTimeout: cfg.AdvanceTimeout,
	}
	if sh.Clock == nil {
		sh.Clock = SystemClock{}
	}
	if sh.Logger == nil {
		sh.Logger = zap.NewNop()
	}
	if sh.Metrics == nil {
		sh.Metrics = NewMetrics(nil, sh.Clock.Now)
	}
	if sh.RetryDelay == 0 {
		sh.RetryDelay = DefaultRetryDelay
	}
	if sh.Retries == 0 {
		sh.Retries = DefaultRetries
	}
	if sh.WarnEvery == 0 {
		sh.WarnEvery = DefaultWarnEvery
	}
	if sh.FutureSkew == 0 {
		sh.FutureSkew = DefaultFutureSkew
	}
	if sh.AdvanceTimeout == 0 {
		sh.AdvanceTimeout = DefaultAdvanceTimeout
	}
	return sh
}

// newTracker fills cfg's defaults and returns a tracker that is not
// started: the caller starts it on a pool with t.begin.
func newTracker(cfg TrackerConfig) *Tracker { return newTrackerShared(cfg, sharedOf(cfg)) }

// newTrackerShared is newTracker with the shared settings sh (sharedOf),
// in place of cfg's: a registry makes them once for all its trackers.
func newTrackerShared(cfg TrackerConfig, sh *trackerShared) *Tracker {
	t := new(Tracker)
	initTracker(t, cfg, sh)
	return t
}

// initTracker makes *t (zero, never used) the tracker of cfg, in place:
// the registry's trackers live inside their entries (one heap object per
// tracked run instead of three, issue 12).
func initTracker(t *Tracker, cfg TrackerConfig, sh *trackerShared) {
	t.cfg = trackerCfg{
		QueryID: cfg.QueryID, RunID: cfg.RunID, Table: cfg.Table, Spec: cfg.Spec, Box: cfg.Box,
		QueryName: cfg.QueryName, Retire: cfg.Retire, host: cfg.host,
		trackerShared: sh,
	}
	if t.cfg.host == nil {
		// Also without OnStart and CatchUp: the host keeps the rewinds
		// the tracker learns from its refused advances.
		t.cfg.host = &funcHost{onStart: cfg.OnStart, catchUpF: cfg.CatchUp}
	}
	t.start = sh.Clock.Now()
	t.log = runLog{base: sh.Logger, cfg: &t.cfg}
	t.lastEvent = t.start
}

// Reassert asks the worker to write again the last advance it wrote
// (forward-only, so it never moves a verdict back): after a failover to a
// standby that asynchronous replication left behind, the verdict it wrote
// is restored without waiting for the next period. It does not block;
// several calls before the worker gets to it make one re-assert. A failed
// re-assert is tried again at the worker's next wake.
func (t *Tracker) Reassert() {
	t.reassertReq.Store(true)
	t.schedule()
}

// Stop asks the worker to apply what is pending and exit. It does not wait;
// use Done or Join. Safe to call more than once.
func (t *Tracker) Stop() {
	t.stopReq.Store(true)
	t.schedule()
}

// The scheduling states of a tracker.
const (
	// stateNew: begin has not run yet. A Stop (or mail) meanwhile is
	// recorded and not submitted: the tracker has no pool yet, and begin's
	// first step sees it. The registry publishes a tracker to Stop
	// (supersede, Close) before it calls begin, so a Stop in that window
	// submitted it to a nil pool (found by the race detector in CI).
	stateNew     int32 = iota
	stateIdle          // nothing to do, not in the pool's queue
	stateQueued        // in the pool's queue
	stateRunning       // a worker runs its step
	stateRerun         // a step runs, and more work came meanwhile
	stateExited        // done: never submitted again
)

// begin starts the tracker on p: from now on its box's mail, Stop,
// Reassert and its retry timer submit it to p, and it runs until the run
// terminates, Stop, or ctx ends (whoever ends ctx must call Stop or
// schedule after, so that the tracker sees it). onExit, when set, runs on
// the worker once the tracker has exited. A step runs at once, for what
// the box already holds.
func (t *Tracker) begin(ctx context.Context, p *pool, onExit func()) {
	t.ctx, t.pool, t.onExit = ctx, p, onExit
	if t.log.enabled(zapcore.DebugLevel) { // the spec's text only for a line written
		t.log.Debug("tracker started", zap.Stringer("spec", &t.cfg.Spec))
	}
	t.state.Store(stateIdle) // after the fields above: submit reads them once it sees it
	if n := t.notifier(); n != nil {
		t.cfg.Box.SetNotifier(n)
	} else {
		t.cfg.Box.SetNotify(t.notified)
	}
	t.schedule()
}

// notified is the mailbox's notify: mail came (schedule), or, while the
// tracker said after its last step that an idle event changes nothing for
// it (Mailbox.SetQuiet, quietNow), an idle event or a progress not newer
// than the one taken came, which only stamps what Status shows of it: when
// the run was last heard of, and that it is idle (ADR 0022, addendum 6).
// No step runs for it, so no pool worker wakes.
func (t *Tracker) notified(stampOnly bool) {
	if !stampOnly {
		t.schedule()
		return
	}
	now := t.cfg.Clock.Now()
	t.mu.Lock()
	first := !t.heard
	t.lastEvent, t.idle, t.heard = now, true, true
	t.mu.Unlock()
	if first && t.cfg.host != nil {
		t.cfg.host.heardLive()
	}
}

// quietNow reports whether an idle event, or a progress not newer than the
// one taken, would change nothing for the tracker after the step that just
// ran: nothing pending (so no failed advance to retry on it), no retry
// armed, no re-assert wanted, no advance parked, no quiet rule (ADR 0014
// reads an idle event's time), no quiet signal waiting, not stopping. Its
// only effect would then be the status's last event and idle flag, which
// notified stamps without a step. Step-owned fields: call it on the step's
// worker.
func (t *Tracker) quietNow() bool {
	return t.pending == nil && t.parked == nil && t.retryStop == nil &&
		!t.wantReassert && !t.retryWanted && t.cfg.Spec.QuietAfter <= 0 && t.quietAt.IsZero() &&
		!t.stopReq.Load() && t.ctx.Err() == nil
}

// schedule submits the tracker for a step unless it is queued already; a
// tracker whose step is running gets another step after it. It never
// blocks: the router calls it for every message.
func (t *Tracker) schedule() {
	t.woken.Store(true)
	t.submit()
}

// submit is schedule without marking the tracker woken: the result of its
// parked advance, which the step that resumes it takes by itself.
func (t *Tracker) submit() {
	for {
		switch s := t.state.Load(); s {
		case stateIdle:
			if t.state.CompareAndSwap(stateIdle, stateQueued) {
				t.pool.submit(t)
				return
			}
		case stateRunning:
			if t.state.CompareAndSwap(stateRunning, stateRerun) {
				return
			}
		default: // new (begin schedules), queued, rerun, exited
			return
		}
	}
}

// runStep runs one step on a pool worker, then queues the tracker again
// when more work came meanwhile, or finishes it when it is done.
func (t *Tracker) runStep() {
	t.state.Store(stateRunning)
	if t.step(t.ctx) {
		t.state.Store(stateExited)
		if t.retryStop != nil {
			t.retryStop()
			t.retryStop = nil
		}
		t.cfg.Box.SetNotify(nil)
		// The held-runs gauge counts live trackers only; the hold's text
		// stays in the status, for the reap (Registry.keepHeldDone).
		if t.heldBy != "" {
			t.cfg.Metrics.HeldRuns.WithLabelValues(t.heldBy).Dec()
			t.heldBy = ""
		}
		t.done.close()
		if t.onExit != nil {
			t.onExit()
		}
		if t.cfg.host != nil {
			t.cfg.host.exited()
		}
		return
	}
	// Before the tracker goes idle: an idle event from here on stamps its
	// status without a step when it would change nothing (quietNow).
	t.cfg.Box.SetQuiet(t.quietNow())
	if !t.state.CompareAndSwap(stateRunning, stateIdle) {
		t.state.Store(stateQueued)
		t.pool.submit(t)
	}
}

// outcome is how a tracker's worker ended.
type outcome struct {
	terminated bool // the run's termination arrived
	applied    bool // and the newest progress after it was applied
	// beforeRewind: that newest progress was done with unapplied, posted
	// before its table's rewind (Tracker.beforeRewind); join says so.
	// Beside the other bools: the Tracker stays in its size class.
	beforeRewind bool
	err          error // why not, when the final catch-up or advance failed
}

// outcome returns how the worker ended; call it after the worker exited.
func (t *Tracker) outcome() outcome { return t.out }

// Failures returns the number of failed advances in a row and the last
// one's error; 0 and nil after a success.
func (t *Tracker) Failures() (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.failures, t.lastErr
}

// activity returns when the tracker last heard its run and whether it is
// done: what the janitor reads of every tracker, without the copy of its
// whole status.
func (t *Tracker) activity() (lastEvent time.Time, done bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.lastEvent, t.done.closed()
}

// Status returns a snapshot of the tracker.
func (t *Tracker) Status() TrackerStatus {
	t.mu.Lock()
	defer t.mu.Unlock()
	s := TrackerStatus{
		QueryID:                t.cfg.QueryID,
		RunID:                  t.cfg.RunID,
		Table:                  t.cfg.Table,
		Spec:                   t.cfg.Spec.String(),
		Written:                t.shownWrite,
		LastEvent:              t.lastEvent,
		NotHeard:               !t.heard,
		Failures:               t.failures,
		Idle:                   t.idle,
		Terminated:             t.terminated,
		Held:                   t.held,
		Quiet:                  t.quiet,
		RowsDroppedByWatermark: t.dropped,
		QueryName:              t.cfg.QueryName,
		Failed:                 t.failed,
		Retired:                t.retired,
		Behind:                 t.behind,
		Sign:                   t.signText,
	}
	if len(t.guards) > 0 {
		s.Guards = make(map[string]int64, len(t.guards))
		for k, v := range t.guards {
			s.Guards[k] = v
		}
	}
	if t.lastErr != nil {
		s.LastError = t.lastErr.Error()
	}
	s.Done = t.done.closed()
	return s
}

// step does what is to be done now: it takes the box's mail, applies the
// newest progress, a quiet signal and a re-assert, and arms a retry when
// an advance failed (RetryDelay, then twice as long, Retries times; then
// the run's next event retries it). It reports whether the tracker is
// done: the run terminated (after the newest progress, and a final
// catch-up from the stream, were applied or their retries ran out), Stop
// was called (after the same), or ctx ended.
func (t *Tracker) step(ctx context.Context) (done bool) {
	if p := t.parked; p != nil {
		if !p.ready.Load() {
			// Its advance waits for its group commit: what came meanwhile
			// (mail, Stop, Reassert) waits for the result.
			return false
		}
		t.parked = nil
		t.resume(ctx, p)
		if done := t.finish(ctx, p.mail, p.stopping); done {
			return true
		}
		if t.woken.Load() {
			// What came since the step that parked began (mail, Stop,
			// Reassert: their wake-ups went to that step or to steps
			// that waited) is taken by a step of its own, after this
			// one. Without a wake-up there is nothing new: a failed
			// advance whose retries are used up waits for the run's
			// next event, as it does without parking.
			t.submit()
		}
		return false
	}
	// This step takes every wake-up so far: the mail, Stop and Reassert
	// are read below.
	t.woken.Store(false)
	if ctx.Err() != nil {
		t.log.Debug("tracker cancelled")
		return true
	}
	if t.retryFired.Swap(false) {
		if t.retryStop != nil {
			t.retryStop() // a hold's other wake-up (holdUntil)
		}
		t.retryStop = nil
	} else if t.retryStop != nil && t.holding && t.stopReq.Load() {
		// A stop ends a hold on the host's word (holdUntil) at once: the
		// held advance is judged again below, and left (retry's giveUp)
		// when it is still held.
		t.retryStop()
		t.retryStop = nil
	} else if t.retryStop != nil {
		// A retry is armed and not due: what came meanwhile (a newer
		// progress, the termination, Stop) waits for it, as it waited
		// while a worker slept through its retries. The box keeps the
		// newest progress.
		return false
	}
	stopping := t.stopReq.Load()
	if t.reassertReq.Swap(false) {
		t.wantReassert = true
	}
	if t.refusedReq.Swap(false) && t.cfg.host != nil {
		if h, ok := t.cfg.host.takeHeldRefusal(); ok {
			t.heldRefused(h)
		}
	}
	t.retryWanted, t.stepErr = false, nil
	mail := t.cfg.Box.Take()
	firstLive := false
	if mail.Progress != nil || mail.Idle || mail.NotNewer || mail.Terminated != nil || mail.Started != nil {
		t.mu.Lock()
		if mail.Heard {
			// An event read from the stream's retained copy (a
			// restart's recovery, a catch-up) was not heard now: the
			// run stays shown as heard of at its last live event, or
			// not since the tracker started (Status.NotHeard).
			firstLive = !t.heard
			t.lastEvent, t.heard = t.cfg.Clock.Now(), true
		}
		t.idle = mail.Progress == nil && (mail.Idle || mail.NotNewer)
		t.terminated = mail.Terminated != nil
		t.failed = mail.Terminated != nil && mail.Terminated.Exception != ""
		t.mu.Unlock()
	}
	if firstLive && t.cfg.host != nil {
		t.cfg.host.heardLive()
	}
	if mail.Started != nil && t.cfg.host != nil {
		t.cfg.host.started(mail.Started.Timestamp, true)
	}
	if mail.Progress != nil && !t.sawProgress {
		t.sawProgress = true
		if t.cfg.host != nil {
			t.cfg.host.started(mail.Progress.Timestamp, false)
		}
	}
	if mail.BatchZero {
		t.batchZero = true
	}
	if mail.Progress != nil {
		t.pending = mail.Progress
		t.pendingHeard, t.pendingSeq = t.heardAt(mail), retainedSeq(mail)
		if t.cfg.Spec.QuietAfter > 0 {
			// Only a quiet move reads it (its provenance); kept for
			// every run, the parsed progress and its offsets cost about
			// a kilobyte per tracked run (issue 12).
			t.last = t.pending
		}
		t.countDropped(t.pending)
		if at, sig, ok := t.cfg.Spec.QuietAt(t.pending); ok {
			t.noteQuiet(at, sig)
		}
		if t.log.enabled(zap.DebugLevel) {
			t.log.Debug("progress taken", zap.Int64("batch_id", t.pending.BatchID), zap.Time("timestamp", t.pending.Timestamp))
		}
	}
	if (mail.Idle || mail.NotNewer) && t.log.enabled(zap.DebugLevel) {
		t.log.Debug("idle event or a progress not newer: a chance to retry", zap.Bool("idle_event", mail.Idle), zap.Bool("retry", t.pending != nil))
	}
	if !mail.IdleAt.IsZero() && t.cfg.Spec.QuietAfter > 0 {
		t.noteQuiet(mail.IdleAt, progress.SignalIdleEvent)
	}
	if t.pending != nil {
		before := t.lastAdv
		t.mayPark = true
		applied := t.apply(ctx, t.pending)
		t.mayPark = false
		if p := t.parked; p != nil {
			// The advance waits for its group commit without holding this
			// worker: resume finishes the apply, finish the rest.
			p.before, p.mail, p.stopping = before, mail, stopping
			return false
		}
		if applied {
			t.pending = nil
		}
		if t.lastAdv != before {
			t.wantReassert = false // it just wrote, beyond the last advance
		}
	}
	return t.finish(ctx, mail, stopping)
}

// finish is the rest of a step once the newest progress is applied (or
// its advance failed): a quiet signal, a re-assert, the retry, the run's
// termination and a stop. mail is what the step took.
func (t *Tracker) finish(ctx context.Context, mail listener.Mail, stopping bool) (done bool) {
	if !t.quietAt.IsZero() && ctx.Err() == nil {
		t.applyQuiet(ctx)
	}
	if t.wantReassert && t.pending == nil && ctx.Err() == nil {
		t.wantReassert = !t.reassertLast(ctx)
		t.retryWanted = t.retryWanted || t.wantReassert
	}
	if t.retry(ctx) {
		return false // the termination or the stop waits for the retry
	}
	if mail.Terminated != nil {
		if ctx.Err() == nil && t.stepErr == nil {
			t.pending = t.finalCatchUp(ctx, t.pending)
			if t.retry(ctx) {
				return false
			}
		}
		t.out = outcome{terminated: true, applied: t.pending == nil && t.out.err == nil, err: t.out.err,
			beforeRewind: t.heldBy == outcomeBeforeRewind && !t.heldByQuiet}
		if t.pending != nil && t.out.err == nil {
			_, t.out.err = t.Failures()
		}
		t.logSampled(zapcore.InfoLevel, "terminated", "run terminated; tracker done",
			zap.Bool("pending_failed", t.pending != nil),
			zap.String("error_class", mail.Terminated.ErrorClass),
			zap.Bool("with_exception", mail.Terminated.Exception != ""))
		t.retireOnTermination(ctx, mail.Terminated.Exception != "")
		return true
	}
	if stopping || ctx.Err() != nil {
		t.log.Debug("tracker stopped", zap.Bool("pending_failed", t.pending != nil))
		return true
	}
	return false
}

// retry handles what this step's failures ask for. When an advance or a
// re-assert failed and the retries of the streak are not used up, it arms
// the retry timer (RetryDelay, then twice as long) unless it is armed
// already, and reports true: the step waits for it. When they are used up,
// the failed advance is recorded (fail: logged, counted) and left to the
// run's next event, and the streak starts again. After a step without a
// failure the streak is over.
func (t *Tracker) retry(ctx context.Context) bool {
	if ctx.Err() != nil {
		return false
	}
	if !t.retryWanted {
		t.retries = 0
		if t.retryStop != nil {
			t.retryStop()
			t.retryStop = nil
		}
		return false
	}
	if t.retryStop != nil {
		return true // armed by an earlier step; this one came early
	}
	if errors.Is(t.stepErr, errRewindsPending) && !t.stopReq.Load() && t.cfg.host != nil {
		// Held until the tables' rewinds are read again: nothing failed,
		// and the read takes one statement. The step comes again as soon
		// as it ended, not after a retry's delay (which took a second from
		// every tracker's verdict after each reconnect of the control
		// database's LISTEN connection); not a retry, not counted as one.
		// The retry's longest delay still bounds the hold (a stop
		// meanwhile is then seen in the same time as before).
		t.log.Debug("advance held until the tables' rewinds are read again")
		t.holdUntil(t.cfg.host.afterRereads, t.cfg.RetryDelay<<max(t.cfg.Retries-1, 0))
		return true
	}
	// An advance held for a new feeder's join (errJoinPending) is
	// retried until it joined, at the last delay once the retries are
	// used: the lock may be held for hours, and the run's next event may
	// be as far. A stopping tracker's is not: it gets the usual retries,
	// then is left to the run's retained progress (a shutdown keeps the
	// table pending, so its stop never sends it; see joinLater).
	pending := (errors.Is(t.stepErr, errJoinPending) || errors.Is(t.stepErr, errRewindsPending)) && !t.stopReq.Load()
	// A stopping tracker's advance held for the re-read of the rewinds is
	// left at once: at shutdown the re-read ends unread, and the run's
	// retained progress is judged again by the next start's recovery. So
	// is one held for a join when the registry closes: the table stays
	// pending through the shutdown (markJoinPending), and no retry could
	// send it. A stop of one tracker (superseded, expired) keeps the
	// usual retries for a join.
	giveUp := t.stopReq.Load() && (errors.Is(t.stepErr, errRewindsPending) ||
		(errors.Is(t.stepErr, errJoinPending) && t.cfg.host != nil && t.cfg.host.closing()))
	if giveUp {
		t.retries = 0
		t.logSampled(zapcore.InfoLevel, "held-at-stop", "tracker stopped with its advance held (the tables' rewinds being read again, or a feeder's join); the run's retained progress is judged again at the next start",
			zap.NamedError("held_by", t.stepErr), zap.Time("candidate", t.stepCand.Until))
		t.retryWanted, t.stepErr = false, nil
		return false
	}
	if t.retries < t.cfg.Retries || pending {
		d := t.cfg.RetryDelay << min(t.retries, max(t.cfg.Retries-1, 0))
		if t.retries < t.cfg.Retries {
			t.retries++
		}
		t.cfg.Metrics.Retries.Inc()
		if t.stepErr != nil {
			t.log.Debug("advance failed; retrying", zap.Error(t.stepErr), zap.Duration("in", d))
		}
		if pending && t.cfg.host != nil && errors.Is(t.stepErr, errJoinPending) {
			// And at once when the table's joins end: the lock that held
			// them may go at any moment, and the delay reaches 2 s.
			t.holdUntil(t.cfg.host.afterJoins, d)
			return true
		}
		t.holding = false
		t.retryStop = t.cfg.Clock.AfterFunc(d, func() {
			t.retryFired.Store(true)
			t.schedule()
		})
		return true
	}
	t.retries = 0
	if t.stepErr != nil {
		t.fail(t.stepErr, t.stepCand)
	}
	t.retryWanted, t.stepErr = false, nil
	return false
}

// holdUntil arms the step's wake-up for an advance held on the host's
// word (a re-read of the rewinds, a feeder's join): when wait calls back
// (the hold ended), or after d at the latest, whichever comes first.
func (t *Tracker) holdUntil(wait func(fn func()) (stop func() bool), d time.Duration) {
	var fired atomic.Bool
	fire := func() {
		if fired.CompareAndSwap(false, true) {
			t.retryFired.Store(true)
			t.schedule()
		}
	}
	t.holding = true
	stopTimer := t.cfg.Clock.AfterFunc(d, fire)
	stopWait := wait(fire)
	t.retryStop = func() bool {
		w, tm := stopWait(), stopTimer()
		return w || tm
	}
}

// retireOnTermination retires the query from the table's feeders when the
// rule says so and the run ended cleanly; a failed run keeps holding the
// table (ADR 0015). A retirement that still fails after the tracker's
// retries is logged with what the operator does instead.
func (t *Tracker) retireOnTermination(ctx context.Context, failed bool) {
	if t.cfg.Retire == nil {
		return
	}
	if failed {
		t.log.Warn("run failed; its query stays a feeder of the table and holds it until it runs again or an operator retires it (finalizer feeders retire)")
		return
	}
	op := func() error {
		rctx, cancel := context.WithTimeout(ctx, t.cfg.AdvanceTimeout)
		defer cancel()
		err := t.cfg.Retire(rctx, "clean termination of run "+t.cfg.RunID)
		if err != nil && (ctx.Err() != nil || errors.Is(err, errStillWriting)) {
			return backoff.Permanent(err)
		}
		return err
	}
	err := backoff.RetryNotifyWithTimer(op, backoff.WithContext(t.backoff(), ctx), nil, t.cfg.Clock.NewTimer())
	if errors.Is(err, errStillWriting) {
		t.log.Info("run terminated cleanly, but another run of its query is tracked into the table: not retired")
		return
	}
	if err != nil {
		t.log.Error("could not retire the query from the table's feeders after its clean termination; it holds the table until retired with finalizer feeders retire",
			zap.Error(err))
		return
	}
	t.mu.Lock()
	t.retired = true
	t.mu.Unlock()
	t.logSampled(zapcore.InfoLevel, "retired", "run terminated cleanly; its query is retired from the table's feeders")
}

// heardAt is when mail's progress was heard live: now; or, when it may
// come from the stream's retained copy (a catch-up, a restart's
// recovery), minus when the stream stored it, 0 when that is not known
// (see Tracker.pendingHeard).
func (t *Tracker) heardAt(mail listener.Mail) int64 {
	if mail.ProgressRetained {
		return -mail.ProgressStored
	}
	if mail.ProgressHeard > 0 {
		// Heard before it was handed over (a run that waited for its
		// decision): judged by when it was heard.
		return mail.ProgressHeard
	}
	return t.cfg.Clock.Now().UnixNano()
}

// retainedSeq is the stream sequence of mail's progress when it may come
// from the stream's retained copy, 0 otherwise or when not known (see
// Tracker.pendingSeq).
func retainedSeq(mail listener.Mail) uint64 {
	if mail.ProgressRetained {
		return mail.ProgressSeq
	}
	return 0
}

// finalCatchUp reads the run's retained events once more after its
// termination and applies a newer progress it finds; it returns the
// progress still not applied, and notes a failed catch-up in t.out.err.
func (t *Tracker) finalCatchUp(ctx context.Context, pending *progress.Event) *progress.Event {
	if t.cfg.host == nil {
		return pending
	}
	cctx, cancel := context.WithTimeout(ctx, t.cfg.AdvanceTimeout)
	ok, err := t.cfg.host.catchUp(cctx)
	cancel()
	if !ok {
		return pending
	}
	if err != nil {
		t.out.err = fmt.Errorf("final catch-up from the stream: %w", err)
		t.log.Warn("could not read the run's retained events after its termination; a progress posted just before it may be missing",
			zap.Error(err))
	}
	if mail := t.cfg.Box.Take(); mail.Progress != nil {
		t.log.Debug("progress taken at the final catch-up", zap.Int64("batch_id", mail.Progress.BatchID))
		pending = mail.Progress
		// Pending from here on (the caller keeps what this returns):
		// beforeRewind judges it by pendingHeard.
		t.pending, t.pendingHeard, t.pendingSeq = pending, t.heardAt(mail), retainedSeq(mail)
		if t.apply(ctx, pending) {
			pending = nil
		}
	}
	return pending
}

// apply advances the verdict from ev when its candidate is later than the
// last one written. It reports whether ev is done with: written, not
// needed, or without a usable time. It returns false when the advance
// failed after its retries, so that the next event retries it.
func (t *Tracker) apply(ctx context.Context, ev *progress.Event) bool {
	m := t.cfg.Metrics
	t.heldByQuiet = false
	// Read before the progress is judged against the rewinds: a rewind
	// known after this read is either judged below or refuses the
	// advance in the statement.
	guard := t.knownRewind()
	t.checkRewound()
	if t.beforeRewind(ev) {
		return true
	}
	t.checkReset(ctx, ev)
	cand, outcome, why := t.cfg.Spec.Evaluate(ev)
	if outcome != progress.OK {
		t.hold(outcome.String(), why, ev)
		return true
	}
	if cand.Time.Before(minTime) {
		// A placeholder (0001-01-01, -1 ms), not a commit time: it would
		// declare nothing, and the zero time cannot even be written.
		t.hold(progress.NoTime.String(), "the time "+cand.Time.Format(time.RFC3339Nano)+" is before 1970", ev)
		return true
	}
	now := t.cfg.Clock.Now()
	if limit := now.Add(t.cfg.FutureSkew); cand.Time.After(limit) {
		// Doubt is "not yet": a time this far ahead of the clock is a bad
		// clock or a bad value, and says nothing about the data.
		t.hold(guardFuture, fmt.Sprintf("the time %s is more than future_skew (%s) ahead of this service's clock (%s)",
			cand.Time.Format(time.RFC3339Nano), t.cfg.FutureSkew, now.UTC().Format(time.RFC3339)), ev)
		return true
	}
	// A period that has not ended by the service's clock minus the delay
	// is never final, whatever time the progress carries.
	if limit := progress.Floor(now.Add(-t.cfg.Spec.Delay), t.cfg.Spec.Granularity, t.cfg.Spec.Location); cand.Until.After(limit) {
		m.candidate("clamped").Inc()
		t.log.Debug("progress time is ahead of this service's clock; the candidate stops at the period the clock is in",
			zap.Time("time", cand.Time), zap.Time("until", limit), zap.Int64("batch_id", ev.BatchID))
		cand.Until = limit
	}
	t.setHeld("")
	t.checkSource(ctx, ev)
	t.checkBehind(ctx, ev, cand)
	known := t.hist.known
	if !t.write(ctx, cand, ev, guard) {
		if t.parked != nil {
			t.parked.known = known
		}
		return false
	}
	t.wroteFirst(ctx, known, cand, ev)
	return true
}

// wroteFirst checks cand against the first verdict this tracker saw, once
// a write taught it that verdict (known: whether it knew one before).
func (t *Tracker) wroteFirst(ctx context.Context, known bool, cand progress.Candidate, ev *progress.Event) {
	if !known && t.hist.known && !t.movedLast {
		// The first verdict this tracker saw: its candidate is checked
		// against it too.
		t.checkSource(ctx, ev)
		t.checkBehind(ctx, ev, cand)
	}
}

// write advances the verdict to cand when it is later than the last one
// written; ev gives the provenance, guard the table's rewind known before
// the candidate was judged (knownRewind). It reports false when the
// advance failed after its retries; true when it was written, not
// needed, or refused because the table was rewound since (then dropped,
// and the tracker learnt the rewind: refusedByRewind).
func (t *Tracker) write(ctx context.Context, cand progress.Candidate, ev *progress.Event, guard control.RewindGuard) bool {
	m := t.cfg.Metrics
	if !t.written.IsZero() && !cand.Until.After(t.written) {
		m.candidate("same_period").Inc()
		return true
	}
	if t.cfg.QueryName == "" && ev.Name != "" && len(ev.Name) <= MaxQueryNameLen {
		// An explicit track names no query; its progress does. The name
		// goes with the advance, so that the feeder's row has it (and an
		// expected feeder of that name is resolved), as a discovered
		// run's does. Copied once: the event's strings are slices of its
		// document.
		t.mu.Lock()
		t.cfg.QueryName = strings.Clone(ev.Name)
		t.mu.Unlock()
		t.named = t.cfg.host != nil
	}
	adv := control.Advance{
		Table:          t.cfg.Table,
		FinalizedUntil: cand.Until,
		EndTime:        cand.Time,
		EndOffset:      cand.EndOffset,
		QueryID:        ev.QueryID,
		QueryName:      t.cfg.QueryName,
		RunID:          ev.RunID,
		BatchID:        ev.BatchID,
		Sources:        descriptions(ev),
		Guard:          guard,
	}
	// Detached once, here: the tracker keeps it for a re-assert and
	// ownership keeps it as the feeder's held advance, both without the
	// progress's buffers and sharing one copy; its ids are the tracker's
	// own and its sources the last advance's when unchanged (issue 12).
	like := t.lastAdv
	if like == nil {
		like = &control.Advance{QueryID: t.cfg.QueryID, RunID: t.cfg.RunID}
	}
	adv = adv.DetachedLike(like)
	if t.cfg.host != nil && t.cfg.host.joinPending() {
		// Checked before the advance is sent, after the candidate: an
		// advance sent before the wait began is one made before the
		// new feeder was known, as without a lock.
		return t.wrote(ctx, adv, cand, ev, control.Verdict{}, false, errJoinPending)
	}
	if t.cfg.host != nil && t.cfg.host.rewindsPending() {
		// Sent only once a re-read of the rewinds asked before it ended:
		// a rewind it finds holds this progress when it was taken
		// before (its retry is judged again, rewindAt).
		return t.wrote(ctx, adv, cand, ev, control.Verdict{}, false, errRewindsPending)
	}
	if t.mayPark {
		if as, ok := t.cfg.Store.(asyncStore); ok {
			// Nothing waits for a group and a slot is free: this step
			// sends its advance itself instead of waking a committer
			// (ADR 0008, addendum "the first advancer leads"), and
			// finishes as the blocking call does.
			began := time.Now()
			if r, led := as.lead(ctx, adv); led {
				t.cfg.Metrics.AdvanceSeconds.Observe(time.Since(began).Seconds())
				return t.wrote(ctx, adv, cand, ev, r.Verdict, r.Moved, r.Err)
			}
			t.park(ctx, as, adv, cand, ev)
			return false
		}
	}
	verdict, moved, err := t.advance(ctx, adv)
	return t.wrote(ctx, adv, cand, ev, verdict, moved, err)
}

// wrote records the result of the advance adv of cand (from ev) and
// reports whether it succeeded.
func (t *Tracker) wrote(ctx context.Context, adv control.Advance, cand progress.Candidate, ev *progress.Event,
	verdict control.Verdict, moved bool, err error) bool {
	if errors.Is(err, control.ErrBeforeRewind) {
		t.refusedByRewind(verdict, cand, ev)
		return true
	}
	if err != nil {
		if ctx.Err() != nil {
			t.log.Warn("advance abandoned at shutdown; the run's retained progress re-applies it on the next start",
				zap.Time("candidate", cand.Until))
			return false
		}
		t.retryWanted, t.stepErr, t.stepCand = true, err, cand
		return false
	}
	// The advance is kept for a re-assert: write detached it from the
	// progress's buffers, which it would keep alive.
	t.lastAdv = &adv
	if t.named && adv.QueryName != "" {
		// A solo table's advance wrote its own row only: the feeder's
		// row gets the name the advance carried.
		t.named = false
		t.cfg.host.namedFeeder(adv.QueryName)
	}
	t.succeed(verdict, moved, cand, ev)
	t.movedLast = moved
	return true
}

// parked is a step's advance handed to the group commit (ADR 0008,
// addendum): the step returned, freeing its worker, and the tracker's
// next step resumes with the result. The fields up to res are the step's,
// set before the tracker can run again; res is set by the committer
// before ready.
type parked struct {
	adv    control.Advance
	cand   progress.Candidate
	ev     *progress.Event
	known  bool             // t.hist.known before the write
	before *control.Advance // t.lastAdv before the apply
	mail   listener.Mail    // what the step took, for the rest of it
	// stopping is whether Stop had been called when the step began.
	stopping bool
	began    time.Time

	res   control.AdvanceResult
	ready atomic.Bool
}

// park hands adv to s and records it in t.parked; the result schedules
// the tracker, whose next step resumes the write. The advance's wait for
// its group has no deadline: the group commit bounds each statement by
// AdvanceTimeout, so the queue always drains, and a deadline on the wait
// failed the advances at the back of a big queue (100,000 first verdicts
// at once) that no statement had failed, and sent them to the back again
// as retries. The advance carries the tracker's own context (it is not
// sent once that ends: shutdown), not a child of it: a child per parked
// advance registered itself with the registry's context, which every
// tracker shares, under that context's one lock (10,000 children at a
// boundary of 10,000 tables).
func (t *Tracker) park(ctx context.Context, s asyncStore, adv control.Advance, cand progress.Candidate, ev *progress.Event) {
	p := &parked{adv: adv, cand: cand, ev: ev, began: time.Now()}
	t.parked = p
	s.advanceAsync(ctx, adv, func(r control.AdvanceResult) {
		p.res = r
		p.ready.Store(true)
		t.submit()
	})
}

// resume finishes the apply of a parked advance with its result: what
// write and apply do after the advance returns, and what the step does
// after apply.
func (t *Tracker) resume(ctx context.Context, p *parked) {
	t.cfg.Metrics.AdvanceSeconds.Observe(time.Since(p.began).Seconds())
	if t.wrote(ctx, p.adv, p.cand, p.ev, p.res.Verdict, p.res.Moved, p.res.Err) {
		t.wroteFirst(ctx, p.known, p.cand, p.ev)
		if t.pending == p.ev {
			t.pending = nil
		}
	}
	if t.lastAdv != p.before {
		t.wantReassert = false // it just wrote, beyond the last advance
	}
}

// advance runs one advance statement. A failure is retried by the step
// (retry), not here: a tracker never sleeps on a worker.
func (t *Tracker) advance(ctx context.Context, adv control.Advance) (control.Verdict, bool, error) {
	actx, cancel := context.WithTimeout(ctx, t.cfg.AdvanceTimeout)
	defer cancel()
	began := time.Now()
	v, moved, err := t.cfg.Store.Advance(actx, adv)
	t.cfg.Metrics.AdvanceSeconds.Observe(time.Since(began).Seconds())
	return v, moved, err
}

// reassertLast writes the last advance again and reports whether that is
// done with (written, or nothing to re-assert).
func (t *Tracker) reassertLast(ctx context.Context) bool {
	t.checkRewound()
	if t.lastAdv == nil || t.rewoundSinceWrite(ctx) {
		return true
	}
	m := t.cfg.Metrics
	v, moved, err := t.advance(ctx, *t.lastAdv)
	switch {
	case errors.Is(err, control.ErrBeforeRewind):
		// Its write came before a rewind this tracker had not heard of:
		// re-asserting it would undo the rewind, and the statement
		// refused it. Learnt as a heard rewind is.
		m.Reasserts.WithLabelValues("unchanged").Inc()
		t.log.Info("re-assert of the last write refused: the table was rewound since; not re-asserted",
			zap.Time("last_write", t.lastAdv.FinalizedUntil), zap.Time("rewound_at", v.RewoundAt))
		t.learnRewind(v)
		t.endFailing("the re-assert was answered by the control table (refused: the table was rewound since)")
		return true
	case err != nil:
		m.Reasserts.WithLabelValues("failed").Inc()
		if ctx.Err() == nil {
			t.logSampled(zapcore.WarnLevel, "reassert-failed", "re-assert of the last verdict failed; retried",
				zap.Time("finalized_until", t.lastAdv.FinalizedUntil), zap.Error(err))
		}
		return false
	case moved:
		m.Reasserts.WithLabelValues("restored").Inc()
		m.Writes.Inc()
		m.Advances.Inc()
		m.ObserveVerdict(t.cfg.Table, v.FinalizedUntil)
		t.log.Warn("verdict restored: the control database had lost this tracker's last write (a failover from a standby that was behind?)",
			zap.Time("finalized_until", v.FinalizedUntil), zap.Int64("batch_id", t.lastAdv.BatchID))
	default:
		m.Reasserts.WithLabelValues("unchanged").Inc()
		m.Writes.Inc()
		t.log.Debug("re-assert: verdict already at or past the last write",
			zap.Time("finalized_until", v.FinalizedUntil), zap.Time("last_write", t.lastAdv.FinalizedUntil))
	}
	return true
}

// noteQuiet records that the source was caught up at at (by signal),
// when that is newer than what is pending.
func (t *Tracker) noteQuiet(at time.Time, signal string) {
	if at.After(t.quietAt) {
		t.quietAt, t.quietSig = at, signal
	}
}

// applyQuiet advances the verdict to floor(T - quiet.after - delay) for the
// pending quiet time T, capped by the service's clock, when that is later
// than what was written (ADR 0014). A failed advance stays pending for the
// next event.
func (t *Tracker) applyQuiet(ctx context.Context) {
	at, sig := t.quietAt, t.quietSig
	if (t.heldBy == progress.Implausible.String() || t.heldBy == guardFuture) && !t.heldByQuiet {
		// The newest progress's time is doubt: no quiet move on top of it.
		t.log.Debug("quiet signal not used while the newest progress is held", zap.String("guard", t.heldBy))
		return
	}
	guard := t.knownRewind() // before the judgment, as in apply
	if t.quietBeforeRewind(at, sig) {
		t.quietAt, t.quietSig = time.Time{}, ""
		return
	}
	now := t.cfg.Clock.Now()
	if limit := now.Add(t.cfg.FutureSkew); at.After(limit) {
		// A time this far ahead is a bad clock or a bad value: it says
		// nothing about when the source was caught up. Capping it at the
		// clock would date a replayed or late-delivered signal at its
		// arrival, after rows the source may have had since.
		t.quietAt, t.quietSig = time.Time{}, ""
		ev := t.last
		if ev == nil {
			ev = &progress.Event{Kind: progress.KindIdle, QueryID: t.cfg.QueryID, RunID: t.cfg.RunID, BatchID: -1}
		}
		t.hold(guardFuture, fmt.Sprintf("the quiet signal's (%s) time %s is more than future_skew (%s) ahead of this service's clock (%s)",
			sig, at.UTC().Format(time.RFC3339Nano), t.cfg.FutureSkew, now.UTC().Format(time.RFC3339)), ev)
		t.heldByQuiet = true // a later sound signal may still move it
		return
	}
	if t.heldByQuiet && t.heldBy == outcomeBeforeRewind {
		// A sound signal from after the rewind: the run is held no more,
		// whether or not it moves the verdict.
		t.heldByQuiet = false
		t.setHeld("")
	}
	if at.After(now) {
		// Within future_skew: the driver's clock is a little ahead; the
		// signal arrived now, so the source was caught up by now.
		t.log.Debug("quiet signal ahead of this service's clock; capped", zap.String("signal", sig), zap.Time("at", at), zap.Time("now", now))
		at = now
	}
	until := t.cfg.Spec.QuietUntil(at)
	if until.IsZero() || until.Before(minTime) || (!t.written.IsZero() && !until.After(t.written)) {
		t.quietAt, t.quietSig = time.Time{}, ""
		return
	}
	ev := t.last
	var end []byte
	if ev == nil {
		ev = &progress.Event{Kind: progress.KindIdle, QueryID: t.cfg.QueryID, RunID: t.cfg.RunID, BatchID: -1}
	} else if c, ok := t.cfg.Spec.Candidate(ev); ok {
		end = c.EndOffset
	}
	cand := progress.Candidate{Until: until, Time: at.Add(-t.cfg.Spec.QuietAfter).UTC(), Source: t.cfg.Spec.Source, EndOffset: end}
	if !t.write(ctx, cand, ev, guard) {
		return
	}
	t.quietAt, t.quietSig = time.Time{}, ""
	if t.written.IsZero() {
		return // refused: the table was rewound since the signal was judged (refusedByRewind)
	}
	if !t.written.Equal(until) && t.written.After(until) {
		return // another writer was already past it
	}
	t.cfg.Metrics.quietAdvance(sig).Inc()
	t.mu.Lock()
	t.quiet = &QuietMove{Signal: sig, At: at.UTC(), Until: until}
	t.mu.Unlock()
	if t.heldByQuiet {
		t.heldByQuiet = false
		t.setHeld("")
	}
	t.logSampled(zapcore.InfoLevel, "quiet-move", "verdict moved because the source was quiet",
		zap.String("signal", sig), zap.Time("caught_up_at", at), zap.Duration("quiet_after", t.cfg.Spec.QuietAfter), zap.Time("finalized_until", until))
}

// guardFuture is the outcome of a time beyond the clock plus future_skew.
const guardFuture = "future"

// hold records that ev gave no candidate because of guard: counted in the
// metrics and the run's status, logged at WARN the first time a guard that
// asks for the user's attention holds this run, at debug after that.
func (t *Tracker) hold(guard, why string, ev *progress.Event) {
	t.setHeld(guard)
	t.mu.Lock()
	t.held = guard + ": " + why
	if t.guards == nil {
		t.guards = make(map[string]int64)
	}
	t.guards[guard]++
	t.mu.Unlock()
	// Counted once the status shows it: who sees the count sees the why.
	t.cfg.Metrics.candidate(guard).Inc()
	if t.warned == nil {
		t.warned = make(map[string]bool)
	}
	first := !t.warned[guard]
	t.warned[guard] = true
	switch {
	case first && guard == progress.NotExecuted.String():
		t.logSampled(zapcore.InfoLevel, "hold:"+guard, "a progress of a trigger that ran no batch; its watermark is not used (logged once per run)",
			zap.String("guard", guard), zap.Int64("batch_id", ev.BatchID))
	case first && guard == progress.NoTime.String() && why != progress.NoWatermarkYet:
		// A progress without a usable time is most often a spec that does
		// not fit the source (offset:/commit_ts on a Kafka source): say so
		// once, or the run sits "running" with a verdict that never moves.
		t.logSampled(zapcore.WarnLevel, "hold:"+guard, "progress has no usable time; the verdict waits: check the tracking spec's time and source against the progress (logged once per run)",
			zap.String("guard", guard), zap.String("reason", why), zap.Stringer("spec", &t.cfg.Spec), zap.Int64("batch_id", ev.BatchID))
	case first && guard != progress.NoTime.String():
		t.logSampled(zapcore.WarnLevel, "hold:"+guard, "progress gives no candidate; the verdict waits (logged once per run and guard)",
			zap.String("guard", guard), zap.String("reason", why), zap.Int64("batch_id", ev.BatchID))
	default:
		if t.log.enabled(zap.DebugLevel) {
			t.log.Debug("progress gives no candidate", zap.String("guard", guard), zap.String("reason", why), zap.Int64("batch_id", ev.BatchID))
		}
	}
}

// setHeld moves this tracker in the held-runs gauge to guard ("" = not
// held). Worker goroutine only.
func (t *Tracker) setHeld(guard string) {
	if guard == t.heldBy {
		return
	}
	if t.heldBy != "" {
		t.cfg.Metrics.HeldRuns.WithLabelValues(t.heldBy).Dec()
	}
	if guard != "" {
		t.cfg.Metrics.HeldRuns.WithLabelValues(guard).Inc()
	} else {
		t.mu.Lock()
		t.held = ""
		t.mu.Unlock()
	}
	t.heldBy = guard
}

// countDropped adds a newly taken progress's rows dropped by the
// watermark to the run's status and the table's counter.
func (t *Tracker) countDropped(ev *progress.Event) {
	n := ev.RowsDroppedByWatermark()
	if n <= 0 {
		return
	}
	t.mu.Lock()
	t.dropped += n
	t.mu.Unlock()
	if t.droppedRows == nil {
		t.droppedRows = t.cfg.Metrics.droppedRows(t.cfg.Table)
	}
	t.droppedRows.Add(n)
}

// backoff is the tracker's retry schedule: RetryDelay, then twice as
// long, Retries times.
func (t *Tracker) backoff() backoff.BackOff {
	if t.cfg.Retries <= 0 {
		return &backoff.StopBackOff{}
	}
	exp := backoff.NewExponentialBackOff(
		backoff.WithInitialInterval(t.cfg.RetryDelay),
		backoff.WithMultiplier(2),
		backoff.WithRandomizationFactor(0),
		backoff.WithMaxInterval(time.Hour),
		backoff.WithMaxElapsedTime(0),
		backoff.WithClockProvider(t.cfg.Clock),
	)
	return backoff.WithMaxRetries(exp, uint64(t.cfg.Retries))
}

func (t *Tracker) fail(err error, cand progress.Candidate) {
	m := t.cfg.Metrics
	m.FailedAdvances.Inc()
	t.mu.Lock()
	t.failures++
	t.lastErr = err
	n := t.failures
	t.mu.Unlock()
	now := t.cfg.Clock.Now().UnixNano()
	switch {
	case n == 1:
		t.lastWarn = now
		t.logSampled(zapcore.ErrorLevel, "advance-failed", "advance failed; the run's next event retries it",
			zap.Error(err), zap.Time("candidate", cand.Until), zap.Int("retries", max(t.cfg.Retries, 0)))
	case time.Duration(now-t.lastWarn) >= t.cfg.WarnEvery:
		t.lastWarn = now
		t.logSampled(zapcore.WarnLevel, "advance-failing", "advance still failing",
			zap.Error(err), zap.Int("failures_in_a_row", n), zap.Time("candidate", cand.Until))
	}
}

func (t *Tracker) succeed(v control.Verdict, moved bool, cand progress.Candidate, ev *progress.Event) {
	m := t.cfg.Metrics
	m.Writes.Inc()
	// The feeder's own watermark is at or past cand.Until now. The
	// table's verdict says nothing about it: another feeder may hold the
	// table behind, or this query may have joined behind the table; its
	// next periods are written all the same (ADR 0015).
	t.learn(v)
	t.written = cand.Until
	t.mu.Lock()
	failures := t.failures
	t.failures, t.lastErr = 0, nil
	t.shownWrite = t.written
	t.mu.Unlock()
	if failures > 0 {
		t.logSampled(zapcore.InfoLevel, "advance-recovered", "advance succeeded again", zap.Int("failures_before", failures))
	}
	if !v.FinalizedUntil.IsZero() {
		m.ObserveVerdict(t.cfg.Table, v.FinalizedUntil)
	}
	if moved {
		m.Advances.Inc()
		m.candidate("advanced").Inc()
		// The fields are made only for a line that is written: a verdict
		// moves at every crossing, and its line mostly goes to a DEBUG
		// that is off (issue 12: 192 bytes a crossing otherwise).
		if lvl, n := t.sample(zapcore.InfoLevel, "moved"); t.log.enabled(lvl) {
			t.logAt(lvl, n, "verdict moved", zap.Time("finalized_until", v.FinalizedUntil),
				zap.Time("end_time", cand.Time), zap.Int64("batch_id", ev.BatchID))
		}
		return
	}
	m.candidate("unchanged").Inc()
	t.log.Debug("verdict already at or past candidate",
		zap.Time("candidate", cand.Until), zap.Time("finalized_until", v.FinalizedUntil))
}

// logSampled logs msg at lvl, or at DEBUG when the registry's sampler has
// let a line of the same class through within its interval: at 100,000
// runs a line per run or per verdict move would bury the ones that
// matter. The line that goes through says how many of its class went to
// DEBUG since the last one (suppressed).
func (t *Tracker) logSampled(lvl zapcore.Level, class, msg string, fields ...zap.Field) {
	lvl, n := t.sample(lvl, class)
	t.logAt(lvl, n, msg, fields...)
}

// sample returns the level a line of class is logged at (lvl, or DEBUG
// when the sampler holds it back) and how many of its class the sampler
// held back since the last one let through; it counts the line as the
// sampler's.
func (t *Tracker) sample(lvl zapcore.Level, class string) (zapcore.Level, int) {
	if t.cfg.sampler == nil {
		return lvl, 0
	}
	ok, n := t.cfg.sampler.Allow(lvl, class)
	if !ok {
		return zapcore.DebugLevel, 0
	}
	return lvl, n
}

// logAt logs what sample decided: msg at lvl, saying how many lines of
// its class were suppressed when n > 0.
func (t *Tracker) logAt(lvl zapcore.Level, n int, msg string, fields ...zap.Field) {
	if n > 0 {
		fields = append(fields, zap.Int("suppressed", n))
	}
	t.log.log(lvl, msg, fields)
}
