// Package memlimit sets the process's soft memory limit
// (debug.SetMemoryLimit) from what it holds: the live heap, what the
// runtime holds beside it, and the tracked runs (ADR 0022, addendum).
//
// With the Go runtime's default (GOGC=100 and no limit) the heap may grow
// to twice what is live before a collection, and the freed pages go back
// to the operating system slowly: a service that holds 100,000 tracked runs
// shows about twice their memory as its resident set. A limit a little
// above what is live makes the collector run before the heap doubles and
// the scavenger return freed pages at once. Set too close (below what is
// live), the collector runs on every allocation; the limit here therefore
// follows the live heap as measured by the last collection, with a
// headroom proportional to it and a floor, and is recomputed as the tracked
// runs change.
//
// An operator's GOMEMLIMIT always wins: when the variable is set the
// limiter does nothing.
package memlimit

import (
	"math"
	"os"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"
)

// Defaults of Options.
const (
	// DefaultFloor is the lowest limit set: below it the collector's
	// default pacing is left alone, which costs little memory anyway.
	DefaultFloor = 64 << 20
	// DefaultHeadroom is the share of the live heap the heap may grow by
	// before a collection. GOGC=100 lets it grow by 1.0 (and counts
	// neither the free pages not yet returned nor the rest of the
	// runtime, which the limit does): 0.5 measured 0.68 of the resident
	// set at 1.08 times the CPU at 10,000 runs, with a collection about
	// twice as often (BENCHMARKS.md, "The memory limit").
	DefaultHeadroom = 0.5
	// DefaultMinHeadroom is the least growth allowed above the live heap,
	// so that a small heap is not collected on every few allocations. It
	// binds below 128 MiB live (about 30,000 runs), where GOGC=100's own
	// goal (twice what is live) is the nearer one up to 64 MiB live: from
	// there to 128 MiB the limit lets the heap grow by 64 MiB, not half of
	// what is live. 32 MiB collected about twice as often at 10,000 runs,
	// and the collections' marks are the latency tail (BENCHMARKS.md, "The
	// latency tail (sixth pass)"; ADR 0022, addendum 9); at 100,000 runs
	// half the live heap is the larger, as before. 128 MiB (with GOGC=400,
	// so that GOGC's own goal does not bind first) halved the marks at
	// 10,000 runs but moved the p99 within the rounds' noise (0.93-0.95)
	// for 13-25% more resident memory per run: not taken (BENCHMARKS.md,
	// "The latency tail at 10,000 runs, by hop").
	DefaultMinHeadroom = 64 << 20
	// DefaultPerRun is the least live heap assumed per tracked run, so
	// that the limit grows at once when many runs are tracked between two
	// collections (the live heap is only measured by a collection).
	DefaultPerRun = 4 << 10
	// DefaultEvery is how often the limit is recomputed for the tracked
	// runs; it is also recomputed after every collection.
	DefaultEvery = time.Second
	// MeasuredSurgeHeadroom is the surge's headroom the seventh pass
	// measured (Options.SurgeHeadroom; off by default): a burst of
	// crossings allocates several times what is live in seconds (about
	// 12 KB per crossing, mostly the NATS server's and client's copies of
	// each message), and with half the live heap as headroom the
	// collector marks through most of it. At 100,000 tables a surge cut
	// the collector's assists to a fifth or less, but the burst's wall
	// time was 0.74 and 1.39 of the resting headroom's in two pairs: the
	// synchronous scavenging when the limit comes down after it grew
	// (BENCHMARKS.md, "The burst (seventh pass)"; ADR 0022, addendum 10).
	MeasuredSurgeHeadroom = 2.0
	// DefaultSurgeGCPercent is the collector's GOGC while a surge lasts,
	// unless the GOGC environment variable is set: GOGC=100's own goal
	// (twice what is live) would otherwise bind below the surge's limit.
	DefaultSurgeGCPercent = 300
	// DefaultSurgeHold is how long a surge lasts after its last signal.
	DefaultSurgeHold = 2 * time.Second
)

// EnvGOMEMLIMIT is the Go runtime's own variable: when it is set the
// limiter leaves the limit to it.
const EnvGOMEMLIMIT = "GOMEMLIMIT"

// Options configure a Limiter. Zero values take the defaults above.
type Options struct {
	// Tracked returns the tracked runs now; nil counts none.
	Tracked func() int
	// Floor, Headroom, MinHeadroom, PerRun and Every: see the defaults.
	Floor       int64
	Headroom    float64
	MinHeadroom int64
	PerRun      int64
	Every       time.Duration
	// SurgeHeadroom is the headroom while a surge lasts (Surge); 0 (the
	// default) or below: no surge. SurgeGCPercent and SurgeHold: see the
	// defaults and Surge.
	SurgeHeadroom  float64
	SurgeGCPercent int
	SurgeHold      time.Duration
	// Logger receives a line at the start and one per change at DEBUG.
	Logger *zap.Logger
	// Getenv reads GOMEMLIMIT; nil = os.Getenv.
	Getenv func(string) string
}

func (o Options) withDefaults() Options {
	if o.Floor <= 0 {
		o.Floor = DefaultFloor
	}
	if !(o.Headroom > 0) || math.IsInf(o.Headroom, 0) {
		// Also NaN, which passes any range check: a NaN limit would
		// be the floor whatever is live.
		o.Headroom = DefaultHeadroom
	}
	if o.MinHeadroom <= 0 {
		o.MinHeadroom = DefaultMinHeadroom
	}
	if o.PerRun <= 0 {
		o.PerRun = DefaultPerRun
	}
	if o.Every <= 0 {
		o.Every = DefaultEvery
	}
	if !(o.SurgeHeadroom > 0) || math.IsInf(o.SurgeHeadroom, 0) {
		o.SurgeHeadroom = 0 // off; NaN too
	}
	if o.SurgeGCPercent <= 0 {
		o.SurgeGCPercent = DefaultSurgeGCPercent
	}
	if o.SurgeHold <= 0 {
		o.SurgeHold = DefaultSurgeHold
	}
	if o.Tracked == nil {
		o.Tracked = func() int { return 0 }
	}
	if o.Logger == nil {
		o.Logger = zap.NewNop()
	}
	if o.Getenv == nil {
		o.Getenv = os.Getenv
	}
	return o
}

// Sample is what the limit is computed from, as the runtime reports it.
type Sample struct {
	// Live is the heap the last collection found live.
	Live uint64
	// Other is what the runtime holds beside the live heap and the free
	// pages it may return: goroutine stacks, its metadata, the unused room
	// in the heap's spans (fragmentation), profiling buckets and the like
	// (all counted by the memory limit, none of it returned by a
	// collection).
	Other uint64
	// Tracked is the number of tracked runs.
	Tracked int
	// Surge: a burst is under way (Limiter.Surge).
	Surge bool
}

// surges reports whether a surge changes anything for s: the live heap
// (at least PerRun per tracked run) large enough that its resting
// headroom is above MinHeadroom. Below it (under about 30,000 runs) the
// floor already lets the heap grow by as much as it holds or more, a
// collection marks little, and a surge measured no gain: at 10,000 runs
// the heap grown into fresh pages cost the burst's copies their page
// faults (BENCHMARKS.md, "The burst (seventh pass)").
func (o Options) surges(s Sample) bool {
	o = o.withDefaults()
	live := max(float64(s.Live), float64(s.Tracked)*float64(o.PerRun))
	return o.SurgeHeadroom > 0 && live*o.Headroom >= float64(o.MinHeadroom)
}

// Limit is the limit for s: the live heap (at least PerRun per tracked
// run) plus its headroom (Headroom of it, SurgeHeadroom during a surge
// when larger, at least MinHeadroom) plus Other, and never below Floor.
func (o Options) Limit(s Sample) int64 {
	o = o.withDefaults()
	live := max(float64(s.Live), float64(s.Tracked)*float64(o.PerRun))
	headroom := o.Headroom
	if s.Surge {
		headroom = max(headroom, o.SurgeHeadroom)
	}
	grow := max(live*headroom, float64(o.MinHeadroom))
	want := live + grow + float64(s.Other)
	if want >= math.MaxInt64/2 {
		return math.MaxInt64
	}
	return max(o.Floor, int64(want))
}

// Limiter keeps the soft memory limit at Options.Limit of the process as
// it runs. Its one goroutine is stopped by Stop.
type Limiter struct {
	o       Options
	prev    int64
	stop    chan struct{}
	done    chan struct{}
	gcDone  chan struct{} // a collection ended (see armGC)
	stopped atomic.Bool
	expect  atomic.Int64  // runs about to be tracked (Expect)
	surgeCh chan struct{} // Surge's signals to loop; capacity 1
	// surgeUntil is when the surge ends (unix nanoseconds; 0: none),
	// surging whether its GOGC and limit are in force; both loop's.
	surgeUntil int64
	surging    atomic.Bool
	gcPercent  int  // the GOGC a surge replaced; loop's
	gcSet      bool // the surge set GOGC (the environment's left alone)
	once       sync.Once
	mu         sync.Mutex
	limit      int64
	// sampleMu guards samples: update runs on loop and on Expect's
	// caller.
	sampleMu sync.Mutex
	samples  []metrics.Sample
}

var (
	activeMu sync.Mutex
	active   *Limiter // the one limiter that owns the process's limit
)

// Start starts a limiter and returns it, or nil when it does nothing:
// GOMEMLIMIT is set (the operator's limit stands), or another limiter
// already owns the process's limit (several services in one test
// process). Stop on a nil *Limiter is a no-op.
func Start(o Options) *Limiter {
	o = o.withDefaults()
	if v := o.Getenv(EnvGOMEMLIMIT); v != "" {
		o.Logger.Info("memory limit: GOMEMLIMIT from the environment, not derived from the tracked runs", zap.String("GOMEMLIMIT", v))
		return nil
	}
	activeMu.Lock()
	defer activeMu.Unlock()
	if active != nil {
		o.Logger.Debug("memory limit: another limiter of this process sets it")
		return nil
	}
	l := &Limiter{o: o, stop: make(chan struct{}), done: make(chan struct{}), gcDone: make(chan struct{}, 1), surgeCh: make(chan struct{}, 1),
		prev: debug.SetMemoryLimit(-1),
		samples: []metrics.Sample{
			{Name: "/gc/heap/live:bytes"},
			{Name: "/memory/classes/total:bytes"},
			{Name: "/memory/classes/heap/released:bytes"},
			{Name: "/memory/classes/heap/objects:bytes"},
			{Name: "/memory/classes/heap/unused:bytes"}, // read for the record: part of Other
			{Name: "/memory/classes/heap/free:bytes"},
		}}
	active = l
	l.update(true)
	o.Logger.Info("memory limit: derived from the live heap and the tracked runs (tracking.memory_limit: auto; GOMEMLIMIT overrides)",
		zap.Int64("limit_bytes", l.Limit()), zap.Int64("floor_bytes", o.Floor), zap.Float64("headroom", o.Headroom))
	armGC(l)
	go l.loop()
	return l
}

// gcSentinel is an object nothing refers to: its finalizer runs after
// the collection that finds it unreachable, and arms the next one.
type gcSentinel struct{ l *Limiter }

// armGC makes the end of the next collection wake l, which then
// recomputes the limit from the live heap that collection measured: a
// limit recomputed only on a timer stays below a live heap that grew fast
// (a burst of 10,000 advances in flight), and the collector runs back to
// back until it is. The finalizer only signals; it stops re-arming once
// l is stopped.
func armGC(l *Limiter) {
	runtime.SetFinalizer(&gcSentinel{l: l}, func(s *gcSentinel) {
		if s.l.stopped.Load() {
			return
		}
		select {
		case s.l.gcDone <- struct{}{}:
		default:
		}
		armGC(s.l)
	})
}

// Limit returns the limit set last, 0 for a nil limiter.
func (l *Limiter) Limit() int64 {
	if l == nil {
		return 0
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.limit
}

// Expect tells the limiter that n runs are about to be tracked at once (a
// restart's recovery, ADR 0023 addendum): until Expect(0), the limit
// counts at least n tracked runs, and it is raised at once rather than at
// the next collection. A restart's heap grows from nothing to the runs'
// size in seconds; a limit that follows it from behind makes the
// collector run about twice as often as GOGC would and the scavenger
// return pages that are allocated again a moment later. It allows nothing
// the limit would not allow once the runs are tracked. Safe on a nil
// limiter.
func (l *Limiter) Expect(n int) {
	if l == nil || l.stopped.Load() {
		return
	}
	l.expect.Store(int64(max(n, 0)))
	if n > 0 {
		l.update(false)
	}
}

// Surge tells the limiter that a burst is under way (the group commit's
// queue is full: thousands of crossings at once): until SurgeHold after
// the last call, the limit's headroom is SurgeHeadroom and the
// collector's GOGC SurgeGCPercent (unless GOGC is set in the
// environment), and the resting ones come back step by step after it.
// While runs are expected (Expect: a restart's recovery, whose burst
// fills the queue too) it does nothing and ends a surge under way: a
// recovery measured slower with it (BENCHMARKS.md, "Restart recovery at
// 100,000 (seventh pass)"). It never blocks and allocates nothing: the
// limiter's goroutine does the work. Safe on a nil limiter.
func (l *Limiter) Surge() {
	if l == nil || l.o.SurgeHeadroom <= 0 || l.stopped.Load() {
		return
	}
	select {
	case l.surgeCh <- struct{}{}:
	default:
	}
}

// Surging reports whether a surge is in force (tests, logs).
func (l *Limiter) Surging() bool { return l != nil && l.surging.Load() }

// startSurge starts a surge, or extends it by SurgeHold. loop's.
func (l *Limiter) startSurge() {
	if l.surging.Load() {
		l.surgeUntil = time.Now().Add(l.o.SurgeHold).UnixNano()
		return
	}
	if l.expect.Load() > 0 || !l.o.surges(l.sample()) {
		return
	}
	l.surgeUntil = time.Now().Add(l.o.SurgeHold).UnixNano()
	l.surging.Store(true)
	l.gcSet = l.o.Getenv("GOGC") == ""
	if l.gcSet {
		l.gcPercent = debug.SetGCPercent(l.o.SurgeGCPercent)
	}
	l.update(false)
	l.o.Logger.Debug("memory limit: surge", zap.Int64("limit_bytes", l.Limit()))
}

// endSurge ends the surge when its time is up or a recovery is
// expected (Expect). loop's.
func (l *Limiter) endSurge(force bool) {
	if !l.surging.Load() || (!force && l.expect.Load() == 0 && time.Now().UnixNano() < l.surgeUntil) {
		return
	}
	l.surging.Store(false)
	if l.gcSet {
		debug.SetGCPercent(l.gcPercent)
	}
	l.o.Logger.Debug("memory limit: surge over")
}

// Stop stops the limiter, waits for its goroutine and gives the process
// back the limit it had before Start. Safe to call more than once.
func (l *Limiter) Stop() {
	if l == nil {
		return
	}
	l.once.Do(func() {
		l.stopped.Store(true)
		close(l.stop)
		<-l.done
		debug.SetMemoryLimit(l.prev)
		activeMu.Lock()
		if active == l {
			active = nil
		}
		activeMu.Unlock()
	})
}

func (l *Limiter) loop() {
	defer close(l.done)
	defer l.endSurge(true)
	tick := time.NewTicker(l.o.Every)
	defer tick.Stop()
	for {
		select {
		case <-l.stop:
			return
		case <-tick.C:
			l.endSurge(false)
			l.update(true)
		case <-l.gcDone:
			l.update(false)
		case <-l.surgeCh:
			l.startSurge()
		}
	}
}

// sample reads the runtime's figures.
func (l *Limiter) sample() Sample {
	l.sampleMu.Lock()
	defer l.sampleMu.Unlock()
	metrics.Read(l.samples)
	v := func(i int) uint64 {
		if l.samples[i].Value.Kind() != metrics.KindUint64 {
			return 0
		}
		return l.samples[i].Value.Uint64()
	}
	s := Sample{Live: v(0), Tracked: max(l.o.Tracked(), int(l.expect.Load())), Surge: l.surging.Load()}
	// What the limit counts (total less released), less the heap's
	// objects and its free pages: the garbage among the objects and the
	// free pages are what the limit lets the collector and the
	// scavenger take back.
	held := v(1) - min(v(1), v(2))
	if heap := v(3) + v(5); held > heap {
		s.Other = held - heap
	}
	return s
}

// lowerStep is the most the limit is lowered by at once (once a second):
// a limit lowered far below what the process holds makes the allocating
// goroutines return the difference to the system before they go on (a
// stall of 100-500 ms measured when the ingest's 450 MB became 120 MB
// live at once); lowered step by step, the background scavenger returns
// it.
const lowerStep = 0.1

// update sets the limit for the process as it is now, when it moved by
// more than 1% since it was last set. It raises the limit at once, and
// lowers it (only when lower is set, once a second) by lowerStep at most.
func (l *Limiter) update(lower bool) {
	s := l.sample()
	want := l.o.Limit(s)
	l.mu.Lock()
	old := l.limit
	if old > 0 && want < old {
		if !lower {
			l.mu.Unlock()
			return
		}
		want = max(want, old-int64(float64(old)*lowerStep))
	}
	changed := old == 0 || math.Abs(float64(want-old)) > float64(old)/100
	if changed {
		l.limit = want
	}
	l.mu.Unlock()
	if !changed {
		return
	}
	debug.SetMemoryLimit(want)
	if ce := l.o.Logger.Check(zap.DebugLevel, "memory limit set"); ce != nil {
		ce.Write(zap.Int64("limit_bytes", want), zap.Uint64("live_heap_bytes", s.Live), zap.Uint64("other_bytes", s.Other),
			zap.Int("tracked_runs", s.Tracked))
	}
}
