package finalizer

import (
	"fmt"
	"runtime"
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
			r.reportHeld(true)
			return
		case <-timer.C():
		}
		r.sweep()
		r.reportHeld(false)
	}
}

// reportHeld says, one line per class (lograte.HeldMsg), the log lines
// the registry's limiters held back in an interval that has ended with no
// later line of their class going out to count them: a lone burst of
// refusals (2,000 runs refused, one WARN line in the interval) would
// otherwise never say how many it held back. The janitor calls it after
// each sweep and once when it stops; a class has at most one line per
// interval, its own or this one (ADR 0022, addendum of 2026-12-06).
//
// With all (the janitor's stop) it says every class with lines held back,
// its interval ended or not: a burst cut off by the stop is said too.
func (r *Registry) reportHeld(all bool) {
	r.refuseLog.Report(r.log, "registry", all)
	r.markWaits.every.Report(r.log, "stream_state", all)
	r.sampler.Report(r.log, "sampled", all)
}

// sweep counts the stale trackers and stops the expired ones, then prunes
// the silent runs no longer known (pruneSilent). It acts on
// the trackers it saw: one that replaced an expired tracker since (the same
// run and table tracked anew) is not touched, and a tracker still starting
// is left for the next sweep.
//
// It reads of each tracker only when it last heard its run and whether it
// is done (Tracker.activity), and the full status of the expired ones
// alone, which it stops in the order of their table and run: with 100,000
// runs, a status per tracker (its spec formatted, its guards copied) and
// a sort of them all cost 0.4 s of CPU and tens of MB of garbage every
// sweep, for a count ("The latency tail (seventh pass)").
//
// It yields its P every sweepChunk trackers (runtime.Gosched): a sweep of
// 100,000 trackers is 15-40 ms of CPU, and in one stretch it held a P for
// that long while the trackers' steps woken on that P waited behind it
// (8-11 ms runnable waits at 1,000 events/s, "The latency tail (eighth
// pass)"). Under the registry's lock it only copies the entries
// (entries, yielding every entriesChunk); whether each has started is
// read between the yields.
func (r *Registry) sweep() { r.sweepYielding(runtime.Gosched) }

// sweepChunk is how many trackers the sweep reads between two yields.
const sweepChunk = 512

// sweepYielding is sweep, calling yield after every sweepChunk trackers
// (tests count the calls).
func (r *Registry) sweepYielding(yield func()) {
	stale := 0
	now := r.cfg.Clock.Now()
	var expired []seenTracker
	for i, e := range r.entries(yield) {
		if i%sweepChunk == sweepChunk-1 {
			yield()
		}
		if !e.ready.closed() || e.t == nil { // still starting, or its start failed
			continue
		}
		last, done := e.t.activity()
		if done {
			continue
		}
		silent := now.Sub(last)
		if silent > r.cfg.StaleAfter {
			stale++
		}
		if r.cfg.ExpireAfter > 0 && silent > r.cfg.ExpireAfter {
			expired = append(expired, r.seen(e, now))
		}
	}
	sortSeen(expired)
	for _, x := range expired {
		r.expire(x, now)
	}
	r.cfg.Metrics.StaleRuns.Set(float64(stale))
	r.pruneSilent()
}

// expire stops x's tracker, silent for longer than ExpireAfter, unless
// its status says otherwise (an event, or its end, came since sweep read
// its activity).
func (r *Registry) expire(x seenTracker, now time.Time) {
	s := x.status
	silent := now.Sub(s.LastEvent)
	if s.Done || silent <= r.cfg.ExpireAfter {
		return
	}
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
