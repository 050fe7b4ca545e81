package main

import (
	"fmt"
	"io"
	"os"

	"github.com/spf13/cobra"
	"go.uber.org/zap"

	"github.com/finalizer-dev/finalizer/internal/bench"
)

func newBenchCmd(stdout, stderr io.Writer) *cobra.Command {
	var (
		cfg      bench.Config
		logLevel string
		jsonOnly bool
	)
	cmd := &cobra.Command{
		Use:   "bench",
		Short: "Measure the service against the embedded NATS and a real PostgreSQL",
		Long: `Runs the service's own parts in-process (control store, listener, registry, rules,
discovery, recovery: what serve wires) against an embedded nats-server and a real
PostgreSQL, with N simulated runs publishing realistic progress documents, and prints a
table and one JSON line: raw NATS delivery and ingest rates, latency from a period-crossing
progress to its committed verdict (heard through LISTEN/NOTIFY), control writes per
(table, period), the top-of-period burst, memory per tracked run, restart recovery, and
the same figures for a naive baseline (one upsert per event). See BENCHMARKS.md.

Without --postgres-url it starts a throwaway PostgreSQL cluster from the local
installation and removes it afterwards; with one, it works in a schema of its own
(bench_<tag>) that it drops at the end.`,
		Example: `  finalizer bench --runs 10000
  finalizer bench --runs 50 --duration 3s --profile-dir /tmp/prof`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := cfg.Validate(); err != nil {
				return usageError(err)
			}
			if logLevel != "" {
				log, err := newLogger(LogConfig{Format: "console", Level: logLevel}, stderr)
				if err != nil {
					return usageError(err)
				}
				defer func() { _ = log.Sync() }()
				cfg.Logger = log
			} else {
				cfg.Logger = zap.NewNop()
			}
			if cfg.ProfileDir != "" {
				if err := os.MkdirAll(cfg.ProfileDir, 0o755); err != nil {
					return usageError(err)
				}
			}
			if !jsonOnly {
				cfg.Log = stderr
			}
			res, err := bench.Run(cmd.Context(), cfg)
			if err != nil {
				return fmt.Errorf("bench: %w", err)
			}
			if !jsonOnly {
				if err := res.WriteTable(stdout); err != nil {
					return err
				}
			}
			_, err = fmt.Fprintf(stdout, "%s\n", res.JSON())
			return err
		},
	}
	fs := cmd.Flags()
	fs.IntVar(&cfg.Runs, "runs", bench.DefaultRuns, "simulated runs (N), each with its own query id, run id and table")
	fs.StringVar(&cfg.Tracking, "tracking", bench.DefaultTracking, "how runs are tracked: mixed, explicit or rule")
	fs.IntVar(&cfg.IngestPerRun, "ingest-per-run", bench.DefaultIngestPerRun, "progress events per run in the ingest phase")
	fs.Float64Var(&cfg.Rate, "rate", bench.DefaultRate, "background load of the latency phase, events/s")
	fs.DurationVar(&cfg.Duration, "duration", bench.DefaultDuration, "length of the latency phase")
	fs.DurationVar(&cfg.Idle, "idle", 0, "length of the idle phase (every run posts a progress every 10 s, the service's CPU is measured), e.g. 30s; 0 skips it")
	fs.IntVar(&cfg.PerPeriod, "per-period", bench.DefaultPerPeriod, "progress events per run and (minute) period")
	fs.IntVar(&cfg.Window, "window", bench.DefaultWindow, "messages the ingest publisher may run ahead of the consumer")
	fs.StringVar(&cfg.PostgresURL, "postgres-url", "", "PostgreSQL to use (empty: a throwaway cluster)")
	fs.IntVar(&cfg.RawRounds, "raw-rounds", bench.DefaultRawRounds, "times the raw NATS delivery is measured; the best counts")
	fs.StringToStringVar(&cfg.PostgresSettings, "pg-setting", nil, "extra setting of the throwaway cluster, name=value (repeatable), e.g. synchronous_commit=off")
	fs.StringVar(&cfg.WorkDir, "work-dir", "", "directory for the NATS store and the throwaway cluster (empty: a temporary one)")
	fs.BoolVar(&cfg.Naive, "naive", true, "also run the naive baseline (one upsert per event)")
	fs.IntVar(&cfg.MaxBatch, "max-batch", 0, "most advances in one group commit (0: the service's default)")
	fs.IntVar(&cfg.Workers, "workers", 0, "most tracker steps at once, so most advances waiting for a group (0: the service's default)")
	fs.BoolVar(&cfg.NoGroupCommit, "no-group-commit", false, "one statement per advance (ADR 0008 off), to measure what group commit changes")
	fs.StringVar(&cfg.Actions, "actions", "", "give every bench table an action: nats or marker (issue 19), to measure what actions cost")
	fs.StringVar(&cfg.ProfileDir, "profile-dir", "", "write a CPU, a block and a mutex profile per phase and a heap profile here")
	fs.BoolVar(&cfg.Trace, "trace", false, "with --profile-dir, also an execution trace per phase (go tool trace -pprof=net shows the waits on PostgreSQL and NATS)")
	fs.DurationVar(&cfg.WaitTimeout, "wait-timeout", bench.DefaultWaitTimeout, "bound of every wait for verdicts")
	fs.StringVar(&logLevel, "log-level", "", "log the service at this level on stderr (empty: no logs)")
	fs.BoolVar(&jsonOnly, "json", false, "print only the JSON line")
	return cmd
}
