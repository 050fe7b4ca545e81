package bench

import (
	"context"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"go.uber.org/zap"

	"github.com/finalizer-dev/finalizer/finalizer"
	"github.com/finalizer-dev/finalizer/internal/actions"
	"github.com/finalizer-dev/finalizer/internal/memlimit"
	"github.com/finalizer-dev/finalizer/internal/service"
	"github.com/finalizer-dev/finalizer/listener"
	"github.com/finalizer-dev/finalizer/progress"
)

// benchService is the service under measure: the very wiring of
// `finalizer serve` (package service), against the bench's own NATS and
// PostgreSQL, without the HTTP API. It counts the events taken in and
// dropped.
type benchService struct {
	svc     *service.Service
	tracker *finalizer.Registry

	accepted atomic.Int64 // progress events taken in: parsed and accepted, or superseded unparsed
	idles    atomic.Int64 // idle events accepted
	dropped  atomic.Int64 // events dropped (malformed, mismatch, ...)

	startedIn time.Duration // serve's start: open, migrate, dial, stream, recover
	// Of which: listing the runs JetStream retains, Recover, and taking
	// the ownership of tables.
	retainedIn, recoverIn, ownIn time.Duration
}

// acceptedSince returns a counter of the progress events the service
// takes in from now on.
func (b *benchService) acceptedSince() func() int64 {
	base := b.accepted.Load()
	return func() int64 { return b.accepted.Load() - base }
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
	// MaxBatch and Workers set the registry's (0: its defaults), to
	// measure the burst at other group sizes.
	MaxBatch, Workers int
	// Actions are the rules with actions (issue 19).
	Actions []actions.Rule
	// MemoryLimitOff turns the service's own memory limit off;
	// MemoryHeadroom, when positive, sets its headroom (memlimit.Options).
	MemoryLimitOff bool
	MemoryHeadroom float64
}

// startService starts the service as serve does, recovering explicit
// tracks from PostgreSQL and ruled runs from JetStream.
func startService(ctx context.Context, c serviceConfig) (*benchService, error) {
	b := &benchService{}
	o := service.Options{
		Logger:       c.Logger,
		NATS:         listener.Options{URL: c.NATSURL, Prefix: c.Prefix},
		PostgresURL:  c.PostgresURL,
		ControlTable: c.ControlTable,
		// No cap: the bench tracks exactly its N runs, up to 100,000 and
		// beyond (the service's default cap is a guard against a flood of
		// run ids, not a size the bench must stay under).
		Registry:       finalizer.RegistryConfig{Rules: c.Rules, MaxTrackers: -1},
		Actions:        c.Actions,
		MemoryLimitOff: c.MemoryLimitOff,
		MemoryLimit:    memlimit.Options{Headroom: c.MemoryHeadroom},
		OnEvent: func(kind progress.Kind, outcome string) {
			switch {
			case outcome != listener.OutcomeAccepted && outcome != listener.OutcomeSuperseded:
				b.dropped.Add(1)
			case kind == progress.KindProgress:
				b.accepted.Add(1) // parsed, or made useless by a newer one (ADR 0011)
			case kind == progress.KindIdle:
				b.idles.Add(1)
			}
		},
	}
	o.Registry.MaxBatch, o.Registry.Workers = c.MaxBatch, c.Workers
	if c.NoGroupCommit {
		o.Registry.MaxBatch = -1
	}
	svc, err := service.Start(ctx, o)
	if err != nil {
		return nil, err
	}
	b.svc, b.tracker = svc, svc.Registry()
	t := svc.Timings()
	b.startedIn, b.retainedIn, b.recoverIn, b.ownIn = t.Start, t.Retained, t.Recover, t.Own
	return b, nil
}

// metric returns the value of one of the service's counters or gauges.
// The ones the bench polls are read directly: gathering the whole
// registry reads every feeder from PostgreSQL and exports two series per
// table, which at 100,000 tables costs more than the phase it waits for.
func (s *benchService) metric(name string) float64 {
	m := s.svc.Metrics()
	var c prometheus.Metric
	switch name {
	case "finalizer_tracked_runs":
		c = m.TrackedRuns
	case "finalizer_control_writes_total":
		c = m.Writes
	case "finalizer_advance_retries_total":
		c = m.Retries
	case "finalizer_advance_failures_total":
		c = m.FailedAdvances
	default:
		return metricValue(s.svc.Prometheus(), name)
	}
	var d dto.Metric
	if err := c.Write(&d); err != nil {
		return 0
	}
	return d.GetCounter().GetValue() + d.GetGauge().GetValue()
}

// stop stops the service as serve does. It blocks.
func (s *benchService) stop(ctx context.Context) { s.svc.Stop(ctx) }
