package finalizer

import (
	"fmt"
	"time"

	"go.uber.org/zap"
)

// janitorLoop marks stale runs and stops trackers of runs silent for
// longer than ExpireAfter.
func (r *Registry) janitorLoop() {
	defer r.wg.Done()
	timer := r.cfg.Clock.NewTimer()
	defer timer.Stop()
	for {
		timer.Start(r.every)
		select {
		case <-r.stop:
			return
		case <-timer.C():
		}
		r.sweep()
	}
}

// sweep counts the stale trackers and stops the expired ones. It acts on
// the trackers it saw: one that replaced an expired tracker since (the same
// run and table tracked anew) is not touched, and a tracker still starting
// is left for the next sweep.
func (r *Registry) sweep() {
	stale := 0
	now := r.cfg.Clock.Now()
	for _, x := range r.snapshot() {
		if x.status.Done {
			continue
		}
		silent := now.Sub(x.status.LastEvent)
		if silent > r.cfg.StaleAfter {
			stale++
		}
		if r.cfg.ExpireAfter > 0 && silent > r.cfg.ExpireAfter {
			s := x.status
			r.log.Warn("run silent for too long; stopping its tracker (a driver that died without a termination?)",
				zap.String("table", s.Table), zap.String("query_id", s.QueryID), zap.String("run_id", s.RunID),
				zap.Duration("silent", silent))
			r.mu.Lock()
			if x.e.stopReason == "" {
				x.e.expired = true
			}
			r.mu.Unlock()
			r.stopEntry(x.e, fmt.Sprintf("expired: the run sent no event for %s", silent.Round(time.Second)), true)
		}
	}
	r.cfg.Metrics.StaleRuns.Set(float64(stale))
}
