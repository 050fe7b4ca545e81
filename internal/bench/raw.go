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
// the ingest phase; it is purged afterwards.
func (r *runner) rawDelivery(ctx context.Context) error {
	// The stream, as the service makes it, so that the server stores every
	// message as it will later.
	l, err := listener.Dial(ctx, listener.Options{URL: r.natsURL, Prefix: prefix})
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
		rate, err := r.rawRound(ctx, n, round)
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
// nothing and returns its delivery rate.
func (r *runner) rawRound(ctx context.Context, n, round int) (float64, error) {
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
	var start time.Time
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
		return r.waitCount(ctx, "raw delivery", int64(n), got.Load)
	})
	if err != nil {
		return 0, err
	}
	took := time.Duration(doneAt.Load() - start.UnixNano())
	rate := float64(n) / took.Seconds()
	r.say("raw NATS delivery, round %d: %d messages in %s: %.0f/s", round+1, n, took.Round(time.Millisecond), rate)
	return rate, nil
}
