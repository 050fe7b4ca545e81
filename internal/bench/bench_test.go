package bench

import (
	"context"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest"

	"github.com/finalizer-dev/finalizer/internal/pgcluster/pgtest"
	"github.com/finalizer-dev/finalizer/progress"
)

// TestMain gives the bench a throwaway PostgreSQL (or the server named by
// FINALIZER_TEST_POSTGRES_URL) and checks for leaked goroutines.
func TestMain(m *testing.M) { pgtest.Main(m) }

// warnings passes the service's warnings and errors to the test's log: a
// retried advance, a reconnect, names its cause there.
func warnings(t *testing.T) *zap.Logger {
	return zaptest.NewLogger(t, zaptest.Level(zapcore.WarnLevel))
}

// runBench runs the bench with cfg within timeout, its lines and the
// service's warnings (unless cfg.Logger is set) in the test's log, and
// fails the test at once on an error. It returns the result and the
// bench's lines.
func runBench(t *testing.T, cfg Config, timeout time.Duration) (*Result, string) {
	t.Helper()
	var log strings.Builder
	cfg.Log = &log
	if cfg.Logger == nil {
		cfg.Logger = warnings(t)
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	res, err := Run(ctx, cfg)
	t.Log("\n" + log.String())
	if err != nil {
		t.Fatal(err)
	}
	return res, log.String()
}

// TestQuickBench runs every phase of the bench on a small configuration so
// that the harness cannot rot. It asserts what must hold on any machine,
// never a timing: every verdict reached, one control write per table and
// period in steady state, one per event for the naive baseline, nothing
// dropped, retried or failed.
func TestQuickBench(t *testing.T) {
	prof := t.TempDir()
	cfg := Config{
		ProfileDir:   prof,
		Runs:         50,
		IngestPerRun: 10,
		Rate:         200, // 4 events/s per run: the workers never fall a period behind
		Duration:     2 * time.Second,
		Idle:         2 * time.Second,
		IdleRounds:   2,
		PostgresURL:  pgtest.URL(t),
		Naive:        true,
		WaitTimeout:  time.Minute,
	}
	res, _ := runBench(t, cfg, 3*time.Minute)
	var table strings.Builder
	if err := res.WriteTable(&table); err != nil {
		t.Fatal(err)
	}
	t.Log("\n" + table.String() + string(res.JSON()))

	if res.IngestEvents != 50*10 || res.RawEventsPerSec <= 0 || res.IngestEventsPerSec <= 0 || res.SettledEventsPerSec <= 0 {
		t.Errorf("ingest: %d events, raw %.0f/s, accepted %.0f/s, settled %.0f/s", res.IngestEvents,
			res.RawEventsPerSec, res.IngestEventsPerSec, res.SettledEventsPerSec)
	}
	if l := res.Latency; l.AllocKiBPerEvent <= 0 || l.AllocsPerEvent <= 0 {
		t.Errorf("latency phase: %.2f KiB, %.1f objects allocated per event; want them measured", l.AllocKiBPerEvent, l.AllocsPerEvent)
	}
	if res.IngestAllocKiBPerEvent <= 0 || res.IngestAllocsPerEvent <= 0 {
		t.Errorf("ingest: %.2f KiB, %.1f objects allocated per event; want them measured", res.IngestAllocKiBPerEvent, res.IngestAllocsPerEvent)
	}
	for _, f := range []string{"allocs-latency.base.pprof", "allocs-latency.pprof", "cpu-latency.pprof"} {
		if fi, err := os.Stat(filepath.Join(prof, f)); err != nil || fi.Size() == 0 {
			t.Errorf("profile %s: %v (want it written, not empty)", f, err)
		}
	}
	if res.IngestWritesPerPeriod > 1 {
		t.Errorf("ingest wrote %.2f times per (table, period), want at most 1", res.IngestWritesPerPeriod)
	}
	if l := res.Latency; l.Probes == 0 || l.Missing != 0 || l.WritesPerPeriod != 1 {
		t.Errorf("latency phase: %d crossings measured, %d missing, %.3f writes per (table, period); want some, none, 1.00",
			l.Probes, l.Missing, l.WritesPerPeriod)
	}
	// Tables of one feeder: one row write per (table, period), the
	// table's own, by the sole statement; of three: one feeder row per
	// feeder and period plus the table's move, no settle.
	if len(res.Feeders) != 2 {
		t.Fatalf("feeders phase: %+v", res.Feeders)
	}
	if f := res.Feeders[0]; f.FeedersPerTable != 1 || f.WritesPerPeriod != 1 || f.FeederWritesPerPeriod != 0 || f.SolePerPeriod != 1 ||
		f.AdvancesPerPeriod != 0 || f.SettlesPerPeriod != 0 || f.MovesPerPeriod != 1 {
		t.Errorf("one feeder per table: %+v; want 1 write (the table's), by 1 sole advance, per (table, period)", f)
	}
	if f := res.Feeders[1]; f.FeedersPerTable != 3 || f.WritesPerPeriod > 4 || f.AdvancesPerPeriod != 3 || f.SettlesPerPeriod != 0 || f.MovesPerPeriod != 1 {
		t.Errorf("three feeders per table: %+v; want at most 4 writes (3 feeder rows, 1 move), 3 advances, no settle per (table, period)", f)
	}
	if res.BurstSeconds <= 0 || res.RecoverySeconds <= 0 || res.FirstVerdictsSeconds <= 0 {
		t.Errorf("burst %.3f s, recovery %.3f s, first verdicts %.3f s: a phase did not run", res.BurstSeconds,
			res.RecoverySeconds, res.FirstVerdictsSeconds)
	}
	if res.RSSNoGCPerRunKiB == 0 || res.MemPerRunKiB == 0 {
		t.Errorf("memory per run: %.1f KiB without a forced GC, %.1f after one: the memory phase read no RSS", res.RSSNoGCPerRunKiB, res.MemPerRunKiB)
	}
	if res.SimsHeapPerRunKiB == 0 {
		t.Error("the simulated runs' live heap was not measured")
	}
	if i := res.Idle; i == nil || i.TotalCoreShare <= 0 || i.GeneratorCoreShare <= 0 || i.ServiceCoreShare < 0 || i.EventsPerSec != 5 {
		t.Errorf("idle phase: %+v; want the process's and the generator's CPU measured at 5 events/s (50 runs, one per 10 s)", i)
	}
	if i := res.Idle; i != nil && (i.Rounds != 2 || len(i.IdleEventsServiceRounds) != 2 || len(i.ServiceRounds) != 2 || len(i.GeneratorRounds) != 2 || len(i.IdleEventsGeneratorRounds) != 2 || i.IdleEventsGeneratorCoreShare <= 0) {
		t.Errorf("idle rounds: %+v; want 2 rounds of each window and its generator's share", i)
	}
	if i := res.Idle; i != nil && (i.IdleEventsSent == 0 || i.IdleEventsAccepted != int64(i.IdleEventsSent) || i.IdleEventsTotalCoreShare <= 0) {
		t.Errorf("idle events: %d sent, %d taken in by their runs, process %.3f of a core; want every one taken in",
			i.IdleEventsSent, i.IdleEventsAccepted, i.IdleEventsTotalCoreShare)
	}
	if res.NATSSlowConsumer != 0 || res.NATSDropped != 0 || res.NATSDisconnects != 0 {
		t.Errorf("the service's NATS connection: %d slow-consumer errors, %d messages dropped, %d disconnects",
			res.NATSSlowConsumer, res.NATSDropped, res.NATSDisconnects)
	}
	if res.AdvanceRetries != 0 || res.AdvanceFailures != 0 {
		t.Errorf("%d advances retried, %d failed", res.AdvanceRetries, res.AdvanceFailures)
	}
	n := res.Naive
	if n == nil {
		t.Fatal("no naive baseline")
	}
	// The naive consumer writes once per event: PerPeriod times per period.
	want := float64(DefaultPerPeriod)
	if l := n.Latency; l.Missing != 0 || l.Probes == 0 || math.Abs(l.WritesPerPeriod-want) > 0.5 {
		t.Errorf("naive latency phase: %d measured, %d missing, %.2f writes per (table, period); want ~%.0f",
			l.Probes, l.Missing, l.WritesPerPeriod, want)
	}
	if n.BurstSeconds <= 0 || res.Ratios == nil {
		t.Errorf("naive burst %.3f s, ratios %+v", n.BurstSeconds, res.Ratios)
	}
}

// TestBurstOnly runs the bench with BurstOnly: the first verdicts, then
// Bursts bursts, each committed in full with no retry, and no other
// phase; then the burst's floor, in groups of the service's size (7
// here, so that both committers carry several).
func TestBurstOnly(t *testing.T) {
	cfg := Config{
		Runs:        50,
		BurstOnly:   true,
		Bursts:      3,
		MaxBatch:    7,
		PostgresURL: pgtest.URL(t),
		WaitTimeout: time.Minute,
	}
	res, log := runBench(t, cfg, 2*time.Minute)
	if res.BurstFloorSeconds <= 0 || res.BurstOverFloor <= 0 || res.BurstFloorGoCPUUsPerRow <= 0 ||
		!strings.Contains(log, "burst floor: the store alone applied the burst's 50 advances (groups of 7, 2 in flight") {
		t.Errorf("burst floor %.3f s, burst / floor %.2f, %.1f µs per row: want it measured, in groups of 7", res.BurstFloorSeconds, res.BurstOverFloor, res.BurstFloorGoCPUUsPerRow)
	}
	if len(res.BurstRounds) != 3 || res.BurstSeconds != res.BurstRounds[0] || res.FirstVerdictsSeconds <= 0 {
		t.Errorf("bursts %v, burst %.3f s, first verdicts %.3f s: want 3 bursts, the first one's the burst", res.BurstRounds, res.BurstSeconds, res.FirstVerdictsSeconds)
	}
	if len(res.RawRounds) != 0 || res.IngestEventsPerSec != 0 || res.Latency.Probes != 0 || len(res.Feeders) != 0 || res.RecoverySeconds != 0 || res.Naive != nil {
		t.Errorf("a phase besides the burst ran: raw %v, ingest %.0f/s, %d latency probes, feeders %v, recovery %.3f s, naive %v",
			res.RawRounds, res.IngestEventsPerSec, res.Latency.Probes, res.Feeders, res.RecoverySeconds, res.Naive)
	}
	if res.AdvanceRetries != 0 || res.AdvanceFailures != 0 {
		t.Errorf("%d advances retried, %d failed", res.AdvanceRetries, res.AdvanceFailures)
	}
}

// TestIdleOnly runs tracking, the first verdicts and the idle phase alone,
// each window measured twice.
func TestIdleOnly(t *testing.T) {
	cfg := Config{
		Runs:        50,
		IdleOnly:    true,
		Idle:        time.Second,
		IdleRounds:  2,
		PostgresURL: pgtest.URL(t),
		WaitTimeout: time.Minute,
	}
	res, _ := runBench(t, cfg, 2*time.Minute)
	i := res.Idle
	if i == nil || i.Rounds != 2 || len(i.IdleEventsServiceRounds) != 2 || len(i.ServiceRounds) != 2 || len(i.GeneratorRounds) != 2 || len(i.IdleEventsGeneratorRounds) != 2 ||
		i.IdleEventsSent == 0 || i.IdleEventsAccepted != int64(i.IdleEventsSent) || i.TotalCoreShare <= 0 {
		t.Fatalf("idle phase: %+v; want 2 rounds of each window and its generator's share, every idle event taken in", i)
	}
	if len(res.RawRounds) != 0 || res.IngestEventsPerSec != 0 || res.Latency.Probes != 0 || len(res.Feeders) != 0 || res.BurstSeconds != 0 || res.RecoverySeconds != 0 || res.Naive != nil {
		t.Errorf("a phase besides the idle one ran: raw %v, ingest %.0f/s, %d latency probes, feeders %v, burst %.3f s, recovery %.3f s, naive %v",
			res.RawRounds, res.IngestEventsPerSec, res.Latency.Probes, res.Feeders, res.BurstSeconds, res.RecoverySeconds, res.Naive)
	}
}

// TestLatencyOnly runs tracking, the first verdicts and the latency phase
// alone: every crossing heard, one write per (table, period). The phase
// begins with the flush (VACUUM ANALYZE of the bench's tables, a
// CHECKPOINT and sync(2)) unless NoFlush, and has the commit probe beside
// it unless NoCommitProbe (the second run turns both off).
func TestLatencyOnly(t *testing.T) {
	for _, noFlush := range []bool{false, true} {
		t.Run(map[bool]string{false: "flush", true: "no flush"}[noFlush], func(t *testing.T) {
			cfg := Config{
				Runs:        50,
				LatencyOnly: true,
				Duration:    2 * time.Second,
				Rate:        200,
				PostgresURL: pgtest.URL(t),
				WaitTimeout: time.Minute,
				NoFlush:     noFlush,

				NoCommitProbe: noFlush,
			}
			res, log := runBench(t, cfg, 2*time.Minute)
			l := res.Latency
			if l.Events == 0 || l.Probes == 0 || l.Missing != 0 || l.WritesPerPeriod != 1 {
				t.Errorf("latency phase: %d events, %d crossings heard, %d missing, %.2f writes per (table, period); want every crossing heard, 1.00", l.Events, l.Probes, l.Missing, l.WritesPerPeriod)
			}
			if len(res.RawRounds) != 0 || res.IngestEventsPerSec != 0 || len(res.Feeders) != 0 || res.BurstSeconds != 0 || res.RecoverySeconds != 0 || res.Naive != nil || res.Idle != nil {
				t.Errorf("a phase besides the latency one ran: raw %v, ingest %.0f/s, feeders %v, burst %.3f s, recovery %.3f s, naive %v, idle %v",
					res.RawRounds, res.IngestEventsPerSec, res.Feeders, res.BurstSeconds, res.RecoverySeconds, res.Naive, res.Idle)
			}
			flushed := strings.Contains(log, "before the latency phase: VACUUM ANALYZE of the bench's tables, a CHECKPOINT and sync(2)")
			switch {
			case noFlush && (flushed || l.FlushS != 0):
				t.Errorf("NoFlush: the phase flushed (%.3f s)", l.FlushS)
			case !noFlush && (!flushed || l.FlushS <= 0):
				t.Errorf("the phase did not flush first (%.3f s)", l.FlushS)
			case strings.Contains(log, "may be left as they are"):
				t.Errorf("the VACUUM or the CHECKPOINT failed")
			}
			// 50 commits a second for 2 s: about 100, each timed, the
			// crossings' p99 set beside theirs.
			probed := strings.Contains(log, "latency: a lone commit beside it")
			switch {
			case noFlush && (probed || l.CommitProbes != 0):
				t.Errorf("NoCommitProbe: %d commits probed", l.CommitProbes)
			case !noFlush && (!probed || l.CommitProbes < 50 || l.CommitP50Ms <= 0 || l.CommitP99Ms < l.CommitP50Ms || l.CommitMaxMs < l.CommitP99Ms || l.P99OverCommitP99 <= 0):
				t.Errorf("commit probe: %d commits, p50 %.3f, p99 %.3f, max %.3f ms, ratio %.2f; want about 100, measured and ordered",
					l.CommitProbes, l.CommitP50Ms, l.CommitP99Ms, l.CommitMaxMs, l.P99OverCommitP99)
			}
		})
	}
}

// TestConfigValidate rejects what cannot run.
func TestConfigValidate(t *testing.T) {
	for _, tc := range []struct {
		name string
		cfg  Config
		ok   bool
	}{
		{"defaults", Config{}, true},
		{"rule", Config{Tracking: "rule"}, true},
		{"bad tracking", Config{Tracking: "all"}, false},
		{"one per period", Config{PerPeriod: 1}, false},
		{"does not divide a minute", Config{PerPeriod: 7}, false},
		{"burst and restart only", Config{BurstOnly: true, RestartOnly: true}, false},
		{"idle only", Config{IdleOnly: true, Idle: time.Second}, true},
		{"idle only without idle", Config{IdleOnly: true}, false},
		{"idle and burst only", Config{IdleOnly: true, Idle: time.Second, BurstOnly: true}, false},
		{"negative idle rounds", Config{IdleRounds: -1}, false},
		{"latency only", Config{LatencyOnly: true}, true},
		{"latency and burst only", Config{LatencyOnly: true, BurstOnly: true}, false},
		{"negative commit probe rate", Config{CommitProbeRate: -1}, false},
		{"commit probe rate too high", Config{CommitProbeRate: 5000}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if err := tc.cfg.Validate(); (err == nil) != tc.ok {
				t.Errorf("Validate() = %v, want ok %v", err, tc.ok)
			}
		})
	}
}

// TestProgressTemplates checks that every simulated run's documents parse
// to the batch and time they were written with, in both JSON forms, and
// are 2-3 KB as Spark's are.
func TestProgressTemplates(t *testing.T) {
	sims, err := newSims(8, 0xabcdef01, "spark", "mixed", DefaultPerPeriod)
	if err != nil {
		t.Fatal(err)
	}
	clk := clock{base: time.Date(2026, 9, 28, 13, 0, 0, 0, time.UTC), step: 10 * time.Second, perPeriod: DefaultPerPeriod}
	forms := map[bool]int{}
	for _, s := range sims {
		forms[s.eventLog]++
		for _, k := range []int64{1, 7, 123456} {
			doc := s.progress(nil, k, clk.at(s, k))
			if len(doc) < 1500 || len(doc) > 3500 {
				t.Errorf("run %d: %d bytes", s.idx, len(doc))
			}
			ev, err := progress.Parse(doc, progress.KindProgress)
			if err != nil {
				t.Fatalf("run %d batch %d: %v\n%s", s.idx, k, err, doc)
			}
			if ev.BatchID != k || ev.RunID != s.runID || ev.QueryID != s.queryID || ev.Name != s.name {
				t.Errorf("run %d batch %d: parsed %+v", s.idx, k, ev)
			}
			c, ok := s.spec.Candidate(ev)
			if !ok || !c.Time.Equal(clk.at(s, k)) || !c.Until.Equal(clk.period(s, k)) {
				t.Errorf("run %d batch %d: candidate %+v, %v; want time %v, until %v", s.idx, k, c, ok, clk.at(s, k), clk.period(s, k))
			}
		}
	}
	if forms[true] == 0 || forms[false] == 0 {
		t.Errorf("forms: %v, want both", forms)
	}
}

// BenchmarkParseProgress measures progress.Parse and the tracker's
// candidate on the bench's own documents (compact, as Spark writes them):
// the largest cost of an event in the service (BENCHMARKS.md).
func BenchmarkParseProgress(b *testing.B) {
	sims, err := newSims(4, 1, "spark", "mixed", DefaultPerPeriod)
	if err != nil {
		b.Fatal(err)
	}
	clk := clock{base: time.Date(2026, 9, 28, 13, 0, 0, 0, time.UTC), step: 10 * time.Second, perPeriod: DefaultPerPeriod}
	for _, s := range sims {
		kind := map[sourceKind]string{sourceCDC: "cdc", sourceKafka: "kafka"}[s.source]
		form := map[bool]string{false: "listener", true: "eventlog"}[s.eventLog]
		doc := s.progress(nil, 42, clk.at(s, 42))
		b.Run(kind+"/"+form, func(b *testing.B) {
			b.SetBytes(int64(len(doc)))
			b.ReportAllocs()
			for b.Loop() {
				ev, err := progress.Parse(doc, progress.KindProgress)
				if err != nil {
					b.Fatal(err)
				}
				if _, ok := s.spec.Candidate(ev); !ok {
					b.Fatal("no candidate")
				}
			}
		})
	}
}
