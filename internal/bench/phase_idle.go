package bench

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"runtime/pprof"
	"slices"
	"time"

	"github.com/finalizer-dev/finalizer/internal/cputime"
)

// IdleInterval is how often every run posts one event in the idle phase:
// a Spark query's idle rhythm (an event every 10 s when no data arrives,
// spark.sql.streaming.noDataProgressEventInterval).
const IdleInterval = 10 * time.Second

// DefaultIdleRounds is how many times the idle phase measures each window
// when Config.IdleRounds is 0.
const DefaultIdleRounds = 3

// idleLoad is what the runs post in one window of the idle phase.
type idleLoad int

const (
	// loadBaseline: the generator alone, a progress with new data to a
	// subject without interest.
	loadBaseline idleLoad = iota
	// loadBaselineIdle: the generator alone, an idle event to a subject
	// without interest.
	loadBaselineIdle
	// loadProgress: a new batch with new data (its time moves on; one in
	// per-period crosses a period and commits).
	loadProgress
	// loadIdleEvent: a QueryIdleEvent (Spark 3.5+), what a run without
	// new data posts every IdleInterval.
	loadIdleEvent
)

func (l idleLoad) String() string {
	switch l {
	case loadProgress:
		return "progress"
	case loadIdleEvent:
		return "events"
	case loadBaselineIdle:
		return "baseline-events"
	}
	return "baseline"
}

// idleWindowResult is what one window of the idle phase measured.
type idleWindowResult struct {
	share float64 // the process's CPU over the window, a share of one core
	// svcShare is the service process's (--service-process), 0 in
	// process.
	svcShare float64
	sent     int
	cycles   uint64  // collections that ended in the window
	markS    float64 // CPU seconds the collector's marking took in it
	// switches are the context switches of this process's threads over
	// the window; svcSwitches the service process's (0 in process).
	switches, svcSwitches int64
}

// idle measures what N quiet runs cost the service: every run posts one
// event every IdleInterval, spread evenly, for cfg.Idle, a QueryIdleEvent
// (a run that has no new data: Spark's idle rhythm) in one window, a
// progress with new data (a run that trickles) in the other; the process's
// CPU time (getrusage) over each window is divided by its wall time. The
// process also holds the load generator (the publisher) and the embedded
// NATS server; the generator's share is measured publishing the same
// documents at the same rate to a subject nobody subscribes to and no
// stream stores (idle events for the idle events' window: a progress
// document is about 2 KB, an idle event a few hundred bytes), in a
// baseline window (cfg.Idle/2) right before and right after every measured
// window, and the mean of the two is subtracted from it. What is left is
// the service plus what the NATS server spends storing and delivering its
// events (its reading of the published messages is in the baseline too,
// and is subtracted). The pair of windows is measured IdleRounds times,
// and the median of the rounds is the result, every round's figure beside
// it: one window's figure moves with a collection landing in it or not,
// and with the machine's other tenants.
func (r *runner) idle(ctx context.Context, svc underTest) error {
	rate := float64(len(r.sims)) / IdleInterval.Seconds()
	rounds := r.cfg.IdleRounds
	if rounds <= 0 {
		rounds = DefaultIdleRounds
	}
	base := max(r.cfg.Idle/2, 2*time.Second)
	res := &Idle{Seconds: r.cfg.Idle.Seconds(), EventsPerSec: rate, Rounds: rounds}
	// At rest first: nothing published for a baseline window, what the
	// service costs with N runs tracked and no event at all (its timers,
	// the collector, the status page's refreshes in a service process).
	rest, err := r.restWindow(ctx, base)
	if err != nil {
		return err
	}
	res.RestCoreShare = rest
	r.say("idle: at rest (nothing published for %s): %.1f%% of one core (%s)", base, 100*rest,
		map[bool]string{true: "the service process", false: "this process: the service, the NATS server, the observer"}[r.child != nil])
	var quietTotals, totals []float64
	// With a service process: its own CPU per round, and the bench
	// process's less the generator's (the NATS server's).
	var svcQuiet, svcTotal, natsQuiet, natsTotal []float64
	for round := 1; round <= rounds; round++ {
		// Each measured window between two baselines of the same
		// documents: idle events, then progress documents.
		prevI, err := r.idleWindow(ctx, rate, base, loadBaselineIdle, round)
		if err != nil {
			return err
		}
		idles0 := svc.idles()
		quiet, err := r.idleWindow(ctx, rate, r.cfg.Idle, loadIdleEvent, round)
		if err != nil {
			return err
		}
		// Every idle event must have reached its run: a refused one would
		// make the window cheap for the wrong reason.
		deadline := time.Now().Add(r.cfg.WaitTimeout)
		for svc.idles()-idles0 < int64(quiet.sent) && time.Now().Before(deadline) && ctx.Err() == nil {
			time.Sleep(10 * time.Millisecond)
		}
		res.IdleEventsSent += quiet.sent
		res.IdleEventsAccepted += svc.idles() - idles0
		nextI, err := r.idleWindow(ctx, rate, base, loadBaselineIdle, round)
		if err != nil {
			return err
		}
		prev, err := r.idleWindow(ctx, rate, base, loadBaseline, round)
		if err != nil {
			return err
		}
		total, err := r.idleWindow(ctx, rate, r.cfg.Idle, loadProgress, round)
		if err != nil {
			return err
		}
		next, err := r.idleWindow(ctx, rate, base, loadBaseline, round)
		if err != nil {
			return err
		}
		qgen, gen := (prevI.share+nextI.share)/2, (prev.share+next.share)/2
		res.IdleEventsGeneratorRounds, res.GeneratorRounds = append(res.IdleEventsGeneratorRounds, qgen), append(res.GeneratorRounds, gen)
		quietTotals, totals = append(quietTotals, quiet.share), append(totals, total.share)
		quietLess, totalLess := max(quiet.share-qgen, 0), max(total.share-gen, 0)
		if r.child != nil {
			svcQuiet, svcTotal = append(svcQuiet, quiet.svcShare), append(svcTotal, total.svcShare)
			natsQuiet, natsTotal = append(natsQuiet, quietLess), append(natsTotal, totalLess)
			quietTotals[len(quietTotals)-1] += quiet.svcShare
			totals[len(totals)-1] += total.svcShare
			quietLess, totalLess = quiet.svcShare, total.svcShare
		}
		res.IdleEventsServiceRounds = append(res.IdleEventsServiceRounds, quietLess)
		res.ServiceRounds = append(res.ServiceRounds, totalLess)
		res.IdleEventsGCCycles += quiet.cycles
		res.IdleEventsGCMarkCPUSeconds += quiet.markS
		// Context switches per idle event: the service process's own, or
		// in process the whole process's less the generator's windows'
		// (per event sent, the baselines' mean).
		if quiet.sent > 0 {
			sw := float64(quiet.svcSwitches) / float64(quiet.sent)
			if r.child == nil {
				sw = float64(quiet.switches) / float64(quiet.sent)
				if n := prevI.sent + nextI.sent; n > 0 {
					sw -= float64(prevI.switches+nextI.switches) / float64(n)
				}
			}
			res.IdleEventsSwitchesPerEventRounds = append(res.IdleEventsSwitchesPerEventRounds, sw)
		}
		sw := 0.0
		if n := len(res.IdleEventsSwitchesPerEventRounds); n > 0 {
			sw = res.IdleEventsSwitchesPerEventRounds[n-1]
		}
		r.say("idle: round %d of %d: idle events %.1f%% of one core (process %.1f%%, generator %.1f%%, %d collections, %.2f context switches per event), a progress with new data %.1f%% (process %.1f%%, generator %.1f%%)",
			round, rounds, 100*res.IdleEventsServiceRounds[round-1], 100*quiet.share, 100*qgen, quiet.cycles, sw,
			100*res.ServiceRounds[round-1], 100*total.share, 100*gen)
	}
	res.IdleEventsServiceCoreShare, res.IdleEventsTotalCoreShare = median(res.IdleEventsServiceRounds), median(quietTotals)
	res.IdleEventsSwitchesPerEvent = median(res.IdleEventsSwitchesPerEventRounds)
	res.ServiceCoreShare, res.TotalCoreShare = median(res.ServiceRounds), median(totals)
	res.IdleEventsGeneratorCoreShare, res.GeneratorCoreShare = median(res.IdleEventsGeneratorRounds), median(res.GeneratorRounds)
	r.res.Idle = res
	if r.child != nil {
		res.IdleEventsNATSCoreShare, res.NATSCoreShare = median(natsQuiet), median(natsTotal)
		r.say("idle: %d runs posting one idle event every %s (%.0f events/s), %d rounds of %s: the service process %.1f%% of one core, median (rounds %s), the NATS server %.1f%% (rounds %s; generator %.1f%%)",
			len(r.sims), IdleInterval, rate, rounds, r.cfg.Idle, 100*res.IdleEventsServiceCoreShare, percents(svcQuiet), 100*res.IdleEventsNATSCoreShare, percents(natsQuiet), 100*res.IdleEventsGeneratorCoreShare)
		r.say("idle: %d runs posting one progress with new data every %s (%.0f events/s), %d rounds of %s: the service process %.1f%% of one core, median (rounds %s), the NATS server %.1f%% (rounds %s)",
			len(r.sims), IdleInterval, rate, rounds, r.cfg.Idle, 100*res.ServiceCoreShare, percents(svcTotal), 100*res.NATSCoreShare, percents(natsTotal))
		return nil
	}
	r.say("idle: %d runs posting one idle event every %s (%.0f events/s), %d rounds of %s: the service %.1f%% of one core, median (rounds %s; process %.1f%%, generator %.1f%%)",
		len(r.sims), IdleInterval, rate, rounds, r.cfg.Idle, 100*res.IdleEventsServiceCoreShare, percents(res.IdleEventsServiceRounds), 100*res.IdleEventsTotalCoreShare, 100*res.IdleEventsGeneratorCoreShare)
	r.say("idle: %d runs posting one progress with new data every %s (%.0f events/s), %d rounds of %s: the service %.1f%% of one core, median (rounds %s; process %.1f%%, generator %.1f%%)",
		len(r.sims), IdleInterval, rate, rounds, r.cfg.Idle, 100*res.ServiceCoreShare, percents(res.ServiceRounds), 100*res.TotalCoreShare, 100*res.GeneratorCoreShare)
	return nil
}

// median returns the median of xs (the mean of the middle two for an even
// count), 0 for none.
func median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Sorted(slices.Values(xs))
	if n := len(s); n%2 == 0 {
		return (s[n/2-1] + s[n/2]) / 2
	}
	return s[len(s)/2]
}

// percents formats shares of a core as percentages: "5.1%, 6.3%".
func percents(xs []float64) string {
	var b []byte
	for i, x := range xs {
		if i > 0 {
			b = append(b, ", "...)
		}
		b = fmt.Appendf(b, "%.1f%%", 100*x)
	}
	return string(b)
}

// restWindow publishes nothing for d and returns the CPU over it as a
// share of one core: the service process's, or this process's in
// process.
func (r *runner) restWindow(ctx context.Context, d time.Duration) (float64, error) {
	cpu := cputime.Process
	if r.child != nil {
		cpu = r.child.cpu
	}
	cpu0, start := cpu(), time.Now()
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return 0, ctx.Err()
	case <-t.C:
	}
	return (cpu() - cpu0).Seconds() / time.Since(start).Seconds(), nil
}

// idleWindow publishes load at rate for d (the baseline to a subject
// without interest, the others to the runs), and returns the process's CPU
// time over the window as a share of one core, with the collections in
// it. The verdicts the window's events move are waited for after the
// window. With a profile directory, the window's CPU profile is
// cpu-idle-<load>-<round>.pprof (CPU only: the block and mutex profiles
// of the other phases would weigh on what is measured); `go tool pprof
// -top cpu-idle-events-*.pprof` sums the rounds.
func (r *runner) idleWindow(ctx context.Context, rate float64, d time.Duration, load idleLoad, round int) (res idleWindowResult, err error) {
	if r.cfg.ProfileDir != "" {
		f, err := os.Create(filepath.Join(r.cfg.ProfileDir, fmt.Sprintf("cpu-idle-%s-%d.pprof", load, round)))
		if err != nil {
			return res, err
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return res, err
		}
		defer pprof.StopCPUProfile()
	}
	touched := make(map[string]time.Time)
	stats := newRuntimeStats()
	rt0 := stats.read()
	childCPU := func() time.Duration { return 0 }
	childSwitches := func() int64 { return 0 }
	if r.child != nil {
		childCPU, childSwitches = r.child.cpu, r.child.switches
	}
	sw0, svcSw0 := cputime.Switches(), childSwitches()
	svc0, cpu0, start := childCPU(), cputime.Process(), time.Now()
	for {
		elapsed := time.Since(start)
		if elapsed >= d {
			break
		}
		for due := int(elapsed.Seconds() * rate); res.sent < due; res.sent++ {
			s := r.sims[r.rr%len(r.sims)]
			r.rr++
			switch load {
			case loadBaseline:
				r.buf = s.progress(r.buf, s.last+1, r.clk.at(s, s.last+1))
				if err := r.pub.Publish("bench-idle-baseline."+s.queryID, r.buf); err != nil {
					return res, fmt.Errorf("publish: %w", err)
				}
				continue
			case loadBaselineIdle:
				r.buf = s.idleEvent(r.buf, time.Now())
				if err := r.pub.Publish("bench-idle-baseline."+s.queryID, r.buf); err != nil {
					return res, fmt.Errorf("publish: %w", err)
				}
				continue
			case loadIdleEvent:
				r.buf = s.idleEvent(r.buf, time.Now())
				if err := r.pub.Publish(s.idleSubject, r.buf); err != nil {
					return res, fmt.Errorf("publish: %w", err)
				}
				continue
			}
			k := s.last + 1
			if _, err := r.publishProgress(s, k); err != nil {
				return res, err
			}
			touched[s.table] = r.clk.period(s, k)
		}
		if err := ctx.Err(); err != nil {
			return res, err
		}
		time.Sleep(time.Until(start.Add(time.Duration(float64(res.sent+1) / rate * float64(time.Second)))))
	}
	if err := r.pub.Flush(); err != nil {
		return res, err
	}
	wall := time.Since(start).Seconds()
	res.share, res.svcShare = (cputime.Process()-cpu0).Seconds()/wall, (childCPU()-svc0).Seconds()/wall
	res.switches, res.svcSwitches = cputime.Switches()-sw0, childSwitches()-svcSw0
	rt1 := stats.read()
	res.cycles, res.markS = rt1.cycles-rt0.cycles, rt1.markS-rt0.markS
	if len(touched) > 0 {
		if _, err := r.waitVerdicts(ctx, "idle", touched); err != nil {
			return res, err
		}
	}
	return res, nil
}
