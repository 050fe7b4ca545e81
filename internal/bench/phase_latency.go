package bench

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"
)

// latency publishes the background load at Rate for Duration, one run
// after the other, and measures every period-crossing progress from its
// publication to its committed verdict. writes reads the control writes
// so far.
func (r *runner) latency(ctx context.Context, writes func() float64, out *Latency) error {
	// Settled, as the ingest's: the first verdicts are heard through
	// LISTEN as they commit, and their trackers count their writes after
	// that, on the pool; counted in this phase, they made it 1.74 writes
	// per (table, period) in a CI run on a loaded machine.
	writes0 := r.settle(ctx, writes)
	crossings, sent := 0, 0
	touched := make(map[string]time.Time)
	rt := newRuntimeStats()
	rt0 := rt.read()
	svc0, svcOK := r.childRuntime()
	start := time.Now()
	watch := startMarkWatch(ctx)
	defer func() {
		if watch != nil {
			watch.finish()
		}
	}()
	probeRate := r.cfg.CommitProbeRate
	if r.cfg.NoCommitProbe {
		probeRate = 0
	}
	probe, err := r.startCommitProbe(ctx, probeRate)
	if err != nil {
		return err
	}
	defer func() { _, _ = probe.finish() }()
	for {
		elapsed := time.Since(start)
		if elapsed >= r.cfg.Duration {
			break
		}
		due := int(elapsed.Seconds() * r.cfg.Rate)
		for ; sent < due; sent++ {
			s := r.sims[r.rr%len(r.sims)]
			r.rr++
			k := s.last + 1
			if r.clk.crossing(s, k) {
				crossings++
				r.obs.expect(s.table, r.clk.period(s, k), time.Now())
			}
			if _, err := r.publishProgress(s, k); err != nil {
				return err
			}
			touched[s.table] = r.clk.period(s, k)
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		next := start.Add(time.Duration(float64(sent+1) / r.cfg.Rate * float64(time.Second)))
		time.Sleep(time.Until(next))
	}
	if err := r.pub.Flush(); err != nil {
		return err
	}
	commits, probeErr := probe.finish()
	if probeErr != nil {
		return fmt.Errorf("commit probe: %w", probeErr)
	}
	if _, err := r.waitVerdicts(ctx, "latency", touched); err != nil {
		return err
	}
	rt1 := rt.read()
	marks := watch.finish()
	watch = nil
	out.GCCycles = int(rt1.cycles - rt0.cycles)
	out.GCMarkCPUS = rt1.markS - rt0.markS
	out.SchedP99Ms = schedQuantile(rt0, rt1, 0.99) * 1000
	out.SchedP999Ms = schedQuantile(rt0, rt1, 0.999) * 1000
	out.AllocKiBPerEvent = float64(rt1.allocs-rt0.allocs) / 1024 / float64(max(sent, 1))
	out.AllocsPerEvent = float64(rt1.objects-rt0.objects) / float64(max(sent, 1))
	if svc1, ok := r.childRuntime(); ok && svcOK {
		out.ServiceAllocKiBPerEvent = (svc1.alloc - svc0.alloc) / 1024 / float64(max(sent, 1))
		out.ServiceGCCycles = int(svc1.gcs - svc0.gcs)
		r.say("latency: the service process allocated %.1f KiB per event, %d collections", out.ServiceAllocKiBPerEvent, out.ServiceGCCycles)
	}
	heard, missing := r.obs.takeLatencies()
	if r.cfg.ProfileDir != "" {
		if err := writeProbes(filepath.Join(r.cfg.ProfileDir, "latency-probes.csv"), heard, marks); err != nil {
			return err
		}
	}
	lat := make([]time.Duration, len(heard))
	var in, outside []time.Duration
	for i, h := range heard {
		lat[i] = h.latency
		if overlaps(marks, h.published, h.published.Add(h.latency)) {
			in = append(in, h.latency)
		} else {
			outside = append(outside, h.latency)
		}
	}
	out.Events = sent
	out.Probes = len(lat)
	out.Missing = missing
	out.P50Ms, out.P99Ms, out.MaxMs = quantiles(lat)
	out.GCMarks = len(marks)
	for _, m := range marks {
		out.GCMarkingS += m.to.Sub(m.from).Seconds()
	}
	out.ProbesInMarks = len(in)
	_, out.P99MsInMarks, _ = quantiles(in)
	_, out.P99MsOutsideMarks, _ = quantiles(outside)
	out.WritesPerPeriod = (r.settle(ctx, writes) - writes0) / float64(max(crossings, 1))
	out.CommitProbes = len(commits)
	out.CommitP50Ms, out.CommitP99Ms, out.CommitMaxMs = quantiles(commits)
	if out.CommitP99Ms > 0 {
		out.P99OverCommitP99 = out.P99Ms / out.CommitP99Ms
	}
	r.say("latency at %.0f events/s for %s: %d crossings, p50 %.2f ms, p99 %.2f ms, max %.2f ms, %.2f writes per (table, period); "+
		"%d collections (%.2f s of marking CPU), %.1f KiB allocated per event, scheduling latency p99 %.2f ms, p99.9 %.2f ms; "+
		"%d marks over %.2f s of the phase, %d crossings met one (p99 %.2f ms), p99 of the others %.2f ms",
		r.cfg.Rate, r.cfg.Duration, out.Probes, out.P50Ms, out.P99Ms, out.MaxMs, out.WritesPerPeriod,
		out.GCCycles, out.GCMarkCPUS, out.AllocKiBPerEvent, out.SchedP99Ms, out.SchedP999Ms,
		out.GCMarks, out.GCMarkingS, out.ProbesInMarks, out.P99MsInMarks, out.P99MsOutsideMarks)
	if out.CommitProbes > 0 {
		r.say("latency: a lone commit beside it (%d at %.0f/s, one row and a NOTIFY): p50 %.2f ms, p99 %.2f ms, max %.2f ms; the crossings' p99 is %.2f times its p99",
			out.CommitProbes, probeRate, out.CommitP50Ms, out.CommitP99Ms, out.CommitMaxMs, out.P99OverCommitP99)
	}
	return nil
}

// quantiles sorts lat and returns its p50, p99 and max in milliseconds
// (zeros when it is empty).
func quantiles(lat []time.Duration) (p50, p99, maxMs float64) {
	if len(lat) == 0 {
		return 0, 0, 0
	}
	slices.Sort(lat)
	return ms(lat[len(lat)/2]), ms(lat[min(len(lat)-1, len(lat)*99/100)]), ms(lat[len(lat)-1])
}

// childRuntime reads the service process's allocated bytes and
// collections from its /metrics (false without --service-process).
func (r *runner) childRuntime() (struct{ alloc, gcs float64 }, bool) {
	var out struct{ alloc, gcs float64 }
	if r.child == nil {
		return out, false
	}
	m, err := r.child.scrape([]string{"go_memstats_alloc_bytes_total", "go_gc_duration_seconds"})
	if err != nil || len(m["go_memstats_alloc_bytes_total"]) == 0 || len(m["go_gc_duration_seconds_count"]) == 0 {
		return out, false
	}
	out.alloc, out.gcs = m["go_memstats_alloc_bytes_total"][0].value, m["go_gc_duration_seconds_count"][0].value
	return out, true
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// writeProbes writes every crossing of the latency phase, one a line:
// when its progress was published (wall clock, UTC, RFC 3339 with
// nanoseconds), its table, the latency in milliseconds and whether a
// collection was marking at some time between the publication and the
// verdict (1) or not (0). With the
// phase's execution trace (--trace; its Sync events carry the wall clock)
// it places each slow crossing on the trace's timeline: what ran, what
// waited and whether a collection was marking then.
func writeProbes(path string, heard []heardProbe, marks []interval) error {
	var b strings.Builder
	b.WriteString("published,table,latency_ms,in_mark\n")
	for _, h := range heard {
		in := 0
		if overlaps(marks, h.published, h.published.Add(h.latency)) {
			in = 1
		}
		fmt.Fprintf(&b, "%s,%s,%.3f,%d\n", h.published.UTC().Format(time.RFC3339Nano), h.table, ms(h.latency), in)
	}
	return os.WriteFile(path, []byte(b.String()), 0o644)
}

// burst makes every run cross into its next period at once (as fast as
// the service takes the messages in when accepted is not nil: see
// publishAll) and returns the time from the first publication to the last
// committed verdict.
func (r *runner) burst(ctx context.Context, accepted func() int64) (float64, error) {
	start, err := r.publishAll(ctx, func(s *sim) int64 { return r.clk.nextCrossing(s, s.last) }, accepted)
	if err != nil {
		return 0, err
	}
	last, err := r.waitVerdicts(ctx, "burst", r.targetsAtLast())
	if err != nil {
		return 0, err
	}
	took := last.Sub(start)
	r.say("burst: %d tables crossing at once, last verdict committed after %s", len(r.sims), took.Round(time.Millisecond))
	return took.Seconds(), nil
}
