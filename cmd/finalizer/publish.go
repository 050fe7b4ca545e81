package main

import (
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/spf13/cobra"

	"github.com/finalizer-dev/finalizer/internal/eventlog"
	"github.com/finalizer-dev/finalizer/progress"
)

func newPublishCmd(stdin io.Reader, stdout, stderr io.Writer) *cobra.Command {
	var follow bool
	cmd := &cobra.Command{
		Use:   "publish [--follow] FILE|DIR|-",
		Short: "Send streaming listener events from JSON lines or a Spark event log to NATS",
		Long: `Reads JSON lines (either form Spark writes: listener JSON or event-log lines) and
publishes every streaming query listener event to <prefix>.<kind>.<queryId>.<runId>.
Other lines of a Spark event log (jobs, stages, ...) are skipped.

Accepts a single event log file (also an .inprogress one), a rolling event log directory
(eventlog_v2_<appId>, read in order), zstd-compressed logs, or - for standard input.
--follow tails a growing log: with spark.eventLog.enabled=true on the Spark side this is a
zero-code integration.

Exit codes: 0 published (malformed streaming lines are reported and skipped), 2 usage or
connection error.`,
		Example: `  finalizer publish events.jsonl
  finalizer publish --follow /var/log/spark-events/eventlog_v2_app-20261129093000-0001
  cat events.jsonl | finalizer publish -`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			r, err := eventlog.Open(args[0], eventlog.Options{Follow: follow, Stdin: stdin})
			if err != nil {
				return usageError(err)
			}
			defer r.Close()
			l, err := dialNATS(ctx, cmd.Flags())
			if err != nil {
				return err
			}
			defer l.Close()
			counts := map[progress.Kind]int{}
			skipped, bad := 0, 0
			for {
				line, err := r.Next(ctx)
				if errors.Is(err, io.EOF) || (err != nil && ctx.Err() != nil) {
					break
				}
				if errors.Is(err, eventlog.ErrLineTooLong) {
					bad++
					fmt.Fprintf(stderr, "finalizer: skipped: %v\n", err)
					continue
				}
				if err != nil {
					return usageError(err)
				}
				ev, ok, err := eventlog.Streaming(line.Data)
				switch {
				case err != nil:
					bad++
					fmt.Fprintf(stderr, "finalizer: %s:%d: skipped: %v\n", line.Source, line.Number, err)
					continue
				case !ok:
					skipped++
					continue
				}
				if err := l.Publish(ctx, ev, line.Data); err != nil {
					if ctx.Err() != nil {
						break
					}
					return usageError(fmt.Errorf("publish %s:%d: %w", line.Source, line.Number, err))
				}
				counts[ev.Kind]++
			}
			fmt.Fprintf(stdout, "published %d started, %d progress, %d idle, %d terminated; skipped %d other lines, %d malformed\n",
				counts[progress.KindStarted], counts[progress.KindProgress], counts[progress.KindIdle],
				counts[progress.KindTerminated], skipped, bad)
			if ctx.Err() != nil && !errors.Is(ctx.Err(), context.Canceled) {
				return usageError(ctx.Err())
			}
			return nil
		},
	}
	cmd.Flags().BoolVar(&follow, "follow", false, "keep reading as the log grows (until interrupted)")
	addNATSClientFlags(cmd.Flags())
	return cmd
}
