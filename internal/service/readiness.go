package service

import (
	"context"
	"errors"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// ReadyTimeout bounds the checks of Ready when its context has no
// deadline sooner, and of a scrape's readiness gauges.
const ReadyTimeout = 2 * time.Second

// errNotStarted is Ready's answer for a part that has not started.
var errNotStarted = errors.New("not started")

// Ready pings PostgreSQL and NATS, as /readyz does; a nil error is up.
func (s *Service) Ready(ctx context.Context) (postgres, nats error) {
	ctx, cancel := context.WithTimeout(ctx, ReadyTimeout)
	defer cancel()
	postgres, nats = errNotStarted, errNotStarted
	if s.store != nil {
		postgres = s.store.Ping(ctx)
	}
	if s.bus != nil {
		nats = s.bus.Ready(ctx)
	}
	return postgres, nats
}

// readiness exports what /readyz answers, checked at scrape time, so that
// an alert and a dashboard need no probe of their own:
// finalizer_postgres_up, finalizer_nats_up and finalizer_ready (both).
type readiness struct {
	s                        *Service
	pgDesc, natsDesc, okDesc *prometheus.Desc
}

func newReadiness(s *Service) readiness {
	return readiness{
		s:        s,
		pgDesc:   prometheus.NewDesc("finalizer_postgres_up", "1 when PostgreSQL answered a ping at this scrape, else 0.", nil, nil),
		natsDesc: prometheus.NewDesc("finalizer_nats_up", "1 when the NATS connection is up and the server answered at this scrape, else 0.", nil, nil),
		okDesc:   prometheus.NewDesc("finalizer_ready", "1 when /readyz answers 200 (PostgreSQL and NATS up), else 0.", nil, nil),
	}
}

func (r readiness) Describe(ch chan<- *prometheus.Desc) {
	ch <- r.pgDesc
	ch <- r.natsDesc
	ch <- r.okDesc
}

func (r readiness) Collect(ch chan<- prometheus.Metric) {
	pg, nats := r.s.Ready(context.Background())
	up := func(err error) float64 {
		if err != nil {
			return 0
		}
		return 1
	}
	ch <- prometheus.MustNewConstMetric(r.pgDesc, prometheus.GaugeValue, up(pg))
	ch <- prometheus.MustNewConstMetric(r.natsDesc, prometheus.GaugeValue, up(nats))
	ch <- prometheus.MustNewConstMetric(r.okDesc, prometheus.GaugeValue, up(pg)*up(nats))
}
