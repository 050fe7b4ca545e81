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

// underTest is what the phases need of the service under measure, in
// either mode: in the bench's own process (benchService) or as a
// `finalizer serve` child process (childService, --service-process).
type underTest interface {
	// trackExplicit tracks s explicitly, as the track API does
	// (persisted).
	trackExplicit(ctx context.Context, s *sim) error
	// metric returns the value of one of the service's counters or
	// gauges (the sum of its series).
	metric(name string) float64
	// accepted, idles and dropped count the progress events taken in
	// (parsed and accepted, or superseded unparsed), the idle events
	// accepted, and the events dropped (malformed, mismatch, ignored).
	accepted() int64
	idles() int64
	dropped() int64
	// timings are the start's: the whole start, and of it listing the
	// runs JetStream retains, Recover and taking the ownership of tables
	// (zero when unknown: a child process reports its start only).
	timings() (start, retained, recover, own time.Duration)
	// connStats are the service's NATS connection's slow-consumer
	// errors, messages dropped and disconnections with an error.
	connStats() (slow, dropped, disconnects int64)
	// stop stops the service as an operator does (SIGTERM for a child)
	// and returns its exit code (0 in process). It blocks.
	stop(ctx context.Context) (exitCode int)
}

// acceptedSince returns a counter of the progress events svc takes in
// from now on.
func acceptedSince(svc underTest) func() int64 {
	base := svc.accepted()
	return func() int64 { return svc.accepted() - base }
}

// benchService is the service under measure: the very wiring of
// `finalizer serve` (package service), against the bench's own NATS and
// PostgreSQL, without the HTTP API. It counts the events taken in and
// dropped.
type benchService struct {
	svc     *service.Service
	tracker *finalizer.Registry

	nAccepted atomic.Int64 // progress events taken in: parsed and accepted, or superseded unparsed
	nIdles    atomic.Int64 // idle events accepted
	nDropped  atomic.Int64 // events dropped (malformed, mismatch, ...)

	startedIn time.Duration // serve's start: open, migrate, dial, stream, recover
	// Of which: listing the runs JetStream retains, Recover, and taking
	// the ownership of tables.
	retainedIn, recoverIn, ownIn time.Duration
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
	// MemoryHeadroom and MemorySurge, when positive, set its headroom
	// and its headroom during a burst (memlimit.Options).
	MemoryLimitOff bool
	MemoryHeadroom float64
	MemorySurge    float64
	// StreamMaxBytes bounds the stream (listener.Options.MaxBytes).
	StreamMaxBytes int64
}

// startService starts the service as serve does, recovering explicit
// tracks from PostgreSQL and ruled runs from JetStream.
func startService(ctx context.Context, c serviceConfig) (*benchService, error) {
	b := &benchService{}
	o := service.Options{
		Logger:       c.Logger,
		NATS:         listener.Options{URL: c.NATSURL, Prefix: c.Prefix, MaxBytes: c.StreamMaxBytes},
		PostgresURL:  c.PostgresURL,
		ControlTable: c.ControlTable,
		// No cap: the bench tracks exactly its N runs, up to 100,000 and
		// beyond (the service's default cap is a guard against a flood of
		// run ids, not a size the bench must stay under).
		Registry:       finalizer.RegistryConfig{Rules: c.Rules, MaxTrackers: -1},
		Actions:        c.Actions,
		MemoryLimitOff: c.MemoryLimitOff,
		MemoryLimit:    memlimit.Options{Headroom: c.MemoryHeadroom, SurgeHeadroom: c.MemorySurge},
		OnEvent: func(kind progress.Kind, outcome string) {
			switch {
			case outcome != listener.OutcomeAccepted && outcome != listener.OutcomeSuperseded:
				b.nDropped.Add(1)
			case kind == progress.KindProgress:
				b.nAccepted.Add(1) // parsed, or made useless by a newer one (ADR 0011)
			case kind == progress.KindIdle:
				b.nIdles.Add(1)
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

func (s *benchService) accepted() int64 { return s.nAccepted.Load() }
func (s *benchService) idles() int64    { return s.nIdles.Load() }
func (s *benchService) dropped() int64  { return s.nDropped.Load() }

func (s *benchService) timings() (start, retained, recover, own time.Duration) {
	return s.startedIn, s.retainedIn, s.recoverIn, s.ownIn
}

func (s *benchService) connStats() (slow, dropped, disconnects int64) {
	st := s.svc.Bus().ConnStats()
	return int64(st.SlowConsumer), int64(st.Dropped), int64(st.Disconnects)
}

func (s *benchService) trackExplicit(ctx context.Context, sm *sim) error {
	_, err := s.tracker.Track(ctx, finalizer.Request{QueryID: sm.queryID, RunID: sm.runID, Table: sm.table,
		Spec: sm.spec, Explicit: true})
	return err
}

// stop stops the service as serve does. It blocks.
func (s *benchService) stop(ctx context.Context) int { s.svc.Stop(ctx); return 0 }
