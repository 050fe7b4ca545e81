package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/spf13/cobra"

	"github.com/finalizer-dev/finalizer/internal/eventlog"
	"github.com/finalizer-dev/finalizer/progress"
)

// Intervals of publish --follow waiting for a log that does not exist yet.
var (
	followPoll   = 500 * time.Millisecond
	followRemind = 30 * time.Second
)

// publishCounts is what publish did with its input.
type publishCounts struct {
	kinds     map[progress.Kind]int
	published int
	other     int // JSON of another Spark event (jobs, stages, ...)
	notJSON   int // lines that are not JSON at all (log lines, YAML, ...)
	malformed int // JSON that is not a valid streaming event, cut-short documents
}

func (c publishCounts) String() string {
	return fmt.Sprintf("published %d started, %d progress, %d idle, %d terminated; skipped %d other events, %d lines that are not JSON, %d malformed",
		c.kinds[progress.KindStarted], c.kinds[progress.KindProgress], c.kinds[progress.KindIdle],
		c.kinds[progress.KindTerminated], c.other, c.notJSON, c.malformed)
}

func newPublishCmd(stdin io.Reader, stdout, stderr io.Writer) *cobra.Command {
	var follow bool
	cmd := &cobra.Command{
		Use:   "publish [--follow] FILE|DIR|-",
		Short: "Send streaming listener events from JSON lines or a Spark event log to NATS",
		Long: `Reads streaming query listener events and publishes each to
<prefix>.<kind>.<queryId>.<runId>. It reads either JSON form Spark writes (listener JSON
or event-log lines), one document per line or pretty-printed over several lines (what
println(query.lastProgress) or prettyJson print), and the driver log's
"Streaming query made progress: {...}". Other events of a Spark event log (jobs,
stages, ...) and lines that are not JSON are skipped and counted.

Accepts a single event log file (also an .inprogress one), a rolling event log directory
(eventlog_v2_<appId>, read in order), zstd-compressed logs, or - for standard input.
--follow tails a growing log: with spark.eventLog.enabled=true on the Spark side this is a
zero-code integration. A log that does not exist yet is waited for.

Exit codes: 0 published (malformed documents are reported on stderr and skipped), 2 usage
or connection error, or nothing was published from an empty input or from only malformed
documents and lines that are not JSON (not an event log?). A log with other Spark events
but no streaming query event yet exits 0 with a note on stderr.`,
		Example: `  finalizer publish events.jsonl
  finalizer publish --follow /var/log/spark-events/eventlog_v2_app-20261129093000-0001
  cat events.jsonl | finalizer publish -`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			r, err := openEventLog(ctx, args[0], eventlog.Options{Follow: follow, Stdin: stdin}, stderr)
			if err != nil {
				return usageError(err)
			}
			if r == nil {
				return nil // interrupted while waiting for the log to appear
			}
			defer r.Close()
			l, err := dialNATS(ctx, cmd.Flags())
			if err != nil {
				return err
			}
			defer l.Close()
			c := publishCounts{kinds: map[progress.Kind]int{}}
			var docs eventlog.Documents
			firstNotJSON := ""
			handle := func(doc eventlog.Line) error {
				if t := bytes.TrimSpace(doc.Data); len(t) > 0 && t[0] != '{' {
					c.notJSON++
					if firstNotJSON == "" {
						firstNotJSON = fmt.Sprintf("%s:%d", doc.Source, doc.Number)
					}
					return nil
				}
				ev, ok, err := eventlog.Streaming(doc.Data)
				switch {
				case err != nil:
					c.malformed++
					fmt.Fprintf(stderr, "finalizer: %s:%d: skipped: %s\n", field(doc.Source), doc.Number, errLine(err))
					return nil
				case !ok:
					if len(bytes.TrimSpace(doc.Data)) > 0 {
						c.other++
					}
					return nil
				}
				if err := l.Publish(ctx, ev, doc.Data); err != nil {
					return err
				}
				c.kinds[ev.Kind]++
				c.published++
				return nil
			}
			for {
				line, err := r.Next(ctx)
				if errors.Is(err, io.EOF) || (err != nil && ctx.Err() != nil) {
					break
				}
				if errors.Is(err, eventlog.ErrLineTooLong) {
					c.malformed++
					fmt.Fprintf(stderr, "finalizer: skipped: %s\n", errLine(err))
					continue
				}
				if err != nil {
					return usageError(err)
				}
				doc, ok, derr := docs.Add(line)
				if derr != nil {
					c.malformed++
					fmt.Fprintf(stderr, "finalizer: skipped: %s\n", errLine(derr))
				}
				if !ok {
					continue
				}
				if err := handle(doc); err != nil {
					if ctx.Err() != nil {
						break
					}
					return usageError(fmt.Errorf("publish %s:%d: %w", doc.Source, doc.Number, err))
				}
			}
			if err := docs.Flush(); err != nil {
				c.malformed++
				fmt.Fprintf(stderr, "finalizer: skipped: %s\n", errLine(err))
			}
			fmt.Fprintln(stdout, c)
			if ctx.Err() != nil && !errors.Is(ctx.Err(), context.Canceled) {
				return usageError(ctx.Err())
			}
			if c.published == 0 && (c.malformed > 0 || c.notJSON > 0) {
				why := fmt.Sprintf("%d malformed", c.malformed)
				if c.notJSON > 0 {
					why += fmt.Sprintf(", %d lines that are not JSON (the first at %s)", c.notJSON, firstNotJSON)
				}
				return usageError(fmt.Errorf("nothing published from %s: %s; want Spark listener events as JSON or a Spark event log", args[0], why))
			}
			if c.published == 0 && ctx.Err() == nil {
				if c.other == 0 {
					// exit 0 would let a script believe events went out
					// while every tracker keeps waiting
					return usageError(fmt.Errorf("nothing published from %s: it is empty", args[0]))
				}
				// the log of an application that has not started a
				// streaming query yet (or never will): not an error
				fmt.Fprintf(stderr, "finalizer: %s holds %d Spark events but no streaming query event yet (the log of another application?)\n", args[0], c.other)
			}
			return nil
		},
	}
	cmd.Flags().BoolVar(&follow, "follow", false, "keep reading as the log grows (until interrupted); wait for a log that does not exist yet")
	addNATSClientFlags(cmd.Flags())
	return cmd
}

// openEventLog opens the event log at path. With Follow, a log that does
// not exist yet is waited for (Spark creates it when the application
// starts), with a line on stderr at once and every followRemind; it
// returns nil, nil when ctx ends first.
func openEventLog(ctx context.Context, path string, o eventlog.Options, stderr io.Writer) (*eventlog.Reader, error) {
	began := time.Now()
	var remind <-chan time.Time
	for {
		r, err := eventlog.Open(path, o)
		if err == nil || !o.Follow || !errors.Is(err, os.ErrNotExist) {
			if err == nil && remind != nil {
				fmt.Fprintf(stderr, "finalizer: %s appeared after %s; following it\n", path, time.Since(began).Round(time.Second))
			}
			return r, err
		}
		if remind == nil {
			fmt.Fprintf(stderr, "finalizer: %s does not exist yet; waiting for it (Ctrl-C to stop)\n", path)
			t := time.NewTicker(followRemind)
			defer t.Stop()
			remind = t.C
		}
		select {
		case <-ctx.Done():
			return nil, nil
		case <-remind:
			fmt.Fprintf(stderr, "finalizer: still waiting for %s (%s so far)\n", path, time.Since(began).Round(time.Second))
		case <-time.After(followPoll):
		}
	}
}
