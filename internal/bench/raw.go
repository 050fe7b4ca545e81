package bench

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/finalizer-dev/finalizer/listener"
)

// rawDelivery measures the NATS delivery rate of the ingest messages to a
// subscriber that does nothing. The stream captures them as it will in
// the ingest phase, holding every run's first progress before each round
// as it does then; it is purged afterwards.
func (r *runner) rawDelivery(ctx context.Context) error {
	// The stream, as the service makes it, so that the server stores every
	// message as it will later.
	l, err := listener.Dial(ctx, listener.Options{URL: r.natsURL, Prefix: prefix, MaxBytes: r.cfg.StreamMaxBytes})
	if err != nil {
		return err
	}
	err = l.EnsureStream(ctx)
	l.Close()
	if err != nil {
		return err
	}
	js, err := jetstream.New(r.pub)
	if err != nil {
		return err
	}
	st, err := js.Stream(ctx, listener.DefaultStream)
	if err != nil {
		return err
	}
	n := len(r.sims) * r.cfg.IngestPerRun
	r.res.IngestEvents = n
	for round := range r.cfg.RawRounds {
		// The stream as the ingest phase meets it: a message of every run
		// (its first progress, which the service's first verdicts leave
		// there), so that every message of the round replaces its run's
		// previous one (one per subject), as every ingest message does. An
		// empty stream spared the round that removal for 1 message in
		// IngestPerRun (about 4 µs each).
		// Published a window at a time: a flood of plain publishes loses
		// some (see waitStored).
		for from := 0; from < len(r.sims); from += r.cfg.Window {
			chunk := r.sims[from:min(from+r.cfg.Window, len(r.sims))]
			for _, s := range chunk {
				if _, err := r.publishProgress(s, 1); err != nil {
					return err
				}
			}
			if err := r.pub.Flush(); err != nil {
				return err
			}
			if stored, err := r.waitStored(ctx, st, len(chunk)); err != nil {
				return err
			} else if stored < len(chunk) {
				r.say("raw NATS delivery: the stream stored %d of %d first progresses", stored, len(chunk))
			}
		}
		rate, err := r.rawRound(ctx, st, n, round)
		if err != nil {
			return err
		}
		r.res.RawRounds = append(r.res.RawRounds, rate)
		r.res.RawEventsPerSec = max(r.res.RawEventsPerSec, rate)
		// Forget them: the next round, and the service, must meet the same
		// messages as news.
		stored, err := r.waitStored(ctx, st, n)
		if err != nil {
			return err
		}
		if stored < n {
			r.say("raw NATS delivery: the stream stored %d of the %d plain publishes", stored, n)
		}
		if err := st.Purge(ctx); err != nil {
			return err
		}
	}
	return nil
}

// rawRound publishes the ingest messages once to a subscriber that does
// nothing and returns its delivery rate. The round ends when the
// subscriber has them all and the stream has stored them (capturedAt), as
// the ingest phase does: the stream stores asynchronously, and a raw round
// timed at the delivery alone would leave part of the storing after its
// end, while the ingest phase pays for all of it.
func (r *runner) rawRound(ctx context.Context, st jetstream.Stream, n, round int) (float64, error) {
	nc, err := nats.Connect(r.natsURL, nats.Name("finalizer-bench-raw"))
	if err != nil {
		return 0, err
	}
	defer nc.Close()
	var got atomic.Int64
	var doneAt atomic.Int64
	sub, err := nc.Subscribe(prefix+".>", func(*nats.Msg) {
		if got.Add(1) == int64(n) {
			doneAt.Store(time.Now().UnixNano())
		}
	})
	if err != nil {
		return 0, err
	}
	_ = sub.SetPendingLimits(-1, -1)
	if err := nc.Flush(); err != nil {
		return 0, err
	}
	var start, storedAt time.Time
	err = r.profile(fmt.Sprintf("raw%d", round+1), func() error {
		var err error
		start, err = r.blast(ctx, n, func(i int) error {
			s, k := r.ingestAt(i)
			_, err := r.publishProgress(s, k)
			return err
		}, got.Load)
		if err != nil {
			return err
		}
		if err := r.waitCount(ctx, "raw delivery", int64(n), got.Load); err != nil {
			return err
		}
		storedAt, err = r.capturedAt(ctx, st, r.stored, n)
		return err
	})
	if err != nil {
		return 0, err
	}
	delivered := time.Duration(doneAt.Load() - start.UnixNano())
	took := max(delivered, storedAt.Sub(start))
	rate := float64(n) / took.Seconds()
	r.say("raw NATS delivery, round %d: %d messages delivered in %s, delivered and stored in %s: %.0f/s", round+1, n,
		delivered.Round(time.Millisecond), took.Round(time.Millisecond), rate)
	return rate, nil
}

// capturedAt waits until the stream's last sequence reaches from+n, or
// has not moved for a second (under a flood of plain publishes JetStream
// may drop some), and returns when it was seen to store its last message;
// the zero Time when it already had them all at the first look (the
// caller looks right after its consumer got the last message).
func (r *runner) capturedAt(ctx context.Context, st jetstream.Stream, from uint64, n int) (time.Time, error) {
	deadline := time.Now().Add(r.cfg.WaitTimeout)
	var seen uint64
	var seenAt time.Time
	for first := true; ; first = false {
		info, err := st.Info(ctx)
		if err != nil {
			return time.Time{}, err
		}
		now := time.Now()
		if last := info.State.LastSeq; last != seen || first {
			seen, seenAt = last, now
			if first && last >= from+uint64(n) {
				return time.Time{}, nil
			}
		}
		if seen >= from+uint64(n) || now.Sub(seenAt) > time.Second || now.After(deadline) {
			return seenAt, nil
		}
		time.Sleep(2 * time.Millisecond)
	}
}
