package main

import (
	"encoding/json"
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/finalizer-dev/finalizer/control"
)

func newFeedersCmd(stdout io.Writer) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "feeders",
		Short: "List, retire or take back the queries that write a table (its feeders)",
		Long: `A table written by several queries is final only as far as the slowest of them (ADR 0015):
each query (by its id, stable across restarts from the same checkpoint) is a feeder with its
own watermark, and the table's finalized_until is the lowest watermark of its feeders that
are not retired. A query that stopped for good (a finished backfill, the old query of a
redeploy with a new checkpoint) holds its tables until it is retired.`,
		Args: cobra.NoArgs,
	}
	cmd.AddCommand(newFeedersListCmd(stdout), newFeedersRetireCmd(stdout), newFeedersUnretireCmd(stdout))
	return cmd
}

func newFeedersListCmd(stdout io.Writer) *cobra.Command {
	var table string
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "list [--table T] [--json]",
		Short: "List every table's feeders (or one table's) with their watermarks",
		Long: `Lists the feeders of every table (or of one) from the control database: the query id,
its name, its own watermark and lag, whether the config expects it, whether it is retired
and why, and which feeder holds each table back. For the state of each feeder's runs
(reporting, stale, failed), see finalizer status.

Exit codes: 0 listed, 2 usage or connection error.`,
		Example: `  finalizer feeders list --table silver.all`,
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			stdout := newSafeWriter(stdout) // the database's free text, escaped
			defer stdout.Flush()
			s, _, err := openStore(cmd.Context(), cmd.Flags())
			if err != nil {
				return err
			}
			defer s.Close()
			fs, err := s.Feeders(cmd.Context(), table)
			if err != nil {
				return usageError(err)
			}
			if asJSON {
				enc := json.NewEncoder(stdout)
				enc.SetIndent("", "  ")
				return enc.Encode(map[string]any{"feeders": fs})
			}
			printFeederList(stdout, fs, time.Now().UTC())
			return nil
		},
	}
	fs := cmd.Flags()
	fs.StringVar(&table, "table", "", "only this table")
	fs.BoolVar(&asJSON, "json", false, "print JSON")
	addPostgresClientFlags(fs)
	return cmd
}

// printFeederList prints feeders (ordered by table) as a table, and a
// line per table held back.
func printFeederList(w io.Writer, fs []control.Feeder, now time.Time) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "TABLE\tFEEDER\tQUERY\tWATERMARK\tLAG\tEXPECTED\tRETIRED")
	byTable := map[string][]control.Feeder{}
	var order []string
	for _, f := range fs {
		if _, ok := byTable[f.Table]; !ok {
			order = append(order, f.Table)
		}
		byTable[f.Table] = append(byTable[f.Table], f)
		until, lag, retired := "-", "-", ""
		if !f.FinalizedUntil.IsZero() {
			until = f.FinalizedUntil.Format(time.RFC3339Nano)
			lag = fmtLag(now.Sub(f.FinalizedUntil).Seconds())
		}
		if f.Retired() {
			retired = f.RetiredAt.Format(time.RFC3339) + " " + field(f.RetiredWhy)
		}
		expected := ""
		if f.Expected {
			expected = "yes"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", field(f.Table), field(f.Feeder), field(f.QueryName), until, lag, expected, retired)
	}
	if len(fs) == 0 {
		fmt.Fprintln(tw, "(no feeders yet)")
	}
	tw.Flush()
	for _, t := range order {
		if h, held := control.HeldBy(byTable[t]); held {
			fmt.Fprintf(w, "%s is %s\n", field(t), heldBy(h, "reporting", false))
		}
	}
}

func newFeedersRetireCmd(stdout io.Writer) *cobra.Command {
	var table, query, reason, by string
	cmd := &cobra.Command{
		Use:   "retire --table T --query Q [--reason R] [--by WHO]",
		Short: "Retire a query from a table's feeders: it no longer holds the table",
		Long: `Retires the query Q (its id, or its name when exactly one active feeder of the table
has it: the old and the new query of a redeploy share a name, so such a name is refused
with their ids) from the table's feeders. The table then moves forward to the lowest watermark of
its other feeders, never back; a table without any feeder left stays where it is.

Retire a query that stopped writing the table for good: a finished backfill, the old
query of a redeploy that started from a new checkpoint (a new query id), an expected
feeder that will never come. Do not retire a query that still writes the table: the table
could then be declared final ahead of its data. A retired query that reports again is
recorded but does not hold the table (finalizer feeders unretire takes it back).

The same is available as POST /v1/tables/{table}/feeders/{query}/retire on the service's
HTTP API ({"reason", "by"}) and as the NATS request <api_prefix>.feeders.retire ({"table",
"query", "reason", "by"}): reason and by are checked as --reason and --by are, and kept
in the feeder's retired_why ("retired over HTTP by WHO: REASON").

Exit codes: 0 retired, 2 usage or connection error (or no such active feeder).`,
		Example: `  finalizer feeders retire --table silver.all --query backfill-2026 --reason "backfill done"`,
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			stdout := newSafeWriter(stdout) // the database's free text, escaped
			defer stdout.Flush()
			if err := required("table", table, "query", query); err != nil {
				return err
			}
			if by == "" {
				by = defaultOperator()
			}
			if err := checkOperatorFlags(reason, by); err != nil {
				return err
			}
			why := "finalizer feeders retire by " + by
			if reason != "" {
				why += ": " + reason
			}
			s, _, err := openStore(cmd.Context(), cmd.Flags())
			if err != nil {
				return err
			}
			defer s.Close()
			retired, v, moved, err := s.RetireFeeder(cmd.Context(), table, query, why)
			if err != nil {
				return usageError(err)
			}
			for _, f := range retired {
				fmt.Fprintf(stdout, "%s: retired feeder %s (%s)\n", field(table), field(f.Feeder), field(f.Name()))
			}
			switch {
			case v.FinalizedUntil.IsZero():
				fmt.Fprintf(stdout, "%s: no verdict yet\n", field(table))
			case moved:
				fmt.Fprintf(stdout, "%s: final until %s (moved)\n", field(table), v.FinalizedUntil.Format(time.RFC3339Nano))
			default:
				fmt.Fprintf(stdout, "%s: final until %s\n", field(table), v.FinalizedUntil.Format(time.RFC3339Nano))
			}
			return nil
		},
	}
	fs := cmd.Flags()
	fs.StringVar(&table, "table", "", "the table (required)")
	fs.StringVar(&query, "query", "", "the query's name or id (required)")
	fs.StringVar(&reason, "reason", "", "why, kept with the feeder ("+refusedText+")")
	fs.StringVar(&by, "by", "", "who asks, kept with the feeder (default: the OS user @ host; "+refusedText+")")
	addPostgresClientFlags(fs)
	return cmd
}

func newFeedersUnretireCmd(stdout io.Writer) *cobra.Command {
	var table, query, reason, by string
	cmd := &cobra.Command{
		Use:   "unretire --table T --query Q [--reason R] [--by WHO]",
		Short: "Take a retired query back: it holds the table again",
		Long: `Takes the retired query Q (its id, or its name when exactly one retired feeder of the
table has it) back into the table's feeders: it holds the table again from its own
watermark on. The table never moves back: if the query is behind it, the table holds
until the query passes it, then follows the lowest watermark again.

Use it for a query retired by mistake, or retired on a clean termination
(retire: on_clean_termination) that was started again from the same checkpoint (the
same query id) and writes the table again. Who and why are kept in the audit table
(finalizer audit, action "unretire").

The same is available as POST /v1/tables/{table}/feeders/{query}/unretire on the
service's HTTP API ({"reason", "by"}) and as the NATS request
<api_prefix>.feeders.unretire ({"table", "query", "reason", "by"}).

Exit codes: 0 taken back, 2 usage or connection error (or no such retired feeder).`,
		Example: `  finalizer feeders unretire --table silver.all --query backfill-2026 --reason "rerun from the same checkpoint"`,
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			stdout := newSafeWriter(stdout) // the database's free text, escaped
			defer stdout.Flush()
			if err := required("table", table, "query", query); err != nil {
				return err
			}
			if by == "" {
				by = defaultOperator()
			}
			if err := checkOperatorFlags(reason, by); err != nil {
				return err
			}
			s, _, err := openStore(cmd.Context(), cmd.Flags())
			if err != nil {
				return err
			}
			defer s.Close()
			back, v, err := s.UnretireFeeder(cmd.Context(), table, query, reason, by)
			if err != nil {
				return usageError(err)
			}
			for _, f := range back {
				fmt.Fprintf(stdout, "%s: feeder %s (%s) holds the table again, from %s\n", field(table), field(f.Feeder), field(f.Name()), fmtTime(f.FinalizedUntil))
			}
			if v.FinalizedUntil.IsZero() {
				fmt.Fprintf(stdout, "%s: no verdict yet\n", field(table))
			} else {
				fmt.Fprintf(stdout, "%s: final until %s\n", field(table), v.FinalizedUntil.Format(time.RFC3339Nano))
			}
			return nil
		},
	}
	fs := cmd.Flags()
	fs.StringVar(&table, "table", "", "the table (required)")
	fs.StringVar(&query, "query", "", "the retired query's name or id (required)")
	fs.StringVar(&reason, "reason", "", "why, kept in the audit table ("+refusedText+")")
	fs.StringVar(&by, "by", "", "who asks, kept in the audit table (default: the OS user @ host; "+refusedText+")")
	addPostgresClientFlags(fs)
	return cmd
}
