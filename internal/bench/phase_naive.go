package bench

import (
	"context"
	"fmt"
	"time"
)

// runNaive runs the naive baseline's phases on the same messages.
func (r *runner) runNaive(ctx context.Context) error {
	nv, err := startNaive(ctx, r.natsURL, r.pgURL, r.schema+".naive", r.sims, r.cfg.Logger.Named("naive"))
	if err != nil {
		return err
	}
	defer nv.stop()
	r.obs.forget()
	b := &Baseline{}
	r.res.Naive = b

	// Ingest: the same messages (batches 2 .. IngestPerRun+1).
	n := len(r.sims) * r.cfg.IngestPerRun
	var start time.Time
	err = r.profile("naive-ingest", func() error {
		var err error
		if start, err = r.blast(ctx, n, func(i int) error {
			s, k := r.ingestAt(i)
			_, err := r.publishProgress(s, k)
			return err
		}, nv.processed.Load); err != nil {
			return err
		}
		return r.waitCount(ctx, "naive ingest", int64(n), nv.processed.Load)
	})
	if err != nil {
		return err
	}
	took := time.Since(start)
	crossings := 0
	for _, s := range r.sims {
		crossings += r.crossingsIn(s, 1, s.last)
	}
	b.IngestEventsPerSec = float64(n) / took.Seconds()
	b.IngestWritesPerPeriod = r.settle(ctx, func() float64 { return float64(nv.writes.Load()) }) / float64(max(crossings, 1))
	r.say("naive ingest: %d events at %.0f/s, %.2f writes per (table, period)", n, b.IngestEventsPerSec, b.IngestWritesPerPeriod)
	// The runs now stand where they stood after the service's ingest; the
	// latency and burst phases replay the service's messages.
	r.rr = r.rrLatency
	if nv.failed.Load() != 0 {
		return fmt.Errorf("naive: %d events failed", nv.failed.Load())
	}
	r.flushBeforeLatency(ctx, &b.Latency)
	if err := r.profile("naive-latency", func() error {
		return r.latency(ctx, func() float64 { return float64(nv.writes.Load()) }, &b.Latency)
	}); err != nil {
		return err
	}
	return r.profile("naive-burst", func() error {
		var err error
		b.BurstSeconds, err = r.burst(ctx, nil)
		return err
	})
}
