package finalizer

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/finalizer-dev/finalizer/control"
	"github.com/finalizer-dev/finalizer/internal/mapcap"
	"github.com/finalizer-dev/finalizer/listener"
	"github.com/finalizer-dev/finalizer/progress"
)

// Recover resumes the persisted explicit tracks that are not done and
// tracks every retained run that a rule matches, subscribing several at
// once. When the Bus is a CatchUpHolder, the runs' catch-ups from the
// stream wait until all are subscribed and are then done at once (one read
// of the stream, not one per run; a failure there is retried per run in
// the background); under a hold the caller took before it listed the runs
// (the service does, ADR 0023 addendum), the outer release catches the
// runs up from what the listing read and reads only the stream after it.
// Each tracker applies its run's retained progress as soon as it has it. Errors of single runs are logged; Recover returns the
// first of them, if any.
func (r *Registry) Recover(ctx context.Context, tracks []control.Track, runs []listener.Run) error {
	r.recovering.Add(1)
	defer r.recovering.Add(-1)
	// Before any tracker starts: a run silent since its table's rewind
	// does not apply its retained progress, posted before it, again.
	if !r.loadRewinds(ctx) {
		return fmt.Errorf("recover: read the tables' rewinds: %w", cmp.Or(ctx.Err(), ErrClosed))
	}
	r.noteSilent(runs)
	if h, ok := r.cfg.Bus.(CatchUpHolder); ok {
		release := h.HoldCatchUps()
		defer func() {
			if err := release(ctx); err != nil {
				r.log.Warn("could not catch the recovered runs up from the stream at once; each is retried on its own", zap.Error(err))
			}
		}()
	}
	late, joins, starts := r.sharedTableRuns(tracks, runs)
	if lo, ok := r.cfg.Bus.(LateOfferer); ok {
		lo.OfferLate(late)
	}
	// The maps the starts fill are made at about the size they reach
	// once, not grown (and copied) through 100,000 runs (issue 12, ninth
	// pass).
	r.reserve(starts)
	if rs, ok := r.cfg.Bus.(RunReserver); ok {
		rs.ReserveRuns(starts)
	}
	// A run's live events reach its tracker as soon as it is subscribed,
	// hold or not: a late run of a shared table whose query emits a
	// progress during the recovery would still move the table before a
	// query first seen while the service was down, started later in the
	// recovery, joined it. Every query of a shared table joins it first.
	r.prejoin(ctx, joins)
	var (
		mu    sync.Mutex
		first error
	)
	note := func(err error) {
		mu.Lock()
		if first == nil {
			first = err
		}
		mu.Unlock()
	}
	// Up to RecoverParallelism starts at once (fanOut). Both kinds of
	// start are fed in the same order as before, explicit tracks first.
	type start struct {
		req   Request // an explicit track, when run is nil
		run   *listener.Run
		track bool
	}
	fan := newFanOut(r.cfg.RecoverParallelism, func(s start) {
		if s.track {
			if _, err := r.Track(ctx, s.req); err != nil {
				note(err)
			}
			return
		}
		r.consider(ctx, s.run.RunID, nil)
	})
	feed := fan.feed
	// The explicit tracks of one client or rule mostly share their spec's
	// document: each distinct document is decoded and parsed once (a
	// Spec is a value whose zones are shared and never changed).
	specs := make(map[string]progress.Spec)
	for _, t := range tracks {
		if !t.DoneAt.IsZero() {
			continue
		}
		spec, ok := specs[string(t.Spec)]
		if !ok {
			var opts progress.SpecOptions
			if err := json.Unmarshal(t.Spec, &opts); err != nil {
				note(fmt.Errorf("track of run %s: bad spec: %w", t.RunID, err))
				continue
			}
			var err error
			if spec, err = progress.ParseSpec(opts); err != nil {
				note(fmt.Errorf("track of run %s: %w", t.RunID, err))
				continue
			}
			specs[string(t.Spec)] = spec
		}
		feed(start{req: Request{QueryID: t.QueryID, RunID: t.RunID, Table: t.Table, Spec: spec, Explicit: true, resumed: true}, track: true})
	}
	// The retained runs are made pending a chunk at a time, so that as
	// many wait for a decision as before (those in flight and a chunk):
	// discovery's cap of waiting runs counts them.
	for lo := 0; lo < len(runs); lo += recoverChunk {
		chunk := runs[lo:min(lo+recoverChunk, len(runs))]
		for _, i := range r.recoverPending(chunk) {
			feed(start{run: &chunk[i]})
		}
	}
	fan.wait()
	if first != nil {
		r.log.Error("some runs could not be recovered", zap.Error(first))
	}
	return first
}

// recoverChunk is how many retained runs Recover makes pending in one
// hold of the registry's lock.
const recoverChunk = 256

// recoverPending makes the retained runs pending, as discovery would,
// unless known already, and returns the indices of those that need a
// decision. The pending cap does not apply: recovery waits for its
// decisions. All in one hold of the registry's lock: one hold per run
// made Recover's one feeding goroutine queue behind the starts already
// fed (1,000 at once), whose workers then waited for it (issue 12, eighth
// pass).
func (r *Registry) recoverPending(runs []listener.Run) []int {
	need := make([]int, 0, len(runs))
	r.mu.Lock()
	defer r.mu.Unlock()
	for i := range runs {
		run := &runs[i]
		if r.closed {
			return nil
		}
		if len(r.runs[run.RunID]) > 0 {
			continue
		}
		need = append(need, i)
		if p := r.pending[run.RunID]; p != nil {
			p.merge(*run, time.Time{})
			continue
		}
		p := &pendingRun{run: *run}
		p.run.Event = nil
		p.merge(*run, time.Time{})
		r.pending[run.RunID] = p
	}
	return need
}

// sharedTableRuns returns the runs of a recovery that must not step before
// every run of it is started: those mapped (by an explicit track or a
// rule) to a table that another query of the same recovery is mapped to
// too. Under the listener's hold a run is offered its retained started
// event and progress as soon as it is subscribed, and its tracker steps
// while Recover starts the others; a table's verdict is the minimum over
// the feeders that joined it (ADR 0015), so a query seen for the first
// time while the service was down, whose join came later in the
// recovery, would find the table already moved by another feeder's first
// advance, past data it was still writing. Their runs are offered
// everything at the release, after every join, as before the early offer.
// Two runs of one query are one feeder. A run's tables are matched as its
// start will match them: with the name the listing found in the stream
// ("" when the stream holds none, and the start's look-up finds none
// either). It also returns the feeder joins of those tables, one per
// table and query, for prejoin: offered late, a run still gets its live
// events as soon as it is subscribed; and starts, how many trackers the
// recovery's starts make at most (each track, and each rule's table of a
// run no track starts), for reserve.
func (r *Registry) sharedTableRuns(tracks []control.Track, runs []listener.Run) (late []string, joins []control.FeederJoin, starts int) {
	// Two passes: the first finds each table's first query and whether
	// another query maps to it, the second collects the runs and feeder
	// joins of the shared tables (no list of runs per table kept, no
	// quadratic scan of a table's runs of one query). The maps are made
	// at the size they reach with a table per run, held by value.
	type mapped struct {
		query  string
		shared bool
	}
	tables := make(map[string]mapped, len(tracks)+len(runs))
	add := func(table, query string) {
		m, ok := tables[table]
		switch {
		case !ok:
			tables[table] = mapped{query: query}
		case m.query != query && !m.shared:
			m.shared = true
			tables[table] = m
		}
	}
	// A run explicitly tracked may not be matched by the rules at its
	// start (a run the registry knows is not decided again): its rules'
	// tables count, but are not joined before.
	explicit := make(map[string]bool, len(tracks))
	each := func(fn func(table, query, name, run string, join bool)) {
		for _, t := range tracks {
			if t.DoneAt.IsZero() {
				explicit[t.RunID] = true
				fn(t.Table, t.QueryID, "", t.RunID, true)
			}
		}
		for i := range runs {
			run := &runs[i]
			for _, rule := range r.cfg.Rules {
				if table, ok := rule.Match(run.QueryID, run.Name); ok {
					fn(table, run.QueryID, run.Name, run.RunID, !explicit[run.RunID])
				}
			}
		}
	}
	each(func(table, query, _, _ string, join bool) {
		add(table, query)
		if join { // a track, or a run no track starts: a start's tracker
			starts++
		}
	})
	type tq struct{ table, query string }
	joined := make(map[tq]int) // index in joins
	each(func(table, query, name, run string, join bool) {
		if !tables[table].shared {
			return
		}
		late = append(late, run)
		if !join {
			return
		}
		if i, ok := joined[tq{table, query}]; !ok {
			joined[tq{table, query}] = len(joins)
			joins = append(joins, control.FeederJoin{Table: table, Query: query, Name: name})
		} else if joins[i].Name == "" {
			joins[i].Name = name // a rule's name over an explicit track's none
		}
	})
	return late, joins, starts
}

// reserve makes the registry's maps of trackers, runs and queries hold n
// more without growing: a restart's starts fill them with up to 100,000
// runs at once, and growing them from what they held cost a rehash of
// every entry at each doubling (issue 12, ninth pass). A map is made
// again only when it would grow; its entries are copied, so that what
// it held stays. The runs and queries are counted as the trackers (one
// each, the most they can be).
func (r *Registry) reserve(n int) {
	if n <= 0 {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.trackers = mapcap.Reserved(r.trackers, n)
	r.runs = mapcap.Reserved(r.runs, n)
	r.queries = mapcap.Reserved(r.queries, n)
}

// prejoin joins the queries of the shared tables of a recovery
// (sharedTableRuns) to their tables' feeders before any run of the
// recovery is started, up to RecoverParallelism at once (in the groups of
// the store's group commit, when it has one): their runs' starts join
// them again, which changes nothing for a feeder the table knows. A join
// that did not succeed for a reason a retry may change (the table locked
// by another session, the database) holds its table until it joins
// (joinEarlyLater); the starts into the table wait behind it. A table or
// name the start refuses is not joined.
func (r *Registry) prejoin(ctx context.Context, joins []control.FeederJoin) {
	fj, ok := r.cfg.Store.(FeederJoiner)
	if !ok || len(joins) == 0 {
		return
	}
	next := newFanOut(r.cfg.RecoverParallelism, func(j control.FeederJoin) {
		req := Request{QueryID: j.Query, Table: j.Table, QueryName: j.Name}
		switch _, err := r.joinFeeder(ctx, fj, req); {
		case joinRetryable(err):
			// The table waits for it: the feeders started before its
			// run would move it on their live events.
			r.joinEarlyLater(j, err)
		case err != nil:
			r.log.Debug("the feeder join of a shared table was refused before the recovery's starts; its run's start joins it again",
				zap.String("table", j.Table), zap.String("query_id", j.Query), zap.Error(err))
		}
	})
	for _, j := range joins {
		if control.CheckTableName(j.Table) != nil || len(j.Name) > MaxQueryNameLen {
			continue
		}
		next.feed(j)
	}
	next.wait()
}
