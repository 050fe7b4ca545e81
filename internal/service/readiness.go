package service

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/finalizer-dev/finalizer/internal/embeddednats"
)

// ReadyTimeout bounds the checks of Ready when its context has no
// deadline sooner, and of a scrape's readiness gauges.
const ReadyTimeout = 2 * time.Second

// DefaultStoreCheckEvery is how often the service asks its embedded NATS
// server whether the event stream can still store, when
// Options.StoreCheckEvery is zero.
const DefaultStoreCheckEvery = 5 * time.Second

// errNotStarted is Ready's answer for a part that has not started.
var errNotStarted = errors.New("not started")

// Ready checks PostgreSQL, NATS and the event stream, as /readyz does; a
// nil error is up. The stream is up when it exists and, on the embedded
// server, has no write error (its file store refuses every write after
// one failed, see embeddednats.StreamHealth); without JetStream there is
// no stream to check and it is up.
func (s *Service) Ready(ctx context.Context) (postgres, nats, stream error) {
	ctx, cancel := context.WithTimeout(ctx, ReadyTimeout)
	defer cancel()
	postgres, nats, stream = errNotStarted, errNotStarted, errNotStarted
	if s.store != nil {
		postgres = s.store.Ping(ctx)
	}
	if s.bus != nil {
		nats = s.bus.Ready(ctx)
		stream = nil
		if s.jetstream {
			stream = s.bus.StreamReady(ctx)
		}
	}
	if stream == nil && s.embedded != nil && s.jetstream {
		stream = s.embedded.StreamHealth(s.bus.StreamName())
	}
	return postgres, nats, stream
}

// watchStore starts, with the embedded NATS server and its JetStream, the
// check of whether the event stream can still store. A file store that
// failed one write (too many open files while a flood of connections held
// every descriptor, a full disk) keeps the error and refuses every later
// write until the server restarts, so a service running on it would take
// no recovery data while /readyz said nothing. /readyz says the stream is
// down as soon as the server reports the write error; once two checks in a
// row saw it, the service stops with an error (exit code not 0), for its
// supervisor to restart it: the restart opens the store afresh. Its own
// stop ends the check.
func (s *Service) watchStore(context.Context) error {
	every := s.opts.StoreCheckEvery
	if s.embedded == nil || !s.jetstream || every < 0 {
		return nil
	}
	if every == 0 {
		every = DefaultStoreCheckEvery
	}
	stop, done := make(chan struct{}), make(chan struct{})
	name := s.bus.StreamName()
	go func() {
		defer close(done)
		t := time.NewTicker(every)
		defer t.Stop()
		seen := 0
		for {
			select {
			case <-stop:
				return
			case <-t.C:
			}
			err := s.embedded.StreamHealth(name)
			if !errors.Is(err, embeddednats.ErrStreamCannotStore) {
				seen = 0
				continue // healthy, or missing (the listener recreates it)
			}
			if seen++; seen == 1 {
				// Confirmed by the next check: meanwhile /readyz says so.
				s.log.Error("the event stream cannot store; stopping at the next check if it still cannot",
					zap.String("stream", name), zap.Error(err))
				continue
			}
			s.log.Error("the event stream cannot store any more events (its file store keeps a write error until "+
				"the server restarts); stopping so that the supervisor restarts the service",
				zap.String("stream", name), zap.Error(err))
			s.fail(fmt.Errorf("event stream %s cannot store: %w", name, err))
			return
		}
	}()
	s.started("store watch", func(context.Context) {
		close(stop)
		<-done
	})
	return nil
}

// readiness exports what /readyz answers, checked at scrape time, so that
// an alert and a dashboard need no probe of their own:
// finalizer_postgres_up, finalizer_nats_up, finalizer_stream_up and
// finalizer_ready (all three).
type readiness struct {
	s                                    *Service
	pgDesc, natsDesc, streamDesc, okDesc *prometheus.Desc
}

func newReadiness(s *Service) readiness {
	return readiness{
		s:          s,
		pgDesc:     prometheus.NewDesc("finalizer_postgres_up", "1 when PostgreSQL answered a ping at this scrape, else 0.", nil, nil),
		natsDesc:   prometheus.NewDesc("finalizer_nats_up", "1 when the NATS connection is up and the server answered at this scrape, else 0.", nil, nil),
		streamDesc: prometheus.NewDesc("finalizer_stream_up", "1 when the event stream exists and (embedded server) can store at this scrape, else 0.", nil, nil),
		okDesc:     prometheus.NewDesc("finalizer_ready", "1 when /readyz answers 200 (PostgreSQL, NATS and the stream up), else 0.", nil, nil),
	}
}

func (r readiness) Describe(ch chan<- *prometheus.Desc) {
	ch <- r.pgDesc
	ch <- r.natsDesc
	ch <- r.streamDesc
	ch <- r.okDesc
}

func (r readiness) Collect(ch chan<- prometheus.Metric) {
	pg, nats, stream := r.s.Ready(context.Background())
	up := func(err error) float64 {
		if err != nil {
			return 0
		}
		return 1
	}
	ch <- prometheus.MustNewConstMetric(r.pgDesc, prometheus.GaugeValue, up(pg))
	ch <- prometheus.MustNewConstMetric(r.natsDesc, prometheus.GaugeValue, up(nats))
	ch <- prometheus.MustNewConstMetric(r.streamDesc, prometheus.GaugeValue, up(stream))
	ch <- prometheus.MustNewConstMetric(r.okDesc, prometheus.GaugeValue, up(pg)*up(nats)*up(stream))
}
