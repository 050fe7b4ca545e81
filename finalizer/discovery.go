package finalizer

import (
	"context"
	"errors"
	"fmt"

	"go.uber.org/zap"

	"github.com/finalizer-dev/finalizer/control"
	"github.com/finalizer-dev/finalizer/listener"
	"github.com/finalizer-dev/finalizer/progress"
)

// Known reports whether runID is tracked (and subscribed), finished or
// ignored, so that discovery can drop its events without parsing them. It
// is cheap. While a run's subscription is being made it is not known, so
// discovery hands its events over (see Discovered) instead of losing them.
func (r *Registry) Known(runID string) bool {
	r.mu.RLock()
	defer r.mu.RUnlock()
	if r.starting[runID] > 0 {
		return false
	}
	if len(r.runs[runID]) > 0 {
		return true
	}
	if _, ok := r.finished.get(runID); ok {
		return true
	}
	_, ok := r.ignored.get(runID)
	return ok
}

// Discovered hands a newly seen run to the registry, which tracks it when a
// rule matches. It blocks while the queue is full and returns at once
// once the registry is closed. Safe to call from a NATS callback.
func (r *Registry) Discovered(run listener.Run) {
	select {
	case r.found <- run:
	case <-r.stop:
	}
}

func (r *Registry) discoverLoop() {
	defer r.wg.Done()
	for {
		select {
		case <-r.stop:
			return
		case run := <-r.found:
			r.consider(r.ctx, run, run.Kind == progress.KindStarted)
		}
	}
}

// consider tracks run into every table whose rule matches it, and hands
// the event it was discovered through to the run's trackers.
func (r *Registry) consider(ctx context.Context, run listener.Run, supersede bool) {
	if r.deliver(run) {
		return
	}
	if len(r.cfg.Rules) == 0 || r.Known(run.RunID) {
		return
	}
	name := run.Name
	if name == "" {
		if n, ok := r.cfg.Events.(Namer); ok {
			got, err := n.RunName(ctx, run.QueryID, run.RunID)
			if err != nil {
				r.log.Debug("no name found for run", zap.String("run_id", run.RunID), zap.Error(err))
			}
			name = got
		}
	}
	if len(name) > MaxQueryNameLen {
		r.refuse(RefusedQueryName, run, fmt.Errorf("query name of %d bytes, at most %d", len(name), MaxQueryNameLen))
		return
	}
	matched := false
	for _, rule := range r.cfg.Rules {
		table, ok := rule.Match(run.QueryID, name)
		if !ok {
			continue
		}
		matched = true
		req := Request{QueryID: run.QueryID, RunID: run.RunID, Table: table, Spec: rule.Spec, Supersede: supersede,
			QueryName: name, RetireOnCleanTermination: rule.Retire == RetireOnCleanTermination}
		_, err := r.Track(ctx, req)
		switch {
		case err == nil:
		case errors.Is(err, control.ErrInvalidTable):
			r.refuse("", run, err) // counted by Track
		case !errors.Is(err, ErrClosed):
			r.log.Error("could not track run", zap.String("table", table), zap.String("query_id", run.QueryID),
				zap.String("run_id", run.RunID), zap.Error(err))
		}
	}
	if !matched {
		r.mu.Lock()
		if len(r.runs[run.RunID]) == 0 {
			r.ignored.put(run.RunID, JoinResult{})
		}
		r.mu.Unlock()
		r.log.Debug("run matches no table; ignored", zap.String("query_id", run.QueryID),
			zap.String("run_id", run.RunID), zap.String("name", name))
		return
	}
	r.deliver(run)
}

// refuse records that run will not be tracked (a name the service does
// not accept), so that its further events are dropped unparsed: it counts
// the refusal under reason (unless reason is "", when the caller counted
// it), and logs it at most once per reason every refuseLogEvery.
func (r *Registry) refuse(reason string, run listener.Run, err error) {
	if reason != "" {
		r.cfg.Metrics.Refused.WithLabelValues(reason).Inc()
	} else {
		reason = RefusedTableName
	}
	r.mu.Lock()
	if len(r.runs[run.RunID]) == 0 {
		r.ignored.put(run.RunID, JoinResult{})
	}
	r.mu.Unlock()
	if ok, n := r.refuseLog.Allow(reason); ok {
		r.log.Warn("run refused; its events are dropped", zap.String("reason", reason),
			zap.String("query_id", run.QueryID), zap.String("run_id", run.RunID), zap.Error(err),
			zap.Int("suppressed", n))
	}
}

// deliver offers the event a run was discovered through to the mailboxes
// of its trackers, once they are subscribed. The event may also arrive
// through the subscription or the JetStream catch-up; the mailbox keeps
// only the newest. It reports whether the run has trackers.
func (r *Registry) deliver(run listener.Run) bool {
	r.mu.RLock()
	es := append([]*entry(nil), r.runs[run.RunID]...)
	r.mu.RUnlock()
	for _, e := range es {
		<-e.ready
		if e.box != nil && run.Event != nil {
			e.box.Offer(run.Event)
		}
	}
	return len(es) > 0
}
