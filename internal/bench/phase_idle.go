package bench

import (
	"context"
	"fmt"
	"time"
)

// IdleInterval is how often every run posts one event in the idle phase:
// a Spark query's idle rhythm (an event every 10 s when no data arrives,
// spark.sql.streaming.noDataProgressEventInterval).
const IdleInterval = 10 * time.Second

// idleLoad is what the runs post in one window of the idle phase.
type idleLoad int

const (
	// loadBaseline: the generator alone, to a subject without interest.
	loadBaseline idleLoad = iota
	// loadProgress: a new batch with new data (its time moves on; one in
	// per-period crosses a period and commits).
	loadProgress
	// loadIdleEvent: a QueryIdleEvent (Spark 3.5+), what a run without
	// new data posts every IdleInterval.
	loadIdleEvent
)

// idle measures what N quiet runs cost the service, twice: every run
// posts one event every IdleInterval, spread evenly, for cfg.Idle, first a
// QueryIdleEvent (a run that has no new data: Spark's idle rhythm), then a
// progress with new data (a run that trickles); the process's CPU time
// (getrusage) over each window is divided by its wall time. The process also holds the load generator (the publisher) and
// the embedded NATS server; the generator's share is measured before and
// after, publishing at the same rate to a subject nobody subscribes to
// and no stream stores, and subtracted. What is left is the service plus
// what the NATS server spends storing and delivering its events: an upper
// bound of the service's own cost.
func (r *runner) idle(ctx context.Context, svc *benchService) error {
	rate := float64(len(r.sims)) / IdleInterval.Seconds()
	base := max(r.cfg.Idle/4, 2*time.Second)
	gen1, _, err := r.idleWindow(ctx, rate, base, loadBaseline)
	if err != nil {
		return err
	}
	idles0 := svc.idles.Load()
	quiet, sent, err := r.idleWindow(ctx, rate, r.cfg.Idle, loadIdleEvent)
	if err != nil {
		return err
	}
	// Every idle event must have reached its run: a refused one would
	// make the window cheap for the wrong reason.
	deadline := time.Now().Add(r.cfg.WaitTimeout)
	for svc.idles.Load()-idles0 < int64(sent) && time.Now().Before(deadline) && ctx.Err() == nil {
		time.Sleep(10 * time.Millisecond)
	}
	total, _, err := r.idleWindow(ctx, rate, r.cfg.Idle, loadProgress)
	if err != nil {
		return err
	}
	gen2, _, err := r.idleWindow(ctx, rate, base, loadBaseline)
	if err != nil {
		return err
	}
	gen := (gen1 + gen2) / 2
	r.res.Idle = &Idle{
		Seconds: r.cfg.Idle.Seconds(), EventsPerSec: rate,
		TotalCoreShare: total, GeneratorCoreShare: gen, ServiceCoreShare: max(total-gen, 0),
		IdleEventsTotalCoreShare: quiet, IdleEventsServiceCoreShare: max(quiet-gen, 0),
		IdleEventsSent: sent, IdleEventsAccepted: svc.idles.Load() - idles0,
	}
	r.say("idle: %d runs posting one idle event every %s (%.0f events/s) for %s: the service %.1f%% of one core (process %.1f%%, generator %.1f%%)",
		len(r.sims), IdleInterval, rate, r.cfg.Idle, 100*r.res.Idle.IdleEventsServiceCoreShare, 100*quiet, 100*gen)
	r.say("idle: %d runs posting one progress with new data every %s (%.0f events/s) for %s: the service %.1f%% of one core (process %.1f%%, generator %.1f%%)",
		len(r.sims), IdleInterval, rate, r.cfg.Idle, 100*r.res.Idle.ServiceCoreShare, 100*total, 100*gen)
	return nil
}

// idleWindow publishes load at rate for d (the baseline to a subject
// without interest, the others to the runs), and returns the process's CPU time over the
// window as a share of one core. The verdicts the window's events move
// are waited for after the window.
func (r *runner) idleWindow(ctx context.Context, rate float64, d time.Duration, load idleLoad) (share float64, sent int, err error) {
	touched := make(map[string]time.Time)
	cpu0, start := processCPU(), time.Now()
	for {
		elapsed := time.Since(start)
		if elapsed >= d {
			break
		}
		for due := int(elapsed.Seconds() * rate); sent < due; sent++ {
			s := r.sims[r.rr%len(r.sims)]
			r.rr++
			switch load {
			case loadBaseline:
				r.buf = s.progress(r.buf, s.last+1, r.clk.at(s, s.last+1))
				if err := r.pub.Publish("bench-idle-baseline."+s.queryID, r.buf); err != nil {
					return 0, 0, fmt.Errorf("publish: %w", err)
				}
				continue
			case loadIdleEvent:
				r.buf = s.idleEvent(r.buf, time.Now())
				if err := r.pub.Publish(s.idleSubject, r.buf); err != nil {
					return 0, 0, fmt.Errorf("publish: %w", err)
				}
				continue
			}
			k := s.last + 1
			if _, err := r.publishProgress(s, k); err != nil {
				return 0, 0, err
			}
			touched[s.table] = r.clk.period(s, k)
		}
		if err := ctx.Err(); err != nil {
			return 0, 0, err
		}
		time.Sleep(time.Until(start.Add(time.Duration(float64(sent+1) / rate * float64(time.Second)))))
	}
	if err := r.pub.Flush(); err != nil {
		return 0, 0, err
	}
	share = (processCPU() - cpu0).Seconds() / time.Since(start).Seconds()
	if len(touched) > 0 {
		if _, err := r.waitVerdicts(ctx, "idle", touched); err != nil {
			return 0, 0, err
		}
	}
	return share, sent, nil
}
