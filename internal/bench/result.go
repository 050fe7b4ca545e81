package bench

import (
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"text/tabwriter"
)

// spread formats the range of xs as " (min-max)", "" for none.
func spread(xs []float64) string {
	if len(xs) == 0 {
		return ""
	}
	return fmt.Sprintf(" (%.3f-%.3f)", slices.Min(xs), slices.Max(xs))
}

// Latency is the latency phase's outcome: period-crossing progress events
// measured from their publication to their committed verdict (heard
// through LISTEN/NOTIFY), under a background load.
type Latency struct {
	Events  int     `json:"events"`  // events published in the phase
	Probes  int     `json:"probes"`  // crossings measured
	Missing int     `json:"missing"` // crossings whose verdict was never heard
	P50Ms   float64 `json:"p50_ms"`
	P99Ms   float64 `json:"p99_ms"`
	MaxMs   float64 `json:"max_ms"`
	// WritesPerPeriod is control-table writes per (table, period) crossed
	// in the phase; 1.00 is the least that moves every verdict.
	WritesPerPeriod float64 `json:"writes_per_period"`
	// The Go runtime during the phase (the whole process: the service,
	// the embedded NATS server, the bench's publisher and observer):
	// collections completed, CPU seconds their marking took, and the p99
	// of the time a runnable goroutine waited for a processor.
	GCCycles    int     `json:"gc_cycles"`
	GCMarkCPUS  float64 `json:"gc_mark_cpu_s"`
	SchedP99Ms  float64 `json:"sched_latency_p99_ms"`
	SchedP999Ms float64 `json:"sched_latency_p999_ms"`
	// AllocKiBPerEvent is the heap the whole process allocated during
	// the phase (/gc/heap/allocs:bytes) over the events published: the
	// allocation rate that paces the collections, per event.
	AllocKiBPerEvent float64 `json:"alloc_kib_per_event"`
	// AllocsPerEvent is the heap objects the whole process allocated
	// during the phase (/gc/heap/allocs:objects) over the events
	// published.
	AllocsPerEvent float64 `json:"allocs_per_event"`
	// GCMarks is how many collections were marking at some time in the
	// phase (one that began before it or still marked at its end
	// counted: GCCycles counts only those that completed in it), and
	// GCMarkingS the seconds of the phase they marked, watched every
	// 5 ms. ProbesInMarks is how many crossings met a mark between their
	// publication and their verdict; P99MsInMarks is their p99 and
	// P99MsOutsideMarks the p99 of the others.
	GCMarks           int     `json:"gc_marks"`
	GCMarkingS        float64 `json:"gc_marking_s"`
	ProbesInMarks     int     `json:"probes_in_marks"`
	P99MsInMarks      float64 `json:"p99_in_marks_ms"`
	P99MsOutsideMarks float64 `json:"p99_outside_marks_ms"`
	// With --service-process, the service process's own: the heap it
	// allocated (go_memstats_alloc_bytes_total) over the events
	// published, and its collections (go_gc_duration_seconds' count),
	// from its /metrics at the phase's start and end.
	ServiceAllocKiBPerEvent float64 `json:"service_alloc_kib_per_event,omitempty"`
	ServiceGCCycles         int     `json:"service_gc_cycles,omitempty"`
	// FlushS is how long the flush before the phase took (VACUUM
	// ANALYZE of the bench's tables, a CHECKPOINT and sync(2); 0 with
	// --flush=false) and FlushDirtyMiB the page
	// cache's dirty data when it began (/proc/meminfo, Linux).
	FlushS        float64 `json:"flush_s,omitempty"`
	FlushDirtyMiB float64 `json:"flush_dirty_mib,omitempty"`
	// The commit probe's (commitProbe): how many lone commits of the
	// control table's shape it made in the phase, on a connection of
	// its own, and their p50, p99 and max from sending the statement to
	// its result; P99OverCommitP99 is the crossings' p99 over the
	// probe's, both measured in the same window. None with
	// --commit-probe-rate 0.
	CommitProbes     int     `json:"commit_probes,omitempty"`
	CommitP50Ms      float64 `json:"commit_p50_ms,omitempty"`
	CommitP99Ms      float64 `json:"commit_p99_ms,omitempty"`
	CommitMaxMs      float64 `json:"commit_max_ms,omitempty"`
	P99OverCommitP99 float64 `json:"p99_over_commit_p99,omitempty"`
}

// Baseline is the naive consumer's figures, measured on the same messages.
type Baseline struct {
	IngestEventsPerSec    float64 `json:"ingest_events_per_s"`
	IngestWritesPerPeriod float64 `json:"ingest_writes_per_period"`
	Latency               Latency `json:"latency"`
	BurstSeconds          float64 `json:"burst_s"`
}

// Ratios compare the service with the naive baseline: above 1 means the
// service is better (faster, fewer writes, shorter latency).
type Ratios struct {
	Ingest       float64 `json:"ingest"`        // service settled rate / naive rate
	IngestWrites float64 `json:"ingest_writes"` // naive writes per period / service's, ingest phase
	Writes       float64 `json:"writes"`        // naive writes per period / service's, latency phase
	LatencyP99   float64 `json:"latency_p99"`   // naive p99 / service p99
	Burst        float64 `json:"burst"`         // naive burst / service burst
}

// Result is what one bench run measured. Its JSON form is the one line
// `finalizer bench` prints last.
type Result struct {
	// Mode is where the service under measure ran: ModeInProcess (in the
	// bench's process, with the NATS server and the load generator) or
	// ModeServiceProcess (`finalizer serve` in a process of its own).
	Mode            string  `json:"mode"`
	Runs            int     `json:"runs"`
	Tracking        string  `json:"tracking"`
	IngestPerRun    int     `json:"ingest_per_run"`
	Rate            float64 `json:"rate"`
	DurationSeconds float64 `json:"duration_s"`
	PerPeriod       int     `json:"per_period"`
	CPUs            int     `json:"cpus"`
	GoVersion       string  `json:"go"`
	Postgres        string  `json:"postgres"`
	MsgBytes        int     `json:"msg_bytes"` // mean progress size

	TrackSeconds         float64 `json:"track_s"`          // N runs tracked
	FirstVerdictsSeconds float64 `json:"first_verdicts_s"` // N first verdicts (inserts)

	IngestEvents          int       `json:"ingest_events"`
	RawEventsPerSec       float64   `json:"raw_events_per_s"` // NATS to a subscriber that does nothing: the best round
	RawRounds             []float64 `json:"raw_rounds_per_s"`
	IngestEventsPerSec    float64   `json:"ingest_events_per_s"` // accepted by the run subscriptions
	IngestRatio           float64   `json:"ingest_ratio"`        // ingest / raw
	SettledEventsPerSec   float64   `json:"settled_events_per_s"`
	IngestWritesPerPeriod float64   `json:"ingest_writes_per_period"`
	// The heap the whole process allocated from the ingest's start until
	// every message was taken in and stored (KiB, objects) over its
	// events, and the collections that completed meanwhile.
	IngestAllocKiBPerEvent float64 `json:"ingest_alloc_kib_per_event"`
	IngestAllocsPerEvent   float64 `json:"ingest_allocs_per_event"`
	IngestGCCycles         int     `json:"ingest_gc_cycles"`

	Latency      Latency `json:"latency"`
	BurstSeconds float64 `json:"burst_s"`
	// BurstRounds is every burst of the phase (Config.Bursts); the first
	// one's is BurstSeconds.
	BurstRounds []float64 `json:"burst_rounds_s,omitempty"`
	// BurstFloorSeconds is the burst's floor (burstFloor): the same
	// advances applied by the store alone, in the group commit's groups,
	// on a control table of its own; BurstOverFloor is BurstSeconds over
	// it, and BurstFloorGoCPUUsPerRow the Go CPU of this process per row
	// meanwhile (PostgreSQL's not in it). None with --burst-floor=false.
	BurstFloorSeconds       float64 `json:"burst_floor_s,omitempty"`
	BurstOverFloor          float64 `json:"burst_over_floor,omitempty"`
	BurstFloorGoCPUUsPerRow float64 `json:"burst_floor_go_cpu_us_per_row,omitempty"`
	// Feeders is the cost of tables of one and of several feeders on the
	// control table (ADR 0015).
	Feeders []Feeders `json:"feeders,omitempty"`

	MemPerRunKiB float64 `json:"mem_per_run_kib"` // RSS growth / N, after a forced GC and FreeOSMemory
	// RSSNoGCPerRunKiB is the RSS growth / N as the operating system
	// reports it, read before the forced GC (issue 12's measure).
	RSSNoGCPerRunKiB float64 `json:"rss_no_gc_per_run_kib"`
	HeapPerRunKiB    float64 `json:"heap_per_run_kib"`
	// SimsHeapPerRunKiB is the live heap of the bench's own simulated runs
	// (their ids and progress templates) per run: the load generator's,
	// in the same process. It is in the memory before the service starts,
	// so not in the growth; but the service's memory limit lets the heap
	// grow by its headroom share of the whole live heap, this included
	// (about 0.5 of it in the resident figure without a forced GC).
	SimsHeapPerRunKiB float64 `json:"sims_heap_per_run_kib"`
	StackPerRunKiB    float64 `json:"stack_per_run_kib"`
	GoroutinesPerRun  float64 `json:"goroutines_per_run"`
	// ServiceRSSMiB and ServiceBaseRSSMiB are the service process's
	// resident set (VmRSS) after the first verdicts of N runs and when it
	// was ready with none (ModeServiceProcess only; RSSNoGCPerRunKiB is
	// their difference over N, the others above are not measured).
	ServiceRSSMiB     float64 `json:"service_rss_mib,omitempty"`
	ServiceBaseRSSMiB float64 `json:"service_base_rss_mib,omitempty"`
	// ServiceExitCodes are the service process's exit codes, one per
	// start, on SIGTERM (ModeServiceProcess only): 0 is a clean stop.
	ServiceExitCodes []int `json:"service_exit_codes,omitempty"`

	// Idle is the idle phase's CPU, nil when it did not run.
	Idle *Idle `json:"idle,omitempty"`

	RecoverySeconds      float64 `json:"recovery_s"`       // start until N verdicts re-applied
	RecoveryStartSeconds float64 `json:"recovery_start_s"` // the start itself (open, migrate, dial, stream, Recover); the verdicts may land before it returns

	// AdvanceRetries and AdvanceFailures count advances retried and given
	// up (until the next event) by the service; both 0 in a clean run.
	AdvanceRetries  int `json:"advance_retries"`
	AdvanceFailures int `json:"advance_failures"`
	// NATSSlowConsumer, NATSDropped and NATSDisconnects are the service's
	// NATS connection's slow-consumer errors, messages its event
	// subscription dropped, and disconnections with an error, over every
	// phase (both starts of the service); all 0 in a clean run.
	NATSSlowConsumer int64 `json:"nats_slow_consumer"`
	NATSDropped      int64 `json:"nats_dropped"`
	NATSDisconnects  int64 `json:"nats_disconnects"`
	// LoadBefore and LoadAfter are the machine's 1-minute load average at
	// the start and the end: other work on the machine shows here.
	LoadBefore float64 `json:"load_before"`
	LoadAfter  float64 `json:"load_after"`

	Naive  *Baseline `json:"naive,omitempty"`
	Ratios *Ratios   `json:"vs_naive,omitempty"`
}

// The modes of Result.Mode.
const (
	ModeInProcess      = "in-process"
	ModeServiceProcess = "service-process"
)

func div(a, b float64) float64 {
	if b == 0 {
		return 0
	}
	return a / b
}

func (r *Result) ratios() {
	r.IngestRatio = div(r.IngestEventsPerSec, r.RawEventsPerSec)
	if r.Naive == nil {
		return
	}
	r.Ratios = &Ratios{
		Ingest:       div(r.SettledEventsPerSec, r.Naive.IngestEventsPerSec),
		IngestWrites: div(r.Naive.IngestWritesPerPeriod, r.IngestWritesPerPeriod),
		Writes:       div(r.Naive.Latency.WritesPerPeriod, r.Latency.WritesPerPeriod),
		LatencyP99:   div(r.Naive.Latency.P99Ms, r.Latency.P99Ms),
		Burst:        div(r.Naive.BurstSeconds, r.BurstSeconds),
	}
}

// JSON returns the result as one line of JSON.
func (r *Result) JSON() []byte {
	b, _ := json.Marshal(r)
	return b
}

// latencyTarget is issue 12's p99 target for the latency phase at rate
// events/s ("-" for a rate it sets none for).
func latencyTarget(rate float64) string {
	switch rate {
	case 1000:
		return "p99 < 5 at 10k, < 10 at 100k"
	case 10000:
		return "p99 < 20 at 10k"
	}
	return "-"
}

// WriteTable prints the results as a table, with the targets of issue 12
// (10,000 and 100,000 runs on 2 cores; the memory after a GC is issue
// 5's).
func (r *Result) WriteTable(w io.Writer) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "finalizer bench (%s): N=%d runs (%s tracking), %d CPUs, %s, PostgreSQL %s, progress %d B\n",
		r.Mode, r.Runs, r.Tracking, r.CPUs, r.GoVersion, r.Postgres, r.MsgBytes)
	fmt.Fprintln(tw, "MEASURE\tSERVICE\tNAIVE\tTARGET")
	naive := func(f func(b *Baseline) string) string {
		if r.Naive == nil {
			return "-"
		}
		return f(r.Naive)
	}
	row := func(name, svc, nv, target string) { fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", name, svc, nv, target) }
	// phase is row for a phase's figure: "skipped", with no target, when
	// the phase did not run (--latency-only and the like), so that a
	// zero never reads as a target met.
	phase := func(ran bool, name, svc, nv, target string) {
		if !ran {
			row(name, "skipped", "", "")
			return
		}
		row(name, svc, nv, target)
	}
	rawRan, ingestRan, latencyRan, burstRan := len(r.RawRounds) > 0, r.IngestEvents > 0, r.Latency.Events > 0, len(r.BurstRounds) > 0
	phase(rawRan, fmt.Sprintf("raw NATS delivery, best of %d (events/s)", len(r.RawRounds)), fmt.Sprintf("%.0f", r.RawEventsPerSec), "", "")
	phase(ingestRan, "ingest, accepted (events/s)", fmt.Sprintf("%.0f", r.IngestEventsPerSec),
		naive(func(b *Baseline) string { return fmt.Sprintf("%.0f", b.IngestEventsPerSec) }), "")
	phase(ingestRan && rawRan, "ingest / raw NATS", fmt.Sprintf("%.2f", r.IngestRatio),
		naive(func(b *Baseline) string { return fmt.Sprintf("%.2f", div(b.IngestEventsPerSec, r.RawEventsPerSec)) }), ">= 0.90 at 10k")
	phase(ingestRan, "ingest, verdicts committed (events/s)", fmt.Sprintf("%.0f", r.SettledEventsPerSec),
		naive(func(b *Baseline) string { return fmt.Sprintf("%.0f", b.IngestEventsPerSec) }), "")
	phase(ingestRan, "writes per (table, period), ingest", fmt.Sprintf("%.2f", r.IngestWritesPerPeriod),
		naive(func(b *Baseline) string { return fmt.Sprintf("%.2f", b.IngestWritesPerPeriod) }), "<= 1.00")
	lat := func(l Latency) string {
		return fmt.Sprintf("%.1f / %.1f / %.1f", l.P50Ms, l.P99Ms, l.MaxMs)
	}
	phase(latencyRan, fmt.Sprintf("latency p50/p99/max (ms) at %.0f ev/s", r.Rate), lat(r.Latency),
		naive(func(b *Baseline) string { return lat(b.Latency) }), latencyTarget(r.Rate))
	phase(latencyRan, "  crossings measured (missing)", fmt.Sprintf("%d (%d)", r.Latency.Probes, r.Latency.Missing),
		naive(func(b *Baseline) string { return fmt.Sprintf("%d (%d)", b.Latency.Probes, b.Latency.Missing) }), "")
	if r.Latency.CommitProbes > 0 {
		row("  a lone commit beside it, p50/p99/max (ms); p99 / its p99", fmt.Sprintf("%s; %.2f", lat(Latency{P50Ms: r.Latency.CommitP50Ms, P99Ms: r.Latency.CommitP99Ms, MaxMs: r.Latency.CommitMaxMs}), r.Latency.P99OverCommitP99),
			naive(func(b *Baseline) string {
				if b.Latency.CommitProbes == 0 {
					return ""
				}
				return fmt.Sprintf("%s; %.2f", lat(Latency{P50Ms: b.Latency.CommitP50Ms, P99Ms: b.Latency.CommitP99Ms, MaxMs: b.Latency.CommitMaxMs}), b.Latency.P99OverCommitP99)
			}), "")
	}
	phase(latencyRan, "writes per (table, period), steady", fmt.Sprintf("%.2f", r.Latency.WritesPerPeriod),
		naive(func(b *Baseline) string { return fmt.Sprintf("%.2f", b.Latency.WritesPerPeriod) }), "1.00")
	phase(burstRan, fmt.Sprintf("burst: %d tables committed (s)", r.Runs), fmt.Sprintf("%.3f", r.BurstSeconds),
		naive(func(b *Baseline) string { return fmt.Sprintf("%.3f", b.BurstSeconds) }), "< 0.25 at 10k, < 2 at 100k")
	if r.BurstFloorSeconds > 0 {
		row("  its floor: the same advances by the store alone (s); burst / floor", fmt.Sprintf("%.3f; %.2f", r.BurstFloorSeconds, r.BurstOverFloor), "", "")
	}
	for _, f := range r.Feeders {
		row(fmt.Sprintf("%d feeder(s) per table: advances / settles", f.FeedersPerTable),
			fmt.Sprintf("%.2f / %.2f", f.AdvancesPerPeriod, f.SettlesPerPeriod), "", fmt.Sprintf("<= %d / -", f.FeedersPerTable))
		row("  moves of the table", fmt.Sprintf("%.2f", f.MovesPerPeriod), "", "1.00")
		row(fmt.Sprintf("  %d tables, one period (ms)", f.Tables), fmt.Sprintf("%.1f", f.MsPerPeriod), "", "")
	}
	row("memory per tracked run (KiB RSS), no forced GC", fmt.Sprintf("%.1f", r.RSSNoGCPerRunKiB), "", "< 8 at 100k")
	if r.Mode == ModeServiceProcess {
		row("  the service process's VmRSS, ready / with N runs (MiB)", fmt.Sprintf("%.1f / %.1f", r.ServiceBaseRSSMiB, r.ServiceRSSMiB), "", "")
		row("  its exit codes on SIGTERM", fmt.Sprint(r.ServiceExitCodes), "", "[0 0]")
	} else {
		row("memory per tracked run (KiB RSS), after a GC", fmt.Sprintf("%.1f", r.MemPerRunKiB), "", "")
		row("  heap / stacks (KiB), goroutines", fmt.Sprintf("%.1f / %.1f, %.1f", r.HeapPerRunKiB, r.StackPerRunKiB, r.GoroutinesPerRun), "", "")
		row("  the load generator's simulated runs, live heap (KiB)", fmt.Sprintf("%.1f", r.SimsHeapPerRunKiB), "", "")
	}
	if i := r.Idle; i != nil {
		row(fmt.Sprintf("idle: %d runs, an idle event each per %s: service (share of a core), median of %d", r.Runs, IdleInterval, i.Rounds),
			fmt.Sprintf("%.3f%s", i.IdleEventsServiceCoreShare, spread(i.IdleEventsServiceRounds)), "", "< 0.05")
		row(fmt.Sprintf("  a progress with new data each per %s instead: service", IdleInterval),
			fmt.Sprintf("%.3f%s", i.ServiceCoreShare, spread(i.ServiceRounds)), "", "")
		row("  at rest, nothing published (the service process's, or this process's)", fmt.Sprintf("%.3f", i.RestCoreShare), "", "")
		row("  process, idle events / new data; load generator, idle events / new data", fmt.Sprintf("%.3f / %.3f; %.3f / %.3f", i.IdleEventsTotalCoreShare, i.TotalCoreShare, i.IdleEventsGeneratorCoreShare, i.GeneratorCoreShare), "", "")
		if r.Mode == ModeServiceProcess {
			row("  the NATS server (bench process - generator), idle events / new data", fmt.Sprintf("%.3f / %.3f", i.IdleEventsNATSCoreShare, i.NATSCoreShare), "", "")
		}
	}
	phase(r.RecoverySeconds > 0, fmt.Sprintf("recovery of %d runs (s)", r.Runs), fmt.Sprintf("%.3f", r.RecoverySeconds), "", "< 10 at 100k")
	phase(r.RecoverySeconds > 0, "  start and Recover returned after (s; the verdicts may land first)", fmt.Sprintf("%.3f", r.RecoveryStartSeconds), "", "")
	row("track N runs / N first verdicts (s)", fmt.Sprintf("%.3f / %.3f", r.TrackSeconds, r.FirstVerdictsSeconds), "", "")
	row("advance retries / failures", fmt.Sprintf("%d / %d", r.AdvanceRetries, r.AdvanceFailures), "", "0 / 0")
	row("NATS slow consumer / dropped / disconnects", fmt.Sprintf("%d / %d / %d", r.NATSSlowConsumer, r.NATSDropped, r.NATSDisconnects), "", "0 / 0 / 0")
	row("load average before / after", fmt.Sprintf("%.2f / %.2f", r.LoadBefore, r.LoadAfter), "", "")
	if r.Ratios != nil {
		fmt.Fprintf(tw, "vs naive: ingest %.1fx, writes %.1fx fewer (ingest %.1fx), p99 %.1fx, burst %.1fx\n",
			r.Ratios.Ingest, r.Ratios.Writes, r.Ratios.IngestWrites, r.Ratios.LatencyP99, r.Ratios.Burst)
	}
	return tw.Flush()
}

// Idle is the CPU the process spent while every run posted one event every
// IdleInterval, as shares of one core (1.0 is a core busy): a
// QueryIdleEvent (a run without new data, Spark's idle rhythm), and in a
// second window a progress with new data (a run that trickles).
type Idle struct {
	Seconds      float64 `json:"seconds"`
	EventsPerSec float64 `json:"events_per_s"`
	// TotalCoreShare is the whole process: service, embedded NATS server
	// and the load generator.
	TotalCoreShare float64 `json:"total_core_share"`
	// GeneratorCoreShare is the load generator's, measured publishing at
	// the same rate to a subject without interest.
	GeneratorCoreShare float64 `json:"generator_core_share"`
	// ServiceCoreShare is TotalCoreShare - GeneratorCoreShare: the
	// service and the NATS server's storing and delivering of its events.
	ServiceCoreShare float64 `json:"service_core_share"`
	// IdleEventsTotalCoreShare and IdleEventsServiceCoreShare are the same
	// while every run posts a QueryIdleEvent instead of a progress.
	IdleEventsTotalCoreShare   float64 `json:"idle_events_total_core_share"`
	IdleEventsServiceCoreShare float64 `json:"idle_events_service_core_share"`
	// NATSCoreShare and IdleEventsNATSCoreShare (ModeServiceProcess
	// only) are the bench process's CPU (the NATS server, the publisher,
	// the observer) less the generator's: what the NATS server spends
	// storing and delivering the events. ServiceCoreShare and
	// IdleEventsServiceCoreShare are then the service process's own CPU
	// (/proc/<pid>/stat), nothing subtracted, and the total ones the sum
	// of both processes.
	NATSCoreShare           float64 `json:"nats_core_share,omitempty"`
	IdleEventsNATSCoreShare float64 `json:"idle_events_nats_core_share,omitempty"`
	// RestCoreShare is the CPU with nothing published, over a baseline
	// window before the rounds: the service process's (ModeServiceProcess)
	// or this whole process's (the service, the NATS server, the
	// observer).
	RestCoreShare float64 `json:"rest_core_share"`
	// IdleEventsSent and IdleEventsAccepted count the idle events of
	// that window: published, and taken in by the runs' subscriptions.
	IdleEventsSent     int   `json:"idle_events_sent"`
	IdleEventsAccepted int64 `json:"idle_events_accepted"`
	// Rounds is how many times each window was measured; the shares
	// above are the medians of the rounds (the generator's of every
	// baseline window).
	Rounds int `json:"rounds"`
	// IdleEventsGeneratorCoreShare is the generator's share publishing
	// idle events (GeneratorCoreShare: progress documents).
	IdleEventsGeneratorCoreShare float64 `json:"idle_events_generator_core_share"`
	// IdleEventsServiceRounds and ServiceRounds are every round's service
	// share (the spread of the medians above), IdleEventsGeneratorRounds
	// and GeneratorRounds every round's generator share (the mean of the
	// baselines right before and after its window).
	IdleEventsServiceRounds   []float64 `json:"idle_events_service_rounds"`
	ServiceRounds             []float64 `json:"service_rounds"`
	IdleEventsGeneratorRounds []float64 `json:"idle_events_generator_rounds"`
	GeneratorRounds           []float64 `json:"generator_rounds"`
	// IdleEventsGCCycles and IdleEventsGCMarkCPUSeconds are the
	// collections that ended in the idle events' windows, and the CPU
	// their marking took, over every round.
	IdleEventsGCCycles         uint64  `json:"idle_events_gc_cycles"`
	IdleEventsGCMarkCPUSeconds float64 `json:"idle_events_gc_mark_cpu_s"`
	// IdleEventsSwitchesPerEvent is the median over the rounds of the
	// context switches per idle event in the idle events' window: the
	// service process's threads' (/proc/<pid>/task/*/status), or in
	// process this process's (getrusage) less the generator's baseline
	// windows' per event. Most of the idle cost is the kernel switching
	// threads (BENCHMARKS.md, "Idle cost (sixth pass)").
	IdleEventsSwitchesPerEvent       float64   `json:"idle_events_switches_per_event"`
	IdleEventsSwitchesPerEventRounds []float64 `json:"idle_events_switches_per_event_rounds,omitempty"`
}
