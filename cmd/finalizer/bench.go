package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"

	"github.com/spf13/pflag"

	"github.com/spf13/cobra"
	"go.uber.org/zap"

	"github.com/finalizer-dev/finalizer/internal/bench"
)

func newBenchCmd(stdout, stderr io.Writer) *cobra.Command {
	var (
		cfg        bench.Config
		logLevel   string
		jsonOnly   bool
		curve      []int
		svgPath    string
		curveFrom  string
		flush      bool
		burstFloor bool
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

Two floors are measured in the same run, so that a figure can be read as a ratio to
what the parts underneath give on this machine: the commit probe (lone commits of the
control table's shape, one row and a NOTIFY, timed beside the latency phase:
commit_p99_ms, p99_over_commit_p99) and the burst's floor (the burst's own advances
applied again by the store alone, in the group commit's groups, on a control table of
its own: burst_floor_s, burst_over_floor).

Without --postgres-url it starts a throwaway PostgreSQL cluster from the local
installation and removes it afterwards; with one, it works in a schema of its own
(bench_<tag>) that it drops at the end.

--service-process measures what an operator sees instead: the service is this binary's
'finalizer serve' in a process of its own (a config file and service.log in the work
dir), against the bench's NATS server (external to it, as in production: the bench
process hosts it with the publisher and the observer) and PostgreSQL. Memory per run is
the child's resident set (VmRSS, /proc/<pid>/status, no forced GC) from ready to N runs
tracked; the idle phase's service CPU is the child's own (/proc/<pid>/stat), the NATS
server's is reported apart (the bench process's less the generator's); the counters come
from its /metrics; the restart is SIGTERM (its exit code is reported) and a new process,
timed from its exec to every run re-applied. The child is killed on every error path.`,
		Example: `  finalizer bench --runs 10000
  finalizer bench --runs 50 --duration 3s --profile-dir /tmp/prof
  finalizer bench --runs 10000 --service-process --rate 10000 --idle 30s
  finalizer bench --curve 1000,10000,100000 --naive=false --svg docs/bench-curve.svg`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg.NoFlush = !flush
			cfg.NoCommitProbe = cfg.CommitProbeRate == 0
			cfg.NoBurstFloor = !burstFloor
			if err := cfg.Validate(); err != nil {
				return usageError(err)
			}
			if curveFrom != "" {
				c, err := readCurve(curveFrom)
				if err != nil {
					return usageError(err)
				}
				return writeCurve(c, svgPath, jsonOnly, stdout, stderr)
			}
			if len(curve) > 0 {
				return runCurve(cmd, curve, svgPath, jsonOnly, stdout, stderr)
			}
			if svgPath != "" {
				return usageError(errors.New("--svg needs --curve"))
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
	fs.IntVar(&cfg.IngestPerRun, "ingest-per-run", 0, fmt.Sprintf("progress events per run in the ingest phase (0: %d, fewer above %d runs so that the phase stays at %d events)",
		bench.DefaultIngestPerRun, bench.DefaultIngestEvents/bench.DefaultIngestPerRun, bench.DefaultIngestEvents))
	fs.Float64Var(&cfg.Rate, "rate", bench.DefaultRate, "background load of the latency phase, events/s")
	fs.DurationVar(&cfg.Duration, "duration", bench.DefaultDuration, "length of the latency phase")
	fs.DurationVar(&cfg.Idle, "idle", 0, "length of each measured window of the idle phase (every run posts an idle event every 10 s, then a progress with new data every 10 s; the service's CPU is measured in each, less the load generator's measured in a window of half that length before and after), e.g. 30s; 0 skips it")
	fs.IntVar(&cfg.IdleRounds, "idle-rounds", bench.DefaultIdleRounds, "times the idle phase measures each window, interleaved; the median counts, every round's figure is in the JSON")
	fs.BoolVar(&cfg.IdleOnly, "idle-only", false, "skip the raw delivery, and after tracking and the first verdicts run only the idle phase (skips ingest, latency, burst, feeders, the restart and the naive baseline); needs --idle")
	fs.BoolVar(&cfg.RestartOnly, "restart-only", false, "after tracking and the first verdicts go straight to the restart's recovery (skips ingest, latency, burst, feeders and idle), e.g. to measure recovery at 100,000 runs in a short run")
	fs.BoolVar(&cfg.BurstOnly, "burst-only", false, "skip the raw delivery, and after tracking and the first verdicts run only the burst (skips ingest, latency, feeders, idle, the restart and the naive baseline), e.g. to iterate on the group commit")
	fs.BoolVar(&cfg.LatencyOnly, "latency-only", false, "skip the raw delivery, and after tracking and the first verdicts run only the latency phase (skips ingest, burst, feeders, idle, the restart and the naive baseline), e.g. to measure the tail in rounds of short runs")
	fs.BoolVar(&flush, "flush", true, "before each latency phase, do what the phases before it left for the database and the disk: VACUUM ANALYZE of the bench's tables, a CHECKPOINT of PostgreSQL and sync(2) (flush_s and flush_dirty_mib in the JSON); false measures the phase with autovacuum and the kernel's writeback of hundreds of MB at 100,000 runs free to fall in it")
	fs.Float64Var(&cfg.CommitProbeRate, "commit-probe-rate", bench.DefaultCommitProbeRate, "lone commits a second, one row and a NOTIFY on a connection of their own, made beside each latency phase to measure what PostgreSQL and the disk give any commit in the same window (commit_p99_ms and p99_over_commit_p99 in the JSON); 0 makes none")
	fs.BoolVar(&burstFloor, "burst-floor", true, "after the burst phase, apply the burst's advances again with the store alone (the same rows, in the group commit's groups and committers, on a control table of its own, nothing else running) and report that time as the floor PostgreSQL sets under the burst (burst_floor_s and burst_over_floor in the JSON)")
	fs.Int64Var(&cfg.StreamMaxBytes, "stream-max-bytes", 0, "bound of the JetStream stream the service makes, in bytes (0: the service's default, 1 GiB), e.g. to measure the stream at its bound against a larger one")
	fs.IntVar(&cfg.Bursts, "bursts", 1, "bursts in the burst phase, each crossing the next boundary: the first one's time is the burst's, every one's is in burst_rounds_s")
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
	fs.StringVar(&cfg.MemoryLimit, "memory-limit", "auto", "the service's own soft memory limit: auto (as serve sets it) or off (the Go runtime's default); GOMEMLIMIT overrides both")
	fs.Float64Var(&cfg.MemoryHeadroom, "memory-headroom", 0, "headroom of the auto memory limit, a share of the live heap (0: the service's default)")
	fs.Float64Var(&cfg.MemorySurge, "memory-surge", 0, "headroom of the auto memory limit while a burst fills the group commit's queue, with GOGC 300 (0: no surge, serve's default; 2 was measured); in process only")
	fs.StringVar(&cfg.Actions, "actions", "", "give every bench table an action: nats or marker (issue 19), to measure what actions cost")
	fs.BoolVar(&cfg.ServiceProcess, "service-process", false, "run the service under measure as 'finalizer serve' in a process of its own (this binary), NATS and the load generator in the bench's: figures as the OS reports them for the service alone (not with --actions, --no-group-commit, --max-batch, --workers)")
	fs.StringVar(&cfg.ProfileDir, "profile-dir", "", "write a CPU, an allocation, a block and a mutex profile per phase and a heap profile here")
	fs.BoolVar(&cfg.Trace, "trace", false, "with --profile-dir, also an execution trace per phase (go tool trace -pprof=net shows the waits on PostgreSQL and NATS)")
	fs.DurationVar(&cfg.WaitTimeout, "wait-timeout", 0, fmt.Sprintf("bound of every wait for verdicts (0: %s, or 5 ms per run when longer)", bench.DefaultWaitTimeout))
	fs.StringVar(&logLevel, "log-level", "", "log the service at this level on stderr (empty: no logs)")
	fs.BoolVar(&jsonOnly, "json", false, "print only the JSON line")
	fs.IntSliceVar(&curve, "curve", nil, "run the bench at each of these sizes (e.g. 1000,10000,100000), each in a process of its own with the other flags, and print the scaling curve: every figure per run or per event, and its slope between sizes (0: linear)")
	fs.StringVar(&svgPath, "svg", "", "with --curve, write the curve as an SVG chart to this file")
	fs.StringVar(&curveFrom, "curve-from", "", "print the curve (and with --svg draw it) from a file holding a --curve run's output, without running the bench")
	return cmd
}

// curveSkip are the flags a --curve does not pass on to its runs.
var curveSkip = map[string]bool{"curve": true, "svg": true, "runs": true, "json": true, "profile-dir": true, "trace": true}

// runCurve runs the bench at every size in a process of its own (this
// binary, `bench --runs N --json` and the other flags given), so that each
// size's memory is measured in a fresh process, and prints the curve. A
// size that fails is reported and the curve drawn from the others.
func runCurve(cmd *cobra.Command, sizes []int, svgPath string, jsonOnly bool, stdout, stderr io.Writer) error {
	sizes = slices.Clone(sizes)
	slices.Sort(sizes)
	sizes = slices.Compact(sizes)
	if sizes[0] < 2 {
		return usageError(fmt.Errorf("--curve %v: every size must be at least 2 runs", sizes))
	}
	self, err := os.Executable()
	if err != nil {
		return err
	}
	var pass []string
	cmd.Flags().Visit(func(f *pflag.Flag) {
		if curveSkip[f.Name] {
			return
		}
		if sv, ok := f.Value.(pflag.SliceValue); ok {
			for _, v := range sv.GetSlice() {
				pass = append(pass, "--"+f.Name+"="+v)
			}
			return
		}
		v := f.Value.String()
		if f.Value.Type() == "stringToString" {
			v = strings.TrimSuffix(strings.TrimPrefix(v, "["), "]") // printed as [a=b,c=d]
		}
		pass = append(pass, "--"+f.Name+"="+v)
	})
	var (
		c    bench.Curve
		errs []error
	)
	for _, n := range sizes {
		args := append([]string{"bench", "--runs", strconv.Itoa(n), "--json"}, pass...)
		fmt.Fprintf(stderr, "bench --curve: N=%d: %s %s\n", n, self, strings.Join(args, " "))
		var out bytes.Buffer
		run := exec.CommandContext(cmd.Context(), self, args...)
		run.Stdout, run.Stderr = &out, stderr
		if err := run.Run(); err != nil {
			errs = append(errs, fmt.Errorf("N=%d: %w", n, err))
			continue
		}
		lines := bytes.Split(bytes.TrimSpace(out.Bytes()), []byte("\n"))
		var res bench.Result
		if err := json.Unmarshal(lines[len(lines)-1], &res); err != nil {
			errs = append(errs, fmt.Errorf("N=%d: reading its result: %w", n, err))
			continue
		}
		c.Results = append(c.Results, res)
	}
	if len(c.Results) > 0 {
		if err := writeCurve(&c, svgPath, jsonOnly, stdout, stderr); err != nil {
			return err
		}
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("bench --curve: %w", err)
	}
	return nil
}

// writeCurve prints the curve's table (unless jsonOnly) and JSON line, and
// draws it to svgPath when set.
func writeCurve(c *bench.Curve, svgPath string, jsonOnly bool, stdout, stderr io.Writer) error {
	if !jsonOnly {
		if err := c.WriteTable(stdout); err != nil {
			return err
		}
	}
	if _, err := fmt.Fprintf(stdout, "%s\n", c.JSON()); err != nil {
		return err
	}
	if svgPath == "" {
		return nil
	}
	var b bytes.Buffer
	sz := make([]string, len(c.Results))
	for i, r := range c.Results {
		sz[i] = strconv.Itoa(r.Runs)
	}
	title := fmt.Sprintf("finalizer bench, N = %s runs: per run or per event, log-log (flat = linear)", strings.Join(sz, ", "))
	if err := c.SVG(&b, title); err != nil {
		return err
	}
	if err := os.WriteFile(svgPath, b.Bytes(), 0o644); err != nil {
		return err
	}
	fmt.Fprintf(stderr, "bench --curve: wrote %s\n", svgPath)
	return nil
}

// readCurve reads the last {"curve": ...} line of a --curve run's output.
func readCurve(path string) (*bench.Curve, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	lines := bytes.Split(bytes.TrimSpace(b), []byte("\n"))
	for i := len(lines) - 1; i >= 0; i-- {
		if bytes.HasPrefix(lines[i], []byte(`{"curve"`)) {
			var c bench.Curve
			if err := json.Unmarshal(lines[i], &c); err != nil {
				return nil, fmt.Errorf("%s: %w", path, err)
			}
			if len(c.Results) == 0 {
				break
			}
			return &c, nil
		}
	}
	return nil, fmt.Errorf("%s: no curve (the JSON line of a bench --curve run)", path)
}
