package finalizer

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/finalizer-dev/finalizer/control"
	"github.com/finalizer-dev/finalizer/listener"
	"github.com/finalizer-dev/finalizer/progress"
)

// DefaultMaxPending is how many discovered runs may wait for a decision
// (name lookup, rules, subscription) at once. Beyond it a newly seen run
// is dropped, counted and logged; once the runs waiting are decided,
// discovery rescans the runs the stream retains and finds it again (or
// its next event does, whichever comes first).
const DefaultMaxPending = 10_000

// minRescanEvery and maxRescanEvery bound how often discovery rescans the
// stream for the runs it dropped: a rescan reads every run's newest
// events, so one that misses runs again (a flood of new runs bigger than
// DefaultMaxPending, a start that keeps failing) waits twice as long
// before the next.
//
// A rescan that took runs (queued them for a decision) is followed by the
// next at the minimum delay, as the queue had no room for them all, but at
// most maxQuickRescans times in a row: beyond, the delay doubles however
// many runs the rescans take. Runs that are taken again and again never
// become known (a flood of hostile run ids, more than the registry
// remembers as ignored, evicting each other; a start that fails while
// PostgreSQL is down), and each rescan reads the whole stream. The quick
// rescans start again once none ran for maxRescanEvery.
const (
	minRescanEvery  = time.Second
	maxRescanEvery  = time.Minute
	maxQuickRescans = 16
)

// SetRescan gives the registry the way to ask discovery for a rescan of
// the runs the stream retains (listener.DiscoverySubscription.Rescan):
// fn must not block. Without it, a dropped run waits for its next event.
func (r *Registry) SetRescan(fn func()) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.rescan = fn
}

// missedRun notes that a discovered run was dropped, for the discovery
// loop to rescan once its queue is empty. r.mu held.
func (r *Registry) missedRun(runID string) {
	r.missed = true
	r.dropped.put(runID, struct{}{})
	select {
	case r.queued <- struct{}{}:
	default:
	}
}

// DefaultDiscoverParallelism is how many discovered runs are decided on
// (looked up, joined to their tables' feeders, subscribed) at once.
const DefaultDiscoverParallelism = 256

// pendingRun is a run discovery found and the registry has not decided on
// yet: what its events said so far. Every later event of the run is merged
// into it, so that nothing is lost between discovery and the trackers'
// subscriptions.
type pendingRun struct {
	run     listener.Run
	claimed bool // a consider is deciding it

	started, progress, terminated *progress.Event
	idle                          bool
	// heard is when progress was heard live (this process's clock), zero
	// when it was not (a recovery's listing): handed to the tracker with
	// it (fill), so that a rewind that came while the run waited for its
	// decision is judged against when the progress was heard, not when
	// the tracker took it (ADR 0019, addendum of 2026-12-06).
	heard time.Time
	// live: an event of the run was heard live (not only read from the
	// stream's retained copy by a recovery's listing).
	live bool
}

// merge takes in one more discovered event of the run, heard live at
// heard (zero: not heard live).
func (p *pendingRun) merge(run listener.Run, heard time.Time) {
	if !heard.IsZero() {
		p.live = true
	}
	if p.run.Name == "" {
		p.run.Name = run.Name
	}
	ev := run.Event
	if ev == nil {
		return
	}
	switch ev.Kind {
	case progress.KindStarted:
		p.started = ev
	case progress.KindProgress:
		if ev.Newer(p.progress) {
			p.progress, p.heard = ev, heard
		}
	case progress.KindIdle:
		p.idle = true
	case progress.KindTerminated:
		if p.terminated == nil {
			p.terminated = ev
		}
	}
}

// fill offers what the run's events said so far to a new tracker's box.
func (p *pendingRun) fill(box *listener.Mailbox) {
	box.Offer(p.started)
	box.OfferHeardAt(p.progress, p.heard)
	if p.idle && p.progress == nil {
		box.Offer(&progress.Event{Kind: progress.KindIdle, QueryID: p.run.QueryID, RunID: p.run.RunID})
	}
	box.Offer(p.terminated)
}

// Known reports whether runID is tracked (and subscribed), finished,
// ignored or refused, so that discovery can drop its events without
// parsing them. It is cheap. While a run's subscriptions are being made,
// and while it waits for a decision, it is not known, so that discovery
// hands its events over (see Discovered) instead of losing them.
func (r *Registry) Known(runID string) bool {
	r.mu.RLock()
	defer r.mu.RUnlock()
	if r.starting[runID] > 0 || r.pending[runID] != nil {
		return false
	}
	if _, ok := r.awaitName.get(runID); ok {
		return false // its events are read for its name
	}
	if _, ok := r.expired.get(runID); ok {
		return false // its next event tracks it again
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

// Discovered hands a run's event that discovery saw to the registry. It
// never blocks on I/O nor on a full queue, so it is safe to call from the
// NATS callback that delivers every run's events:
//   - a run with trackers (still subscribing, or not) gets the event in
//     their mailboxes at once;
//   - a run waiting for a decision merges the event into what it has;
//   - a run without a name that the registry could not decide on yet
//     (undecided) is left alone until an event carries its name;
//   - any other run is queued for a decision, unless DefaultMaxPending runs
//     wait already (then it is dropped and counted; a rescan of the
//     stream once the queue is empty, or its next event, finds it again).
func (r *Registry) Discovered(run listener.Run) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return
	}
	// named: the run was seen without a name so far, and this event
	// carries it (joinEarly).
	named := false
	if es := r.runs[run.RunID]; len(es) > 0 {
		for _, e := range es {
			e.box.Offer(run.Event)
		}
		if p := r.pending[run.RunID]; p != nil {
			p.merge(run, r.cfg.Clock.Now())
			return
		}
		x, expired := r.expired.get(run.RunID)
		_, await := r.awaitName.get(run.RunID)
		switch {
		case expired && !x.speaksAgain(run):
			return // a rescan re-read what its trackers had seen
		case expired:
			// Tracked again into some of the tables it expired from:
			// the others are tracked again too.
		case await && run.Name != "":
			// Tracked without a name so far: its name decides the other
			// rules.
			r.awaitName.del(run.RunID)
			named = true
		case await && (run.Kind == progress.KindProgress || run.Kind == progress.KindStarted):
			// These carry the name: the query has none. Its events
			// need no more reading by discovery.
			r.awaitName.del(run.RunID)
			return
		default:
			return
		}
	} else if p := r.pending[run.RunID]; p != nil {
		nameless := p.run.Name == ""
		p.merge(run, r.cfg.Clock.Now())
		if nameless && p.run.Name != "" {
			r.joinEarly(p.run)
		}
		return
	} else if x, ok := r.expired.get(run.RunID); ok && !x.speaksAgain(run) {
		// A rescan of the stream re-read the events the run had sent
		// before its trackers expired: not the run speaking again.
		return
	} else if !ok && r.knownFinished(run) {
		return
	}
	if _, ok := r.undecided.get(run.RunID); ok {
		if run.Name == "" {
			return
		}
		named = true
	}
	if len(r.pending) >= r.maxPending {
		r.cfg.Metrics.Refused.WithLabelValues(RefusedBusy).Inc()
		r.missedRun(run.RunID)
		if ok, n := r.refuseLog.Allow(zapcore.WarnLevel, RefusedBusy); ok {
			r.log.Warn("too many discovered runs wait for a decision; this one is found again by a rescan of the stream once they are decided, or by its next event",
				zap.String("query_id", run.QueryID), zap.String("run_id", run.RunID), zap.Int("waiting", len(r.pending)),
				zap.Int("suppressed", n))
		}
		return
	}
	p := &pendingRun{run: run}
	p.run.Event = nil
	p.merge(run, r.cfg.Clock.Now())
	r.pending[run.RunID] = p
	r.queue = append(r.queue, run.RunID)
	r.taken = true
	if named {
		r.joinEarly(p.run)
	}
	select {
	case r.queued <- struct{}{}:
	default:
	}
}

// knownFinished reports whether run, offered by a rescan of the stream
// (no live event), terminated so long ago that the registry forgot it
// among the runs it remembers as finished: the stream stored its
// termination well before (forgetMargin) a run the finished memo forgot
// for room had finished, so its termination was there at every rescan
// and restart since, and the run was tracked to its end then. Tracking it
// again would apply nothing (the verdict only moves forward) and end at
// once (ADR 0017 addendum). A live event, a run not terminated, one
// without a storage time, or one discovery dropped (its start failed, or
// too many runs waited: missedRun) and not tracked since is never taken
// for it: such a run was never tracked to its end. r.mu held.
func (r *Registry) knownFinished(run listener.Run) bool {
	if _, ok := r.dropped.get(run.RunID); ok {
		return false
	}
	return run.Event == nil && run.Terminated && !run.Stored.IsZero() && !r.forgotten.IsZero() &&
		run.Stored.Before(r.forgotten.Add(-forgetMargin))
}

// HoldDiscovery makes discovery's decisions on the runs it queues wait
// for the release (their events are merged meanwhile, as for any run
// waiting for a decision): a restart takes it before it lists the runs
// the stream retains and releases it after Recover. Started by discovery
// while the listing or Recover runs, a run's tracker stepped on its live
// events and could move a table before a query first seen while the
// service was down, listed and started later by Recover, joined it
// (Recover joins the feeders of a shared table before it starts any run,
// but discovery's starts came before). Holds do not nest; release is
// safe to call twice.
//
// A run seen without a name so far (listed so, or undecided, or tracked
// by the rules that match its id) whose name comes in a live event under
// the hold is joined at once to the feeders of the tables its name's rules
// map it to (joinEarly), while its start waits for the release:
// sharedTableRuns could not count it (no name, no table), and the trackers
// Recover started step on their live events, so the hold would have kept
// it out of a table it feeds for the rest of the recovery.
func (r *Registry) HoldDiscovery() (release func()) {
	held := make(chan struct{})
	r.mu.Lock()
	r.discoHeld = held
	if !r.closed {
		r.wg.Add(1)
		go r.earlyJoinLoop(held)
	}
	r.mu.Unlock()
	var once sync.Once
	return func() {
		once.Do(func() {
			r.mu.Lock()
			if r.discoHeld == held {
				r.discoHeld = nil
			}
			r.mu.Unlock()
			close(held)
		})
	}
}

// joinEarly queues the feeder joins of run's tables by its rules (run
// has just got its name) for earlyJoinLoop while discovery is held. A
// run tracked again after its expiry goes back to its old tables, joined
// before. r.mu held.
func (r *Registry) joinEarly(run listener.Run) {
	if r.discoHeld == nil || run.Name == "" || len(run.Name) > MaxQueryNameLen {
		return
	}
	if _, ok := r.expired.get(run.RunID); ok {
		return
	}
	for _, rule := range r.cfg.Rules {
		table, ok := rule.Match(run.QueryID, run.Name)
		if !ok || control.CheckTableName(table) != nil {
			continue
		}
		r.earlyJoins = append(r.earlyJoins, control.FeederJoin{Table: table, Query: run.QueryID, Name: run.Name})
	}
	select {
	case r.earlyKick <- struct{}{}:
	default:
	}
}

// earlyJoinLoop applies the joins joinEarly queues until the hold held is
// released (then it applies those left and returns) or the registry
// closes (the joins not applied keep their tables pending through the
// shutdown, as Close does for those still queued). A join that did not
// succeed for a reason a retry may change holds its table until it joins
// (joinEarlyLater): the table's feeders the recovery started would
// otherwise move it on their live events before the run's start, after
// the release, joined it. The start waits behind it.
func (r *Registry) earlyJoinLoop(held chan struct{}) {
	defer r.wg.Done()
	fj, ok := r.cfg.Store.(FeederJoiner)
	for {
		var done bool
		select {
		case <-r.earlyKick:
		case <-held:
			done = true
		case <-r.stop:
			return
		}
		r.mu.Lock()
		joins := r.earlyJoins
		r.earlyJoins = nil
		r.mu.Unlock()
		for i, j := range joins {
			if !ok {
				break
			}
			select {
			case <-r.stop:
				r.mu.Lock()
				for _, j := range joins[i:] {
					r.markJoinPending(Request{QueryID: j.Query, Table: j.Table, QueryName: j.Name}, ErrClosed)
				}
				r.mu.Unlock()
				return
			default:
			}
			req := Request{QueryID: j.Query, Table: j.Table, QueryName: j.Name}
			switch _, err := r.joinFeeder(r.stopCtx, fj, req); {
			case joinRetryable(err):
				r.joinEarlyLater(j, err)
			case err != nil:
				r.log.Debug("the feeder join of a run named during the recovery was refused; its start joins it again",
					zap.String("table", j.Table), zap.String("query_id", j.Query), zap.Error(err))
			}
		}
		if done {
			return
		}
	}
}

// discoverLoop decides on the queued runs, one at a time and in their
// order (so the cap of trackers lets in the runs that came first), and
// starts their trackers, up to DefaultDiscoverParallelism at once: a start
// waits on PostgreSQL (the feeder join, ADR 0023), and the runs that start
// together join their tables' feeders in one group only when their
// starts are in flight together. It waits for the starts in flight
// before it returns.
func (r *Registry) discoverLoop() {
	defer r.wg.Done()
	var wg sync.WaitGroup
	defer wg.Wait()
	sem := make(chan struct{}, DefaultDiscoverParallelism)
	// The starts into one table go one after the other, in the order the
	// runs were decided: a run seen first joins the table's feeders
	// before a later run's tracker starts, so that the later one never
	// moves the table as its sole feeder while the earlier one's join
	// waits (the verdict would run ahead of the data of a query the
	// service had already seen). Starts into other tables go in parallel.
	var (
		lastMu sync.Mutex
		last   = make(map[string]chan struct{}) // a table's latest start: closed once it returned
	)
	async := func(table string, fn func()) {
		lastMu.Lock()
		prev := last[table]
		done := make(chan struct{})
		last[table] = done
		lastMu.Unlock()
		sem <- struct{}{} // bounded: a start never waits for this loop
		wg.Add(1)
		go func() {
			defer func() {
				close(done)
				lastMu.Lock()
				if last[table] == done {
					delete(last, table)
				}
				lastMu.Unlock()
				<-sem
				wg.Done()
			}()
			if prev != nil {
				// Its goroutine was started before this one, so it
				// holds a slot of sem: it runs, and this wait ends.
				<-prev
			}
			fn()
		}()
	}
	// A rescan for the runs dropped (missed) waits until the queue is
	// empty, and at least rescanEvery since the last: it finds every
	// retained run not known yet at once.
	var (
		rescanAt   <-chan time.Time
		every      time.Duration // the next rescan's delay; 0: rescanEvery
		quick      int           // rescans in a row at rescanEvery because the last took runs
		lastRescan time.Time
	)
	for {
		select {
		case <-r.stop:
			return
		case <-r.queued:
		case <-rescanAt:
			rescanAt, lastRescan = nil, time.Now()
			r.mu.Lock()
			fn := r.rescan
			r.missed = false
			r.mu.Unlock()
			if fn != nil {
				r.log.Debug("discovery: rescanning the retained runs for the runs it dropped")
				fn()
			}
			continue
		}
		for {
			r.mu.Lock()
			if held := r.discoHeld; held != nil && len(r.queue) > 0 && !r.closed {
				// A restart's recovery runs: its runs start first.
				r.mu.Unlock()
				select {
				case <-held:
					continue
				case <-r.stop:
					return
				}
			}
			if len(r.queue) == 0 || r.closed {
				r.queue = nil
				switch {
				case rescanAt != nil:
				case r.missed && r.rescan != nil:
					if time.Since(lastRescan) > maxRescanEvery {
						every, quick = 0, 0 // none for a while: a new episode
					}
					if r.taken && quick < maxQuickRescans {
						// Runs were taken since the last rescan (its
						// own among them): the next one finds more.
						every = 0
						quick++
					}
					r.taken = false
					every = cmp.Or(every, r.rescanEvery)
					rescanAt = time.After(every)
					every = min(2*every, maxRescanEvery)
				}
				r.mu.Unlock()
				break
			}
			runID := r.queue[0]
			r.queue = r.queue[1:]
			r.mu.Unlock()
			r.consider(r.ctx, runID, async)
		}
	}
}

// consider decides on a pending run: it looks its name up when no event
// carried one (once, here, off the NATS callback), and tracks it into
// every table whose rule matches. The trackers are registered before it
// returns; each is started (joined, subscribed) through async (which
// starts the runs into one table in order), or at once when async is nil. A run without a name that no rule
// matches by id stays undecided, never ignored: a later event that carries
// the name decides it. A named run that no rule matches is ignored.
func (r *Registry) consider(ctx context.Context, runID string, async func(table string, start func())) {
	r.mu.Lock()
	p := r.pending[runID]
	if p == nil || p.claimed {
		r.mu.Unlock()
		return
	}
	p.claimed = true
	run := p.run
	x, _ := r.expired.get(runID)
	again := x.reqs
	r.mu.Unlock()
	name := run.Name
	if name == "" && len(again) == 0 {
		if n, ok := r.cfg.Bus.(Namer); ok {
			got, err := n.RunName(ctx, run.QueryID, run.RunID)
			if err != nil {
				r.log.Debug("no name found for run", zap.String("run_id", run.RunID), zap.Error(err))
			}
			name = got
		}
	}
	if len(name) > MaxQueryNameLen {
		r.mu.Lock()
		delete(r.pending, runID)
		r.mu.Unlock()
		r.refuse(RefusedQueryName, run, fmt.Errorf("query name of %d bytes, at most %d", len(name), MaxQueryNameLen))
		return
	}
	// A run that expired and speaks again is tracked again into the
	// tables it was tracked into, explicit ones included, whatever its
	// event says of its name.
	reqs := append([]Request(nil), again...)
	for _, rule := range r.cfg.Rules {
		if len(again) > 0 {
			break
		}
		if table, ok := rule.Match(run.QueryID, name); ok {
			reqs = append(reqs, Request{QueryID: run.QueryID, RunID: run.RunID, Table: table, Spec: rule.Spec,
				QueryName: name, RetireOnCleanTermination: rule.Retire == RetireOnCleanTermination})
		}
	}
	if len(reqs) == 0 {
		r.mu.Lock()
		delete(r.pending, runID)
		if len(r.runs[runID]) == 0 {
			if name == "" {
				r.undecided.put(runID, JoinResult{})
			} else {
				r.ignored.put(runID, JoinResult{})
			}
		}
		r.mu.Unlock()
		switch near, ok := nearMiss(r.cfg.Rules, name); {
		case name == "":
			r.logSampled(zapcore.InfoLevel, "undecided", "run seen without a query name and no rule matches its id; not decided until an event carries its name",
				zap.String("query_id", run.QueryID), zap.String("run_id", run.RunID))
		case ok:
			// A silent "not yet" must say why: the name is one case or
			// separator away from a rule's query.
			if allow, n := r.refuseLog.Allow(zapcore.WarnLevel, "near-miss/"+near.Query); allow {
				r.log.Warn("run not tracked: its query name matches no rule, but differs from a rule's query only in case or separators (- _ . / and space); fix the name or the rule",
					zap.String("query_id", run.QueryID), zap.String("run_id", run.RunID), zap.String("name", name),
					zap.String("rule_query", near.Query), zap.String("rule_table", near.Table), zap.Int("suppressed", n))
			}
		default:
			r.log.Debug("run matches no table; ignored", zap.String("query_id", run.QueryID),
				zap.String("run_id", run.RunID), zap.String("name", name))
		}
		return
	}
	valid := reqs[:0]
	for _, req := range reqs {
		if err := control.CheckTableName(req.Table); err != nil {
			r.cfg.Metrics.Refused.WithLabelValues(RefusedTableName).Inc()
			r.refuse("", run, fmt.Errorf("track run %s: %w", run.RunID, err))
			continue
		}
		valid = append(valid, req)
	}
	// Every tracker of the run is registered, its mailbox filled with what
	// the run's events said so far, before any subscribes: from here on
	// Discovered offers the run's events to their mailboxes directly.
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		return
	}
	p.run.Name = cmp.Or(p.run.Name, name)
	es, capped := r.register(valid, p)
	delete(r.pending, runID)
	if name == "" && len(again) == 0 && len(reqs) < len(r.cfg.Rules) {
		// Tracked by the rules that match its id; the others may match
		// its name, which a later event carries.
		r.awaitName.put(runID, JoinResult{})
	}
	r.mu.Unlock()
	if capped > 0 {
		// Counted by register. Not remembered as refused: once trackers
		// finish, the run's next event tracks it.
		if ok, n := r.refuseLog.Allow(zapcore.WarnLevel, RefusedRunCap); ok {
			r.log.Warn("run not tracked: the cap of tracked runs is reached (tracking.max_trackers)",
				zap.String("query_id", run.QueryID), zap.String("run_id", run.RunID),
				zap.Int("max_trackers", r.cfg.MaxTrackers), zap.Int("suppressed", n))
		}
	}
	for _, e := range es {
		start := func() {
			if err := r.launch(ctx, e); err != nil && !errors.Is(err, ErrClosed) {
				r.log.Error("could not track run; a rescan of the stream tries again", zap.String("table", e.req.Table), zap.String("query_id", run.QueryID),
					zap.String("run_id", run.RunID), zap.Error(err))
				r.mu.Lock()
				r.missedRun(run.RunID)
				r.mu.Unlock()
			}
		}
		if async == nil {
			start()
		} else {
			async(e.req.Table, start)
		}
	}
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
	if ok, n := r.refuseLog.Allow(zapcore.WarnLevel, reason); ok {
		r.log.Warn("run refused; its events are dropped", zap.String("reason", reason),
			zap.String("query_id", run.QueryID), zap.String("run_id", run.RunID), zap.Error(err),
			zap.Int("suppressed", n))
	}
}
