package bench

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/finalizer-dev/finalizer/control"
	"github.com/finalizer-dev/finalizer/finalizer"
	"github.com/finalizer-dev/finalizer/listener"
	"github.com/finalizer-dev/finalizer/progress"
)

var (
	_ finalizer.BatchStore = (*control.Store)(nil) // serve's store gets group commit (ADR 0008)
)

// service is the part of `finalizer serve` that does the work, wired the
// way serve wires it: the control store, the listener with its stream, the
// registry with its rules, discovery, and recovery at start. HTTP, the
// embedded servers and the data-dir lock are left out (the bench runs
// NATS and PostgreSQL itself).
type service struct {
	log     *zap.Logger
	store   *control.Store
	bus     *listener.Listener
	reg     *prometheus.Registry // the metrics, as /metrics serves them
	tracker *finalizer.Registry
	disc    *listener.Subscription
	metrics *finalizer.Metrics

	accepted atomic.Int64 // progress events taken in: parsed and accepted, or superseded unparsed
	dropped  atomic.Int64 // events dropped (malformed, mismatch, ...)

	startedIn time.Duration // serve's start: open, migrate, dial, stream, recover
	// Of which: listing the runs JetStream retains, and Recover.
	retainedIn, recoverIn time.Duration
}

// serviceConfig is what startService needs.
type serviceConfig struct {
	NATSURL      string
	PostgresURL  string
	ControlTable string
	Prefix       string
	Rules        []finalizer.Rule
	Logger       *zap.Logger
	// NoGroupCommit: one statement per advance (ADR 0008 off).
	NoGroupCommit bool
}

// startService starts the service as serve does, recovering explicit
// tracks from PostgreSQL and ruled runs from JetStream.
func startService(ctx context.Context, c serviceConfig) (*service, error) {
	began := time.Now()
	s := &service{log: c.Logger, reg: prometheus.NewRegistry()}
	s.metrics = finalizer.NewMetrics(s.reg, time.Now)
	var err error
	s.store, err = control.Open(ctx, c.PostgresURL, control.Options{Table: c.ControlTable, Logger: c.Logger.Named("control")})
	if err != nil {
		return nil, fmt.Errorf("control store: %w", err)
	}
	if err := s.store.Migrate(ctx); err != nil {
		s.stop(ctx)
		return nil, fmt.Errorf("migrate: %w", err)
	}
	s.bus, err = listener.Dial(ctx, listener.Options{
		URL: c.NATSURL, Prefix: c.Prefix, Logger: c.Logger.Named("listener"),
		OnEvent: func(kind progress.Kind, outcome string) {
			s.metrics.Events.WithLabelValues(kind.String(), outcome).Inc()
			switch {
			case outcome != listener.OutcomeAccepted && outcome != listener.OutcomeSuperseded:
				s.dropped.Add(1)
			case kind == progress.KindProgress:
				s.accepted.Add(1) // parsed, or made useless by a newer one (ADR 0011)
			}
		},
	})
	if err != nil {
		s.stop(ctx)
		return nil, fmt.Errorf("nats: %w", err)
	}
	if err := s.bus.EnsureStream(ctx); err != nil {
		s.stop(ctx)
		return nil, fmt.Errorf("stream: %w", err)
	}
	rc := finalizer.RegistryConfig{
		Events: finalizer.ListenerEvents{L: s.bus}, Store: s.store, Tracks: s.store, Rules: c.Rules,
		Logger: c.Logger.Named("tracker"), Metrics: s.metrics,
	}
	if c.NoGroupCommit {
		rc.MaxBatch = -1
	}
	s.tracker = finalizer.NewRegistry(rc)
	if len(c.Rules) > 0 {
		if s.disc, err = s.bus.Discover(s.tracker.Known, s.tracker.Discovered); err != nil {
			s.stop(ctx)
			return nil, fmt.Errorf("discovery: %w", err)
		}
	}
	tracks, err := s.store.Tracks(ctx)
	if err != nil {
		s.stop(ctx)
		return nil, fmt.Errorf("read explicit tracks: %w", err)
	}
	var runs []listener.Run
	t0 := time.Now()
	if len(c.Rules) > 0 {
		if runs, err = s.bus.Retained(ctx); err != nil && !errors.Is(err, listener.ErrNoStream) {
			s.stop(ctx)
			return nil, fmt.Errorf("retained runs: %w", err)
		}
	}
	t1 := time.Now()
	if err := s.tracker.Recover(ctx, tracks, runs); err != nil {
		s.stop(ctx)
		return nil, fmt.Errorf("recover: %w", err)
	}
	s.retainedIn, s.recoverIn = t1.Sub(t0), time.Since(t1)
	s.startedIn = time.Since(began)
	return s, nil
}

// metric returns the value of one of the service's counters or gauges.
func (s *service) metric(name string) float64 { return metricValue(s.reg, name) }

// stop stops what startService started, as serve does. It blocks.
func (s *service) stop(ctx context.Context) {
	if s.disc != nil {
		_ = s.disc.Unsubscribe()
	}
	if s.tracker != nil {
		if err := s.tracker.Close(ctx); err != nil {
			s.log.Warn("registry close", zap.Error(err))
		}
	}
	if s.bus != nil {
		s.bus.Close()
	}
	if s.store != nil {
		s.store.Close()
	}
}
