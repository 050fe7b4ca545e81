package bench

import (
	"context"
	"fmt"
	"time"
)

// IdleInterval is how often every run posts one progress in the idle
// phase: a Spark query's idle rhythm (a progress every 10 s when no data
// arrives, spark.sql.streaming.noDataProgressEventInterval).
const IdleInterval = 10 * time.Second

// idle measures what N quiet runs cost the service: every run posts one
// progress every IdleInterval, spread evenly, for cfg.Idle, and the
// process's CPU time (getrusage) over that window is divided by its wall
// time. The process also holds the load generator (the publisher) and
// the embedded NATS server; the generator's share is measured before and
// after, publishing at the same rate to a subject nobody subscribes to
// and no stream stores, and subtracted. What is left is the service plus
// what the NATS server spends storing and delivering its events: an upper
// bound of the service's own cost.
func (r *runner) idle(ctx context.Context) error {
	rate := float64(len(r.sims)) / IdleInterval.Seconds()
	base := max(r.cfg.Idle/4, 2*time.Second)
	gen1, err := r.idleWindow(ctx, rate, base, false)
	if err != nil {
		return err
	}
	total, err := r.idleWindow(ctx, rate, r.cfg.Idle, true)
	if err != nil {
		return err
	}
	gen2, err := r.idleWindow(ctx, rate, base, false)
	if err != nil {
		return err
	}
	gen := (gen1 + gen2) / 2
	r.res.Idle = &Idle{
		Seconds: r.cfg.Idle.Seconds(), EventsPerSec: rate,
		TotalCoreShare: total, GeneratorCoreShare: gen, ServiceCoreShare: max(total-gen, 0),
	}
	r.say("idle: %d runs posting one progress every %s (%.0f events/s) for %s: the service %.1f%% of one core (process %.1f%%, generator %.1f%%)",
		len(r.sims), IdleInterval, rate, r.cfg.Idle, 100*r.res.Idle.ServiceCoreShare, 100*total, 100*gen)
	return nil
}

// idleWindow publishes at rate for d, to the runs when toService, else to
// a subject without interest, and returns the process's CPU time over the
// window as a share of one core. The verdicts the window's events move
// are waited for after the window.
func (r *runner) idleWindow(ctx context.Context, rate float64, d time.Duration, toService bool) (float64, error) {
	touched := make(map[string]time.Time)
	sent := 0
	cpu0, start := processCPU(), time.Now()
	for {
		elapsed := time.Since(start)
		if elapsed >= d {
			break
		}
		for due := int(elapsed.Seconds() * rate); sent < due; sent++ {
			s := r.sims[r.rr%len(r.sims)]
			r.rr++
			if !toService {
				r.buf = s.progress(r.buf, s.last+1, r.clk.at(s, s.last+1))
				if err := r.pub.Publish("bench-idle-baseline."+s.queryID, r.buf); err != nil {
					return 0, fmt.Errorf("publish: %w", err)
				}
				continue
			}
			k := s.last + 1
			if _, err := r.publishProgress(s, k); err != nil {
				return 0, err
			}
			touched[s.table] = r.clk.period(s, k)
		}
		if err := ctx.Err(); err != nil {
			return 0, err
		}
		time.Sleep(time.Until(start.Add(time.Duration(float64(sent+1) / rate * float64(time.Second)))))
	}
	if err := r.pub.Flush(); err != nil {
		return 0, err
	}
	share := (processCPU() - cpu0).Seconds() / time.Since(start).Seconds()
	if len(touched) > 0 {
		if _, err := r.waitVerdicts(ctx, "idle", touched); err != nil {
			return 0, err
		}
	}
	return share, nil
}
