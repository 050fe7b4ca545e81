package bench

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/finalizer-dev/finalizer/control"
	"github.com/finalizer-dev/finalizer/finalizer"
	"github.com/finalizer-dev/finalizer/internal/cputime"
	"github.com/finalizer-dev/finalizer/progress"
)

// burstFloor measures, after the burst phase, what PostgreSQL alone
// takes for the same burst: the advances the service's trackers sent
// for it (every run's table moved into its next period, with the run's
// ids, end offset and source descriptions, read from the run's own
// progress documents), applied by control.Store.AdvanceBatch in groups
// of the group commit's size with as many groups in flight as the
// service's committers, on a control table of its own, with nothing
// else to do: no NATS, no parse, no tracker. The burst cannot be
// committed faster than its statements; their time is the floor the
// database sets under the burst on this machine, measured in the same
// run (BENCHMARKS.md, "The burst's floor"). The advances are built
// before the clock starts. It returns the floor in seconds and the Go
// CPU of this process per row over it (the store's own work: building
// the statement, reading its result; PostgreSQL's is not in it).
func (r *runner) burstFloor(ctx context.Context) (seconds, goCPUPerRowUs float64, err error) {
	store, err := control.Open(ctx, r.pgURL, control.Options{Table: r.schema + ".floor_finalization", Logger: r.cfg.Logger})
	if err != nil {
		return 0, 0, fmt.Errorf("burst floor: %w", err)
	}
	defer store.Close()
	if err := store.Migrate(ctx); err != nil {
		return 0, 0, fmt.Errorf("burst floor: %w", err)
	}
	maxBatch := r.groupSize()
	// The rows as the burst found them (each run's last progress before
	// it), then the burst's advances (each run's next crossing after).
	before, after := make([]control.Advance, len(r.sims)), make([]control.Advance, len(r.sims))
	var buf []byte
	for i, s := range r.sims {
		k1 := s.last
		k0 := k1 - 1
		for _, x := range []struct {
			k   int64
			out *control.Advance
		}{{k0, &before[i]}, {k1, &after[i]}} {
			buf = s.progress(buf, x.k, r.clk.at(s, x.k))
			a, err := simAdvance(s, buf)
			if err != nil {
				return 0, 0, fmt.Errorf("burst floor: run %d batch %d: %w", s.idx, x.k, err)
			}
			*x.out = a
		}
	}
	if err := applyGroups(ctx, store, before, maxBatch, finalizer.DefaultCommitters); err != nil {
		return 0, 0, fmt.Errorf("burst floor: the rows before: %w", err)
	}
	cpu0 := cputime.Process()
	start := time.Now()
	if err := applyGroups(ctx, store, after, maxBatch, finalizer.DefaultCommitters); err != nil {
		return 0, 0, fmt.Errorf("burst floor: %w", err)
	}
	took := time.Since(start)
	cpu := cputime.Process() - cpu0
	return took.Seconds(), float64(cpu.Microseconds()) / float64(max(len(after), 1)), nil
}

// groupSize is the most advances in one group commit of the bench's
// service (Config.MaxBatch, or the service's default).
func (r *runner) groupSize() int {
	if r.cfg.MaxBatch > 0 {
		return r.cfg.MaxBatch
	}
	return finalizer.DefaultMaxBatch
}

// simAdvance is the advance a tracker would send for doc, s's progress:
// its candidate under s's spec, its ids, its sources' descriptions,
// guarded as a tracker's advance is, with nothing sharing doc's memory.
func simAdvance(s *sim, doc []byte) (control.Advance, error) {
	ev, err := progress.Parse(doc, progress.KindProgress)
	if err != nil {
		return control.Advance{}, err
	}
	c, ok := s.spec.Candidate(ev)
	if !ok {
		return control.Advance{}, fmt.Errorf("no candidate")
	}
	sources := make([]string, len(ev.Sources))
	for i, src := range ev.Sources {
		sources[i] = strings.Clone(src.Description)
	}
	return control.Advance{
		Table: s.table, FinalizedUntil: c.Until, EndTime: c.Time, EndOffset: append([]byte(nil), c.EndOffset...),
		QueryID: s.queryID, QueryName: s.name, RunID: s.runID, BatchID: ev.BatchID,
		Sources: sources, Guard: control.KnownRewind(time.Time{}),
	}, nil
}

// applyGroups applies as in groups of maxBatch, at most inFlight groups
// at once, as the group commit sends a full queue; every advance must
// move its table's verdict.
func applyGroups(ctx context.Context, store *control.Store, as []control.Advance, maxBatch, inFlight int) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	groups := make(chan []control.Advance)
	var wg sync.WaitGroup
	var mu sync.Mutex
	var first error
	fail := func(err error) {
		mu.Lock()
		if first == nil {
			first = err
			cancel()
		}
		mu.Unlock()
	}
	for range inFlight {
		wg.Go(func() {
			for g := range groups {
				res, err := store.AdvanceBatch(ctx, g)
				if err != nil {
					fail(err)
					continue
				}
				for i, x := range res {
					if !x.Moved {
						fail(fmt.Errorf("table %s did not move to %s", g[i].Table, g[i].FinalizedUntil.Format(time.RFC3339)))
						break
					}
				}
			}
		})
	}
	for i := 0; i < len(as) && ctx.Err() == nil; i += maxBatch {
		select {
		case groups <- as[i:min(i+maxBatch, len(as))]:
		case <-ctx.Done():
		}
	}
	close(groups)
	wg.Wait()
	if first == nil {
		first = ctx.Err()
	}
	return first
}
