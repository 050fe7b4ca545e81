package bench

import (
	"context"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// ingestAt returns the run and batch of the i-th ingest message: rounds of
// one event per run, batches 2 .. IngestPerRun+1 (batch 1 is the first
// progress every run publishes when it is tracked).
func (r *runner) ingestAt(i int) (*sim, int64) {
	return r.sims[i%len(r.sims)], 2 + int64(i/len(r.sims))
}

// publishProgress publishes s's progress of batch k and returns when.
func (r *runner) publishProgress(s *sim, k int64) (time.Time, error) {
	r.buf = s.progress(r.buf, k, r.clk.at(s, k))
	at := time.Now()
	if err := r.pub.Publish(s.subject, r.buf); err != nil {
		return at, fmt.Errorf("publish: %w", err)
	}
	s.last = k
	return at, nil
}

// blast publishes n messages (next(i) publishes the i-th) as fast as the
// consumer takes them, never more than Window ahead of consumed(). It
// returns when the first message was published.
func (r *runner) blast(ctx context.Context, n int, next func(i int) error, consumed func() int64) (time.Time, error) {
	start := time.Now()
	for i := 0; i < n; {
		if int64(i)-consumed() >= int64(r.cfg.Window) {
			if err := ctx.Err(); err != nil {
				return start, err
			}
			time.Sleep(50 * time.Microsecond)
			continue
		}
		if err := next(i); err != nil {
			return start, err
		}
		i++
	}
	return start, r.pub.FlushTimeout(10 * time.Second)
}

// publishAll publishes one progress of every run, batch batch(s), as fast
// as the service takes them in (within Window messages of accepted) when
// accepted is not nil, at once otherwise. It returns when the first was
// published, after the last is flushed.
func (r *runner) publishAll(ctx context.Context, batch func(s *sim) int64, accepted func() int64) (time.Time, error) {
	if accepted == nil {
		n := int64(len(r.sims))
		accepted = func() int64 { return n }
	}
	return r.blast(ctx, len(r.sims), func(i int) error {
		s := r.sims[i]
		_, err := r.publishProgress(s, batch(s))
		return err
	}, accepted)
}

// waitCount polls until count() reaches n, and returns when it did.
func (r *runner) waitCount(ctx context.Context, what string, n int64, count func() int64) error {
	deadline := time.Now().Add(r.cfg.WaitTimeout)
	for count() < n {
		if time.Now().After(deadline) {
			return fmt.Errorf("%s: %d of %d after %s", what, count(), n, r.cfg.WaitTimeout)
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		time.Sleep(time.Millisecond)
	}
	return nil
}

// waitVerdicts waits until every table of targets is heard at its time and
// returns when the last one was.
func (r *runner) waitVerdicts(ctx context.Context, what string, targets map[string]time.Time) (time.Time, error) {
	wctx, cancel := context.WithTimeout(ctx, r.cfg.WaitTimeout)
	defer cancel()
	last, left, err := r.obs.waitAll(wctx, targets)
	if err != nil {
		return last, fmt.Errorf("%s: %d of %d verdicts not committed: %w", what, left, len(targets), err)
	}
	return last, nil
}

// settle waits until count() has not changed for 200 ms: the verdicts a
// phase waits for are heard at commit, a little before the trackers (or
// the naive callbacks) count the statements that made them.
func (r *runner) settle(ctx context.Context, count func() float64) float64 {
	deadline := time.Now().Add(r.cfg.WaitTimeout)
	last, since := count(), time.Now()
	for time.Since(since) < 200*time.Millisecond && time.Now().Before(deadline) && ctx.Err() == nil {
		time.Sleep(10 * time.Millisecond)
		if v := count(); v != last {
			last, since = v, time.Now()
		}
	}
	return last
}

// targetsAtLast returns, per table, the period of its last published batch.
func (r *runner) targetsAtLast() map[string]time.Time {
	t := make(map[string]time.Time, len(r.sims))
	for _, s := range r.sims {
		t[s.table] = r.clk.period(s, s.last)
	}
	return t
}

// waitStored waits until the stream has stored n messages more than at
// r.stored (it captures plain publishes asynchronously), or has stored
// nothing more for a second: under a flood of plain publishes JetStream
// may drop some. It returns how many were stored.
func (r *runner) waitStored(ctx context.Context, st jetstream.Stream, n int) (int, error) {
	deadline := time.Now().Add(r.cfg.WaitTimeout)
	var seen uint64
	still := time.Now()
	for {
		info, err := st.Info(ctx)
		if err != nil {
			return 0, err
		}
		last := info.State.LastSeq
		if last != seen {
			seen, still = last, time.Now()
		}
		if last >= r.stored+uint64(n) || time.Since(still) > time.Second || time.Now().After(deadline) {
			stored := int(last - r.stored)
			r.stored = last
			return stored, nil
		}
		time.Sleep(10 * time.Millisecond)
	}
}
