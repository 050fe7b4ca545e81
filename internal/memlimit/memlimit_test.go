package memlimit

import (
	"math"
	"runtime"
	"runtime/debug"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

const mib = 1 << 20

func TestLimitFollowsTheLiveHeapWithAFloor(t *testing.T) {
	o := Options{Floor: 64 * mib, Headroom: 0.5, MinHeadroom: 32 * mib, PerRun: 4 << 10}
	for _, c := range []struct {
		name string
		s    Sample
		want int64
	}{
		{"a small heap: the floor", Sample{Live: 10 * mib, Other: 5 * mib}, 64 * mib},
		{"a large heap: half of it above, and the rest of the runtime", Sample{Live: 400 * mib, Other: 20 * mib}, 620 * mib},
		{"the headroom is at least MinHeadroom", Sample{Live: 40 * mib, Other: 10 * mib}, 82 * mib},
		// 100,000 runs tracked since the last collection measured 50 MiB:
		// the limit assumes 4 KiB per run, not the stale figure.
		{"tracked runs bound the live heap from below", Sample{Live: 50 * mib, Other: 10 * mib, Tracked: 100_000}, int64(100_000*4<<10*1.5) + 10*mib},
	} {
		if got := o.Limit(c.s); got != c.want {
			t.Errorf("%s: Limit(%+v) = %d MiB, want %d MiB", c.name, c.s, got/mib, c.want/mib)
		}
	}
}

// TestDefaultHeadroom: with the defaults, a live heap of 10,000 runs
// (about 60 MiB) may grow by 64 MiB before the limit binds (GOGC=100's
// own goal, twice what is live, is then about the same: the collector
// paces as without a limit), and one of 100,000 runs (about 400 MiB) by
// half of it, as before.
func TestDefaultHeadroom(t *testing.T) {
	var o Options
	for _, c := range []struct {
		name string
		s    Sample
		want int64
	}{
		{"10,000 runs", Sample{Live: 60 * mib, Other: 10 * mib, Tracked: 10_000}, 134 * mib},
		{"100,000 runs", Sample{Live: 400 * mib, Other: 20 * mib, Tracked: 100_000}, 620 * mib},
		{"idle, one run", Sample{Live: 8 * mib, Other: 4 * mib, Tracked: 1}, 76 * mib},
	} {
		if got := o.Limit(c.s); got != c.want {
			t.Errorf("%s: Limit(%+v) = %d MiB, want %d MiB", c.name, c.s, got/mib, c.want/mib)
		}
	}
}

func TestLimitNeverBelowWhatIsLive(t *testing.T) {
	// Below the live heap the collector would run on every allocation.
	var o Options
	for live := uint64(1); live < 1<<40; live *= 3 {
		if got := o.Limit(Sample{Live: live, Other: live / 10}); got < int64(live+live/10) {
			t.Fatalf("Limit(live %d) = %d: below the live heap", live, got)
		}
	}
}

// A headroom that is not a positive finite share (NaN slips past any
// range check, and int64(NaN) is the smallest int64 on amd64) takes the
// default instead of pinning the limit at the floor under a live heap
// far above it, where the collector would run back to back.
func TestOddHeadroomIsTheDefault(t *testing.T) {
	live := uint64(800 * mib)
	want := Options{}.Limit(Sample{Live: live})
	for _, h := range []float64{math.NaN(), math.Inf(1), math.Inf(-1), -1} {
		if got := (Options{Headroom: h}).Limit(Sample{Live: live}); got != want {
			t.Errorf("headroom %v: limit %d, want the default headroom's %d (live %d)", h, got, want, live)
		}
	}
}

func TestStartSetsTheLimitAndStopRestoresIt(t *testing.T) {
	before := debug.SetMemoryLimit(-1)
	var tracked atomic.Int64
	l := Start(Options{Tracked: func() int { return int(tracked.Load()) }, Every: 10 * time.Millisecond, Getenv: func(string) string { return "" }})
	if l == nil {
		t.Fatal("Start returned nil without GOMEMLIMIT")
	}
	if got := debug.SetMemoryLimit(-1); got != l.Limit() || got < DefaultFloor {
		t.Errorf("the process's limit is %d, the limiter's %d (floor %d)", got, l.Limit(), int64(DefaultFloor))
	}
	// A second limiter in the same process leaves the limit to the first.
	if l2 := Start(Options{Getenv: func(string) string { return "" }}); l2 != nil {
		l2.Stop()
		t.Error("a second limiter started while the first owns the limit")
	}
	// The limit follows the tracked runs.
	tracked.Store(200_000)
	deadline := time.Now().Add(5 * time.Second)
	for l.Limit() < 200_000*DefaultPerRun && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if l.Limit() < 200_000*DefaultPerRun {
		t.Errorf("limit %d MiB with 200,000 tracked runs: want at least %d MiB", l.Limit()/mib, 200_000*DefaultPerRun/mib)
	}
	l.Stop()
	l.Stop()
	if got := debug.SetMemoryLimit(-1); got != before {
		t.Errorf("after Stop the limit is %d, want the previous %d", got, before)
	}
	var nilLimiter *Limiter
	nilLimiter.Stop()
}

func TestGOMEMLIMITWins(t *testing.T) {
	before := debug.SetMemoryLimit(-1)
	l := Start(Options{Getenv: func(k string) string {
		if k == EnvGOMEMLIMIT {
			return "1GiB"
		}
		return ""
	}})
	if l != nil {
		l.Stop()
		t.Fatal("the limiter started although GOMEMLIMIT is set")
	}
	if got := debug.SetMemoryLimit(-1); got != before {
		t.Errorf("the limit moved from %d to %d although GOMEMLIMIT is set", before, got)
	}
	if before != math.MaxInt64 {
		t.Logf("the test process runs with a limit of %d", before)
	}
}

func TestACollectionRecomputesTheLimit(t *testing.T) {
	// The timer never fires in this test: only the end of a collection
	// can move the limit.
	var tracked atomic.Int64
	l := Start(Options{Tracked: func() int { return int(tracked.Load()) }, Every: time.Hour, Getenv: func(string) string { return "" }})
	if l == nil {
		t.Fatal("Start returned nil")
	}
	defer l.Stop()
	tracked.Store(500_000)
	deadline := time.Now().Add(10 * time.Second)
	for l.Limit() < 500_000*DefaultPerRun {
		if time.Now().After(deadline) {
			t.Fatalf("limit %d MiB after collections with 500,000 tracked runs: not recomputed", l.Limit()/mib)
		}
		runtime.GC()
		time.Sleep(10 * time.Millisecond)
	}
}

func TestTheLimitComesDownStepByStep(t *testing.T) {
	// 500,000 runs tracked, then none: the limit goes up at once and
	// comes down by at most a tenth a tick, so that the allocating
	// goroutines are never made to return hundreds of MB before they go on.
	var tracked atomic.Int64
	tracked.Store(500_000)
	core, logs := observer.New(zap.DebugLevel)
	l := Start(Options{Tracked: func() int { return int(tracked.Load()) }, Every: 5 * time.Millisecond,
		Getenv: func(string) string { return "" }, Logger: zap.New(core)})
	if l == nil {
		t.Fatal("Start returned nil")
	}
	defer l.Stop()
	peak := l.Limit()
	if peak < 500_000*DefaultPerRun {
		t.Fatalf("limit %d MiB with 500,000 tracked runs at the start", peak/mib)
	}
	tracked.Store(0)
	deadline := time.Now().Add(10 * time.Second)
	for l.Limit() > peak/4 {
		if time.Now().After(deadline) {
			t.Fatalf("the limit stayed at %d MiB (peak %d MiB) with no tracked run", l.Limit()/mib, peak/mib)
		}
		time.Sleep(5 * time.Millisecond)
	}
	// Every limit set, in order.
	var prev int64
	for _, e := range logs.FilterMessage("memory limit set").All() {
		cur := e.ContextMap()["limit_bytes"].(int64)
		if prev > 0 && float64(cur) < float64(prev)*(1-lowerStep)-1 {
			t.Fatalf("the limit fell from %d to %d MiB at once: more than a tenth", prev/mib, cur/mib)
		}
		prev = cur
	}
}

// TestExpectRaisesTheLimitAtOnce (ADR 0023 addendum): the runs a restart
// is about to recover count at once, before they are tracked and without
// waiting for a collection or the limiter's tick; Expect(0) leaves the
// limit to the tracked runs again (lowered step by step).
func TestExpectRaisesTheLimitAtOnce(t *testing.T) {
	before := debug.SetMemoryLimit(-1)
	l := Start(Options{Every: time.Hour, Getenv: func(string) string { return "" }})
	if l == nil {
		t.Fatal("Start returned nil without GOMEMLIMIT")
	}
	defer func() {
		l.Stop()
		if got := debug.SetMemoryLimit(-1); got != before {
			t.Errorf("after Stop the limit is %d, want the previous %d", got, before)
		}
	}()
	const runs = 300_000
	if l.Limit() >= runs*DefaultPerRun {
		t.Skipf("the live heap (limit %d MiB) is already above %d runs' worth", l.Limit()/mib, runs)
	}
	l.Expect(runs)
	if got := l.Limit(); got < runs*DefaultPerRun {
		t.Fatalf("limit %d MiB right after Expect(%d): want at least %d MiB", got/mib, runs, runs*DefaultPerRun/mib)
	}
	if got := debug.SetMemoryLimit(-1); got != l.Limit() {
		t.Fatalf("the process's limit is %d, the limiter's %d", got, l.Limit())
	}
	l.Expect(0)
	var nilLimiter *Limiter
	nilLimiter.Expect(runs)
}

// TestSurgeHeadroom (ADR 0022, addendum 10): during a surge the headroom
// is SurgeHeadroom of the live heap, and a surge applies only where the
// resting headroom is above MinHeadroom (a heap of 128 MiB or more with
// the defaults).
func TestSurgeHeadroom(t *testing.T) {
	o := Options{SurgeHeadroom: MeasuredSurgeHeadroom}
	if got, want := o.Limit(Sample{Live: 400 * mib, Other: 20 * mib, Surge: true}), int64(1220*mib); got != want {
		t.Errorf("surge, 400 MiB live: limit %d MiB, want %d MiB", got/mib, want/mib)
	}
	if got, want := (Options{Headroom: 3, SurgeHeadroom: MeasuredSurgeHeadroom}).Limit(Sample{Live: 400 * mib, Surge: true}), int64(1600*mib); got != want {
		t.Errorf("surge under a larger resting headroom: limit %d MiB, want the resting one's %d MiB", got/mib, want/mib)
	}
	for _, c := range []struct {
		s    Sample
		want bool
	}{
		{Sample{Live: 60 * mib, Tracked: 10_000}, false},
		{Sample{Live: 400 * mib, Tracked: 100_000}, true},
		{Sample{Live: 10 * mib, Tracked: 100_000}, true}, // runs tracked since the last collection count
	} {
		if got := o.surges(c.s); got != c.want {
			t.Errorf("surges(%+v) = %v, want %v", c.s, got, c.want)
		}
	}
	for _, h := range []float64{0, -1, math.NaN(), math.Inf(1)} {
		if (Options{SurgeHeadroom: h}).surges(Sample{Live: 1 << 30}) {
			t.Errorf("SurgeHeadroom %v surges: off by default and when not a positive finite share", h)
		}
	}
}

// gcPercent reads the collector's GOGC (by setting it back).
func gcPercent() int {
	p := debug.SetGCPercent(100)
	debug.SetGCPercent(p)
	return p
}

// TestSurgeRaisesTheLimitAndGOGCThenEnds: Surge widens the limit and sets
// GOGC at once (on the limiter's goroutine); SurgeHold after the last
// signal both come back, the limit step by step; Stop during a surge
// gives GOGC back too.
func TestSurgeRaisesTheLimitAndGOGCThenEnds(t *testing.T) {
	before, gogc := debug.SetMemoryLimit(-1), gcPercent()
	const runs = 200_000 // 800 MiB assumed live: the surge applies
	l := Start(Options{Tracked: func() int { return runs }, Every: 5 * time.Millisecond, SurgeHold: 50 * time.Millisecond, SurgeHeadroom: MeasuredSurgeHeadroom,
		Getenv: func(string) string { return "" }})
	if l == nil {
		t.Fatal("Start returned nil without GOMEMLIMIT")
	}
	resting := l.Limit()
	l.Surge()
	waitUntil(t, "the surge", l.Surging)
	if got := gcPercent(); got != DefaultSurgeGCPercent {
		t.Errorf("GOGC %d during the surge, want %d", got, DefaultSurgeGCPercent)
	}
	if got, want := l.Limit(), int64(float64(runs*DefaultPerRun)*(1+MeasuredSurgeHeadroom)); got < want {
		t.Errorf("limit %d MiB during the surge, want at least %d MiB (resting %d MiB)", got/mib, want/mib, resting/mib)
	}
	waitUntil(t, "the surge's end", func() bool { return !l.Surging() })
	if got := gcPercent(); got != gogc {
		t.Errorf("GOGC %d after the surge, want %d back", got, gogc)
	}
	waitUntil(t, "the resting limit", func() bool { return l.Limit() <= resting+resting/50 })

	l.Surge()
	waitUntil(t, "a second surge", l.Surging)
	l.Stop()
	if got := gcPercent(); got != gogc {
		t.Errorf("GOGC %d after Stop during a surge, want %d back", got, gogc)
	}
	if got := debug.SetMemoryLimit(-1); got != before {
		t.Errorf("after Stop the limit is %d, want the previous %d", got, before)
	}
}

// TestSurgeLeavesGOGCFromTheEnvironment and does nothing for a small
// heap.
func TestSurgeLeavesGOGCFromTheEnvironment(t *testing.T) {
	gogc := gcPercent()
	var tracked atomic.Int64
	l := Start(Options{Tracked: func() int { return int(tracked.Load()) }, Every: 5 * time.Millisecond, SurgeHold: time.Hour, SurgeHeadroom: MeasuredSurgeHeadroom,
		Getenv: func(k string) string {
			if k == "GOGC" {
				return "150"
			}
			return ""
		}})
	if l == nil {
		t.Fatal("Start returned nil without GOMEMLIMIT")
	}
	defer l.Stop()
	if l.Surge(); waitBriefly(l.Surging) {
		t.Fatal("a surge with nothing tracked: the floor's headroom is the larger")
	}
	tracked.Store(200_000)
	l.Surge()
	waitUntil(t, "the surge", l.Surging)
	if got := gcPercent(); got != gogc {
		t.Errorf("GOGC %d during a surge with GOGC set in the environment, want %d untouched", got, gogc)
	}
}

func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

// waitBriefly reports whether cond holds within 100 ms.
func waitBriefly(cond func() bool) bool {
	deadline := time.Now().Add(100 * time.Millisecond)
	for time.Now().Before(deadline) {
		if cond() {
			return true
		}
		time.Sleep(time.Millisecond)
	}
	return false
}

// TestNoSurgeDuringARecovery: while runs are expected (Expect, a
// restart's recovery) Surge does nothing, and a surge under way ends at
// the next tick; once Expect(0), a burst surges again.
func TestNoSurgeDuringARecovery(t *testing.T) {
	gogc := gcPercent()
	l := Start(Options{Tracked: func() int { return 200_000 }, Every: 5 * time.Millisecond, SurgeHold: time.Hour, SurgeHeadroom: MeasuredSurgeHeadroom,
		Getenv: func(string) string { return "" }})
	if l == nil {
		t.Fatal("Start returned nil without GOMEMLIMIT")
	}
	defer l.Stop()
	l.Expect(200_000)
	if l.Surge(); waitBriefly(l.Surging) {
		t.Fatal("a surge during a recovery")
	}
	l.Expect(0)
	l.Surge()
	waitUntil(t, "the surge after the recovery", l.Surging)
	l.Expect(200_000)
	waitUntil(t, "the surge's end at a recovery", func() bool { return !l.Surging() })
	if got := gcPercent(); got != gogc {
		t.Errorf("GOGC %d after the surge ended, want %d back", got, gogc)
	}
	l.Expect(0)
}

// TestNoSurgeByDefault: without SurgeHeadroom, Surge does nothing.
func TestNoSurgeByDefault(t *testing.T) {
	l := Start(Options{Tracked: func() int { return 200_000 }, Every: 5 * time.Millisecond, Getenv: func(string) string { return "" }})
	if l == nil {
		t.Fatal("Start returned nil without GOMEMLIMIT")
	}
	defer l.Stop()
	if l.Surge(); waitBriefly(l.Surging) {
		t.Fatal("a surge without SurgeHeadroom")
	}
}
