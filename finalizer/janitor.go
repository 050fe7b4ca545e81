package finalizer

import (
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

func (r *Registry) sweep() {
	stale := 0
	now := r.cfg.Clock.Now()
	for _, s := range r.Status() {
		silent := now.Sub(s.LastEvent)
		if s.Stale {
			stale++
		}
		if r.cfg.ExpireAfter > 0 && silent > r.cfg.ExpireAfter {
			r.mu.RLock()
			e := r.trackers[trackKey{s.RunID, s.Table}]
			r.mu.RUnlock()
			if e != nil && e.t != nil {
				r.log.Warn("run silent for too long; stopping its tracker (a driver that died without a termination?)",
					zap.String("table", s.Table), zap.String("query_id", s.QueryID), zap.String("run_id", s.RunID),
					zap.Duration("silent", silent))
				e.t.Stop()
			}
		}
	}
	r.cfg.Metrics.StaleRuns.Set(float64(stale))
}
