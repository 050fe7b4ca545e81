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
	writes0 := writes()
	crossings, sent := 0, 0
	touched := make(map[string]time.Time)
	rt := newRuntimeStats()
	rt0 := rt.read()
	svc0, svcOK := r.childRuntime()
	start := time.Now()
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
	if _, err := r.waitVerdicts(ctx, "latency", touched); err != nil {
		return err
	}
	rt1 := rt.read()
	out.GCCycles = int(rt1.cycles - rt0.cycles)
	out.GCMarkCPUS = rt1.markS - rt0.markS
	out.SchedP99Ms = schedQuantile(rt0, rt1, 0.99) * 1000
	out.SchedP999Ms = schedQuantile(rt0, rt1, 0.999) * 1000
	out.AllocKiBPerEvent = float64(rt1.allocs-rt0.allocs) / 1024 / float64(max(sent, 1))
	if svc1, ok := r.childRuntime(); ok && svcOK {
		out.ServiceAllocKiBPerEvent = (svc1.alloc - svc0.alloc) / 1024 / float64(max(sent, 1))
		out.ServiceGCCycles = int(svc1.gcs - svc0.gcs)
		r.say("latency: the service process allocated %.1f KiB per event, %d collections", out.ServiceAllocKiBPerEvent, out.ServiceGCCycles)
	}
	heard, missing := r.obs.takeLatencies()
	if r.cfg.ProfileDir != "" {
		if err := writeProbes(filepath.Join(r.cfg.ProfileDir, "latency-probes.csv"), heard); err != nil {
			return err
		}
	}
	lat := make([]time.Duration, len(heard))
	for i, h := range heard {
		lat[i] = h.latency
	}
	slices.Sort(lat)
	out.Events = sent
	out.Probes = len(lat)
	out.Missing = missing
	if len(lat) > 0 {
		out.P50Ms = ms(lat[len(lat)/2])
		out.P99Ms = ms(lat[min(len(lat)-1, len(lat)*99/100)])
		out.MaxMs = ms(lat[len(lat)-1])
	}
	out.WritesPerPeriod = (r.settle(ctx, writes) - writes0) / float64(max(crossings, 1))
	r.say("latency at %.0f events/s for %s: %d crossings, p50 %.2f ms, p99 %.2f ms, max %.2f ms, %.2f writes per (table, period); "+
		"%d collections (%.2f s of marking CPU), %.1f KiB allocated per event, scheduling latency p99 %.2f ms, p99.9 %.2f ms",
		r.cfg.Rate, r.cfg.Duration, out.Probes, out.P50Ms, out.P99Ms, out.MaxMs, out.WritesPerPeriod,
		out.GCCycles, out.GCMarkCPUS, out.AllocKiBPerEvent, out.SchedP99Ms, out.SchedP999Ms)
	return nil
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
// nanoseconds), its table and the latency in milliseconds. With the
// phase's execution trace (--trace; its Sync events carry the wall clock)
// it places each slow crossing on the trace's timeline: what ran, what
// waited and whether a collection was marking then.
func writeProbes(path string, heard []heardProbe) error {
	var b strings.Builder
	b.WriteString("published,table,latency_ms\n")
	for _, h := range heard {
		fmt.Fprintf(&b, "%s,%s,%.3f\n", h.published.UTC().Format(time.RFC3339Nano), h.table, ms(h.latency))
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
