package bench

import (
	"context"
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
	// Per (table, period): feeder rows offered by advance statements (one
	// per feeder and period; a group commit shares one statement), and
	// tables settled (a second statement for a table its advance left
	// behind its candidate: held by another feeder; a read unless it
	// moves the table).
	AdvancesPerPeriod float64 `json:"advances_per_period"`
	SettlesPerPeriod  float64 `json:"settles_per_period"`
	// MovesPerPeriod is the table's own row writes per (table, period):
	// its verdict's moves (each feeder's own row is written by its
	// advance).
	MovesPerPeriod float64 `json:"moves_per_period"`
	// MsPerPeriod is the wall time of one period of every group commit.
	MsPerPeriod float64 `json:"ms_per_period"`
}

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
	var moves atomic.Int64
	advance := func(q, p int, rnd *rand.Rand) error {
		batch := make([]control.Advance, 0, tables)
		for _, t := range rnd.Perm(tables) {
			batch = append(batch, control.Advance{
				Table: fmt.Sprintf("bench.feeders.t%05d", t), QueryID: fmt.Sprintf("q%02d", q),
				FinalizedUntil: base.Add(time.Duration(p) * time.Hour), RunID: fmt.Sprintf("r%02d", q), BatchID: int64(p),
			})
		}
		res, err := store.AdvanceBatch(ctx, batch)
		for _, r := range res {
			if r.Moved {
				moves.Add(1)
			}
		}
		return err
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
	out.AdvancesPerPeriod = float64(s1.Advanced-s0.Advanced) / cells
	out.SettlesPerPeriod = float64(s1.Settled-s0.Settled) / cells
	out.MovesPerPeriod = float64(moves.Load()) / cells
	out.MsPerPeriod = float64(elapsed.Milliseconds()) / float64(periods)
	// Every table ends at the last period: the slowest feeder's.
	v, err := store.Get(ctx, "bench.feeders.t00000")
	if err != nil {
		return out, err
	}
	if want := base.Add(time.Duration(periods) * time.Hour); !v.FinalizedUntil.Equal(want) {
		return out, fmt.Errorf("feeders: a table of %d feeders ended at %v, want %v", k, v.FinalizedUntil, want)
	}
	r.say("feeders: %d tables x %d feeders, %d periods: per (table, period) %.2f feeder advances (one row write each), %.2f settles, %.2f moves of the table; %.1f ms per period",
		tables, k, periods, out.AdvancesPerPeriod, out.SettlesPerPeriod, out.MovesPerPeriod, out.MsPerPeriod)
	return out, nil
}
