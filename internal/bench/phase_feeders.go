package bench

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/finalizer-dev/finalizer/control"
)

// Feeders is the cost of tables written by several queries (ADR 0015),
// measured on the control table itself: Tables tables, each fed by
// FeedersPerTable queries, each query advancing each of its tables once
// per period, Periods periods, from one goroutine per query in group
// commits of every table at once (as a committer applies them at the top
// of a period). With one feeder per table this is the single-feeder cost.
type Feeders struct {
	Tables          int `json:"tables"`
	FeedersPerTable int `json:"feeders_per_table"`
	Periods         int `json:"periods"`
	// Per (table, period): WritesPerPeriod is every row the advances wrote
	// (the table's own row and feeder rows): 1.00 for one feeder, as
	// before feeders existed; for k feeders, at most one feeder row per
	// feeder plus the table's own move. MovesPerPeriod is the table's own
	// row writes (its verdict's moves), FeederWritesPerPeriod the feeder
	// rows written. SolePerPeriod are the advances the sole statement (one
	// row, ADR 0015) took, AdvancesPerPeriod those that went through the
	// feeders table (one transaction of four statements per group commit),
	// SettlesPerPeriod the settle statements (none since advances through
	// the feeders table serialize per table).
	WritesPerPeriod       float64 `json:"writes_per_period"`
	MovesPerPeriod        float64 `json:"moves_per_period"`
	FeederWritesPerPeriod float64 `json:"feeder_writes_per_period"`
	SolePerPeriod         float64 `json:"sole_per_period"`
	AdvancesPerPeriod     float64 `json:"advances_per_period"`
	SettlesPerPeriod      float64 `json:"settles_per_period"`
	// MsPerPeriod is the wall time of one period of every group commit.
	MsPerPeriod float64 `json:"ms_per_period"`
	// BusyRetries are the advances sent again because another feeder's
	// statement held their row past the lock wait (control.ErrBusy), as
	// a tracker retries them; 0 on a machine that is not overloaded.
	BusyRetries int64 `json:"busy_retries,omitempty"`
}

// maxFeederBusyTries bounds the sends of one busy advance in the feeders
// phase (100 ms apart): past them the phase fails with the error.
const maxFeederBusyTries = 50

// feeders measures k feeders per table on a control table of its own in
// the bench's database.
func (r *runner) feeders(ctx context.Context, tables, k, periods int) (Feeders, error) {
	out := Feeders{Tables: tables, FeedersPerTable: k, Periods: periods}
	name := fmt.Sprintf("%s.feeders%d", r.schema, k)
	store, err := control.Open(ctx, r.pgURL, control.Options{Table: name, MaxConns: int32(max(k, 2))})
	if err != nil {
		return out, err
	}
	defer store.Close()
	if err := store.Migrate(ctx); err != nil {
		return out, err
	}
	base := time.Date(2026, 9, 28, 0, 0, 0, 0, time.UTC)
	var moves, busyRetries atomic.Int64
	advance := func(q, p int, rnd *rand.Rand) error {
		batch := make([]control.Advance, 0, tables)
		for _, t := range rnd.Perm(tables) {
			batch = append(batch, control.Advance{
				Table: fmt.Sprintf("bench.feeders.t%05d", t), QueryID: fmt.Sprintf("q%02d", q),
				FinalizedUntil: base.Add(time.Duration(p) * time.Hour), RunID: fmt.Sprintf("r%02d", q), BatchID: int64(p),
			})
		}
		// An entry can fail alone while the batch succeeds: another
		// feeder's group of the same tables can hold a row past the
		// lock wait on a loaded machine (control.ErrBusy), which the
		// service's tracker retries; so does the bench, sending the
		// busy entries again until they are applied. Any other entry's
		// error fails the phase: it was ignored, and only the final
		// check of one table caught it, without its cause.
		for try := 0; ; try++ {
			res, err := store.AdvanceBatch(ctx, batch)
			if err != nil {
				return err
			}
			var again []control.Advance
			for i, r := range res {
				switch {
				case r.Err == nil:
					if r.Moved {
						moves.Add(1)
					}
				case errors.Is(r.Err, control.ErrBusy) && try < maxFeederBusyTries:
					again = append(again, batch[i])
				default:
					return fmt.Errorf("feeders: advance of %s by %s, period %d: %w", batch[i].Table, batch[i].QueryID, p, r.Err)
				}
			}
			if len(again) == 0 {
				return nil
			}
			busyRetries.Add(int64(len(again)))
			batch = again
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(100 * time.Millisecond):
			}
		}
	}
	// Period 0 inserts every row; the measured periods move them.
	for q := range k {
		if err := advance(q, 0, rand.New(rand.NewPCG(uint64(q), 0))); err != nil {
			return out, err
		}
	}
	moves.Store(0)
	s0 := store.Stats()
	start := time.Now()
	for p := 1; p <= periods; p++ {
		if r.feedersPeriod != nil {
			r.feedersPeriod(ctx, name, p)
		}
		var wg sync.WaitGroup
		errs := make([]error, k)
		for q := range k {
			wg.Add(1)
			go func() {
				defer wg.Done()
				errs[q] = advance(q, p, rand.New(rand.NewPCG(uint64(q), uint64(p))))
			}()
		}
		wg.Wait()
		for _, err := range errs {
			if err != nil {
				return out, err
			}
		}
	}
	elapsed := time.Since(start)
	s1 := store.Stats()
	cells := float64(tables * periods)
	out.SolePerPeriod = float64(s1.Sole-s0.Sole) / cells
	out.AdvancesPerPeriod = float64(s1.Advanced-s0.Advanced) / cells
	out.SettlesPerPeriod = float64(s1.Settled-s0.Settled) / cells
	out.MovesPerPeriod = float64(moves.Load()) / cells
	out.FeederWritesPerPeriod = float64(s1.FeederWrites-s0.FeederWrites) / cells
	out.WritesPerPeriod = out.MovesPerPeriod + out.FeederWritesPerPeriod
	out.MsPerPeriod = float64(elapsed.Milliseconds()) / float64(periods)
	out.BusyRetries = busyRetries.Load()
	// Every table ends at the last period: the slowest feeder's.
	v, err := store.Get(ctx, "bench.feeders.t00000")
	if err != nil {
		return out, err
	}
	if want := base.Add(time.Duration(periods) * time.Hour); !v.FinalizedUntil.Equal(want) {
		return out, fmt.Errorf("feeders: a table of %d feeders ended at %v, want %v", k, v.FinalizedUntil, want)
	}
	r.say("feeders: %d tables x %d feeders, %d periods: per (table, period) %.2f row writes (%.2f of the table's row, %.2f feeder rows), %.2f sole advances, %.2f through the feeders table, %.2f settles; %.1f ms per period; %d advances sent again (busy)",
		tables, k, periods, out.WritesPerPeriod, out.MovesPerPeriod, out.FeederWritesPerPeriod, out.SolePerPeriod, out.AdvancesPerPeriod, out.SettlesPerPeriod, out.MsPerPeriod, out.BusyRetries)
	return out, nil
}
