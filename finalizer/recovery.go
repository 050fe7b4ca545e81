package finalizer

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"

	"go.uber.org/zap"

	"github.com/finalizer-dev/finalizer/control"
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
	if h, ok := r.cfg.Bus.(CatchUpHolder); ok {
		release := h.HoldCatchUps()
		defer func() {
			if err := release(ctx); err != nil {
				r.log.Warn("could not catch the recovered runs up from the stream at once; each is retried on its own", zap.Error(err))
			}
		}()
	}
	if lo, ok := r.cfg.Bus.(LateOfferer); ok {
		lo.OfferLate(r.sharedTableRuns(tracks, runs))
	}
	var (
		mu    sync.Mutex
		first error
		wg    sync.WaitGroup
	)
	note := func(err error) {
		mu.Lock()
		if first == nil {
			first = err
		}
		mu.Unlock()
	}
	// Up to RecoverParallelism starts at once, on as many workers as
	// there are starts to make, each taking the next start when done: a
	// goroutine per run (100,000 at a restart) grew each one's stack
	// anew to the depth of a start (join, subscribe), 2% of a restart's
	// CPU at 100,000 runs (issue 12, sixth pass). Both kinds of start
	// are fed in the same order as before, explicit tracks first.
	type start struct {
		req   Request // an explicit track, when run is nil
		run   *listener.Run
		track bool
	}
	starts := make(chan start)
	workers := 0
	feed := func(s start) {
		if workers < r.cfg.RecoverParallelism {
			workers++
			wg.Add(1)
			go func() {
				defer wg.Done()
				for s := range starts {
					if s.track {
						if _, err := r.Track(ctx, s.req); err != nil {
							note(err)
						}
						continue
					}
					r.consider(ctx, s.run.RunID, nil)
				}
			}()
		}
		starts <- s
	}
	for _, t := range tracks {
		if !t.DoneAt.IsZero() {
			continue
		}
		var opts progress.SpecOptions
		if err := json.Unmarshal(t.Spec, &opts); err != nil {
			note(fmt.Errorf("track of run %s: bad spec: %w", t.RunID, err))
			continue
		}
		spec, err := progress.ParseSpec(opts)
		if err != nil {
			note(fmt.Errorf("track of run %s: %w", t.RunID, err))
			continue
		}
		feed(start{req: Request{QueryID: t.QueryID, RunID: t.RunID, Table: t.Table, Spec: spec, Explicit: true, resumed: true}, track: true})
	}
	for i := range runs {
		if !r.recoverPending(runs[i]) {
			continue
		}
		feed(start{run: &runs[i]})
	}
	close(starts)
	wg.Wait()
	if first != nil {
		r.log.Error("some runs could not be recovered", zap.Error(first))
	}
	return first
}

// recoverPending makes a retained run pending, as discovery would, unless
// it is known already; it reports whether the run needs a decision. The
// pending cap does not apply: recovery waits for its decisions.
func (r *Registry) recoverPending(run listener.Run) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed || len(r.runs[run.RunID]) > 0 {
		return false
	}
	if p := r.pending[run.RunID]; p != nil {
		p.merge(run)
		return true
	}
	p := &pendingRun{run: run}
	p.run.Event = nil
	p.merge(run)
	r.pending[run.RunID] = p
	return true
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
// either).
func (r *Registry) sharedTableRuns(tracks []control.Track, runs []listener.Run) (late []string) {
	type feeder struct{ query, run string }
	byTable := make(map[string][]feeder)
	shared := make(map[string]bool)
	add := func(table, query, run string) {
		fs := byTable[table]
		for _, f := range fs {
			if f.query != query {
				shared[table] = true
				break
			}
		}
		byTable[table] = append(fs, feeder{query, run})
	}
	for _, t := range tracks {
		if t.DoneAt.IsZero() {
			add(t.Table, t.QueryID, t.RunID)
		}
	}
	for i := range runs {
		run := &runs[i]
		for _, rule := range r.cfg.Rules {
			if table, ok := rule.Match(run.QueryID, run.Name); ok {
				add(table, run.QueryID, run.RunID)
			}
		}
	}
	for table := range shared {
		for _, f := range byTable[table] {
			late = append(late, f.run)
		}
	}
	return late
}
