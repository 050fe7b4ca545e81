package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/user"
	"slices"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/finalizer-dev/finalizer/control"
)

// lockNoteAfter is how long a rewind waits before it says that it waits,
// most likely for the table's row, which another session holds.
const lockNoteAfter = 2 * time.Second

// rewindNoting is s.Rewind(r), with one line to stderr when it has not
// returned after noteAfter: it blocks silently behind a transaction that
// holds the table's row (a reader's FOR SHARE: 39 s were seen), and an
// operator must know it waits rather than guess that it hangs. The note
// names the sessions that hold the lock when PostgreSQL says so cheaply.
// It waits as long as ctx allows (an interrupt ends it: nothing rewound).
func rewindNoting(ctx context.Context, s *control.Store, stderr io.Writer, noteAfter time.Duration, r control.Rewind) (control.AuditEntry, error) {
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { // owned here: ended by done before rewindNoting returns
		defer wg.Done()
		t := time.NewTimer(noteAfter)
		defer t.Stop()
		select {
		case <-done:
			return
		case <-t.C:
		}
		held := ""
		if pids, err := s.RowLockHolders(ctx, r.Table); err == nil && len(pids) > 0 {
			held = " held by another session (pid " + strings.Join(pids, ", ") + ")"
		}
		fmt.Fprintf(stderr, "finalizer: rewind: waiting for a lock on %s's row%s: most likely an open transaction that read it FOR SHARE or FOR UPDATE; the rewind goes on when it ends (interrupt to give up: nothing is rewound)\n",
			field(r.Table), held)
	}()
	e, err := s.Rewind(ctx, r)
	close(done)
	wg.Wait()
	return e, err
}

// warnLiveRuns warns on stderr when the service (base: its HTTP API, ""
// to skip) tracks live runs of table that are not of a feeder the rewind
// e retired: a rewind holds only until a tracked run reports progress
// beyond it. It names each run and its query, or says in one line that it
// could not ask; it never fails the rewind.
func warnLiveRuns(ctx context.Context, stderr io.Writer, s *control.Store, base, token, table string, e control.AuditEntry) {
	if base == "" {
		return
	}
	runs, _, err := fetchRuns(ctx, base, token)
	if err != nil {
		fmt.Fprintf(stderr, "finalizer: rewind: could not check the service's live runs of %s (%v)\n", field(table), err)
		return
	}
	names := map[string]string{}
	if fs, err := s.Feeders(ctx, table); err == nil {
		for _, f := range fs {
			names[f.Feeder] = f.Name()
		}
	}
	var live []string
	for _, r := range runs {
		if r.Table != table || r.Done || r.Terminated || r.Failed || slices.Contains(e.Retired, r.QueryID) {
			continue
		}
		q := r.QueryID
		if n := names[r.QueryID]; n != "" && n != q {
			q = n + " (" + r.QueryID + ")"
		}
		live = append(live, fmt.Sprintf("run %s of query %s", field(r.RunID), field(q)))
	}
	if len(live) == 0 {
		return
	}
	fmt.Fprintf(stderr, "finalizer: warning: the service tracks %d live run(s) of %s: %s; a rewind holds only until a tracked run reports progress beyond %s: stop the old query (or retire it with --retire-feeder), or rewind again once it stopped\n",
		len(live), field(table), strings.Join(live, "; "), e.To.Format(time.RFC3339Nano))
}

// earliestVerdict is the earliest verdict the service writes: its trackers
// hold a progress whose time is before 1970 (finalizer's minTime), so a
// rewind before it is a typo.
var earliestVerdict = time.Unix(0, 0).UTC()

// defaultOperator names who runs an operator command when --by is not
// given: the OS user at this host.
func defaultOperator() string {
	name := os.Getenv("USER")
	if u, err := user.Current(); err == nil && u.Username != "" {
		name = u.Username
	}
	if name == "" {
		name = "unknown"
	}
	if host, err := os.Hostname(); err == nil && host != "" {
		name += "@" + host
	}
	return name
}

// checkOperatorFlags refuses a --reason or --by that is too long or holds
// a control, format or separator character (control.CheckOperatorText): kept in
// the audit table, it would reach every terminal that runs finalizer audit
// or status.
func checkOperatorFlags(reason, by string) error {
	if err := control.CheckOperatorText("--reason", reason); err != nil {
		return usageError(err)
	}
	if err := control.CheckOperatorText("--by", by); err != nil {
		return usageError(err)
	}
	return nil
}

// refusedText says, in a flag's help, what --reason and --by may not hold
// (control.CheckOperatorText).
const refusedText = "one line of plain text, at most 1,000 bytes: control characters (ESC, tab, newline), invisible and direction formatting characters (U+200B, U+FEFF, U+00AD, U+202E) and line or paragraph separators (U+2028, U+2029) are refused"

// requireReason refuses a --reason of rewind or acknowledge (op) that is
// only blanks, in the command's words: the store said "invalid rewind: a
// reason is required" of an acknowledgement too.
func requireReason(op, reason, by string) error {
	if strings.TrimSpace(reason) == "" {
		return usageError(fmt.Errorf("%s: --reason is blank: say why, in words the audit trail keeps", op))
	}
	if strings.TrimSpace(by) == "" {
		return usageError(fmt.Errorf("%s: --by is blank: name who asks (or leave --by out: the OS user @ host)", op))
	}
	return nil
}

// addOperatorFlags adds --reason and --by.
func addOperatorFlags(fs *pflag.FlagSet, reason, by *string) {
	fs.StringVar(reason, "reason", "", "why, in words the audit trail keeps (required; "+refusedText+")")
	fs.StringVar(by, "by", "", "who asks, kept in the audit trail (default: the OS user @ host; "+refusedText+")")
}

func newRewindCmd(stdout io.Writer) *cobra.Command {
	var table, to, reason, by, httpURL, httpToken string
	var retire []string
	var noPosition bool
	cmd := &cobra.Command{
		Use:   "rewind --table T --to TS --reason R [--by WHO] [--retire-feeder QUERY]...",
		Short: "Move a table's verdict back to TS: the one backward move, audited and announced",
		Long: `Moves the table's finalized_until back to TS, after its history changed under the
verdict: a query that restarted from a new checkpoint (a new query id at batch 0) rewrites
periods that were declared final, or a candidate below the stored end was reported.

It is the only way the verdict moves back. In one transaction it locks the table's row,
sets finalized_until = TS, moves every feeder's watermark above TS back to TS (so the next
advance cannot undo it), retires the feeders named by --retire-feeder (after a checkpoint
reset, the old query id: it will never report again and would hold the table at TS),
clears the table's mark and the provenance of the last move,
records who, when, from, to and why in the audit table (<control table>_audit), and sends
the usual notification on finalizer_verdict with "rewound": true, "from" and "rewound_at".
is-final, wait and SQL readers see the new verdict at once; the service's trackers of the
table start again from TS (their next candidates move it forward as usual), and an advance
they decided before the rewind, even one waiting for the row's lock when it commits, moves
nothing. A rewind holds only until a tracked run reports progress beyond TS: rewind once the
old query has stopped. When the service's HTTP API answers (--http-url, or the --config
file's http.listen), rewind warns on stderr after the rewind, naming the table's live
tracked runs (run id, query) that are not of a feeder it retired; it says in one line when
it could not ask. A rewind waiting for the table's row (another session's transaction holds
it) says so on stderr after 2 s, and goes on waiting (interrupt it to give up: nothing is
rewound).

After the commit, rewind reads the service's event stream's last sequence from NATS
(--nats-url, else the --config file's nats.url, else the embedded server of --data-dir;
--stream, else the file's stream.name, else SPARK_EVENTS; the --nats-* login flags) and
records it, with the stream's creation time, on the table's row. A service that did not
hear the rewind live (stopped, or its control database connection down) then judges a
progress it reads back from the stream by that sequence: one stored after the rewind, even
seconds after, moves the verdict. When NATS cannot be reached (or with
--no-stream-position) the rewind still stands, and a note on stderr says that such a
service holds a progress stored within a minute after the rewind until its run's next
progress (a service running now judges by the sequence it reads itself either way).

Downstream jobs that consumed a period ending after TS must run again for it: a job that
LISTENs on finalizer_verdict sees the flag; the audit table lists every rewind.

TS is RFC 3339 with any offset; a naive time is UTC. It must be before the verdict and
not before 1970-01-01T00:00:00Z (the service never writes an earlier verdict).

Exit codes: 0 rewound, 2 usage or connection error (no verdict, TS not before it).`,
		Example: `  finalizer rewind --table bronze.orders --to 2026-09-28T00:00:00Z \
    --reason "orders-v1 restarted from a new checkpoint; full refresh from midnight" \
    --retire-feeder 8d268dc2-bc9c-4be8-97a9-b135d2943028`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			stdout := newSafeWriter(stdout) // the database's free text, escaped
			defer stdout.Flush()
			if err := required("table", table, "to", to, "reason", reason); err != nil {
				return err
			}
			ts, err := parseTS(to)
			if err != nil {
				return usageError(err)
			}
			if ts.Before(earliestVerdict) {
				return usageError(fmt.Errorf("--to %s is before %s: the service never writes a verdict before 1970 (it drops such event times as implausible), so a rewind there could never be undone by a run",
					ts.Format(time.RFC3339Nano), earliestVerdict.Format(time.RFC3339)))
			}
			if by == "" {
				by = defaultOperator()
			}
			if err := requireReason("rewind", reason, by); err != nil {
				return err
			}
			if err := checkOperatorFlags(reason, by); err != nil {
				return err
			}
			s, c, err := openStore(cmd.Context(), cmd.Flags())
			if err != nil {
				return err
			}
			defer s.Close()
			e, err := rewindNoting(cmd.Context(), s, cmd.ErrOrStderr(), lockNoteAfter,
				control.Rewind{Table: table, To: ts, Reason: reason, By: by, Retire: retire})
			if errors.Is(err, control.ErrNotBehind) {
				if v, gerr := s.Get(cmd.Context(), table); gerr == nil && v.FinalizedUntil.IsZero() {
					// A row without a verdict (NULL finalized_until): the
					// store compares with the zero time and says so.
					return usageError(fmt.Errorf("table %q has no verdict yet: nothing to move back", table))
				}
			}
			if err != nil {
				return noVerdict(cmd.Context(), s, table, err)
			}
			defer warnLiveRuns(cmd.Context(), cmd.ErrOrStderr(), s, c.httpURL, httpToken, table, e)
			fmt.Fprintf(stdout, "%s: rewound from %s to %s by %s (audit entry %d)\n", field(table),
				e.From.Format(time.RFC3339Nano), e.To.Format(time.RFC3339Nano), field(e.By), e.ID)
			if !noPosition {
				// After the commit, never before (ADR 0019, addendum of
				// 2026-12-06, "judged by sequence").
				recordStreamPosition(cmd.Context(), cmd.Flags(), c, s, stdout, cmd.ErrOrStderr(), table, e)
			}
			for _, f := range e.Retired {
				fmt.Fprintf(stdout, "retired feeder %s\n", field(f))
			}
			if e.ClearedMark != "" {
				fmt.Fprintf(stdout, "cleared the mark (%d signs): %s\n", e.ClearedMarks, field(e.ClearedMark))
			}
			fmt.Fprintf(stdout, "downstream jobs that consumed a period ending after %s must run again for it\n", e.To.Format(time.RFC3339Nano))
			return nil
		},
	}
	fs := cmd.Flags()
	fs.StringVar(&table, "table", "", "the table (required)")
	fs.StringVar(&to, "to", "", "the new finalized_until, before the current one (required)")
	fs.StringArrayVar(&retire, "retire-feeder", nil, "retire this feeder (query id, or a name that matches one active feeder: after a reset the old and new query share the name) in the same transaction; repeatable")
	fs.StringVar(&httpURL, "http-url", DefaultHTTPURL, `the service's HTTP API, asked for the table's live tracked runs (a warning names them: a run that reports beyond TS undoes the rewind); "" skips it; with --config and no --http-url, the file's http.listen; else`)
	fs.StringVar(&httpToken, "http-token", "", "bearer token of the service's HTTP API (prefer FINALIZER_HTTP_TOKEN)")
	addOperatorFlags(fs, &reason, &by)
	addPostgresClientFlags(fs)
	addStreamPositionFlags(fs, &noPosition)
	return cmd
}

func newAcknowledgeCmd(stdout io.Writer) *cobra.Command {
	var table, reason, by string
	cmd := &cobra.Command{
		Use:   "acknowledge --table T --reason R [--by WHO]",
		Short: "Clear a table's mark without moving its verdict (audited)",
		Long: `Clears the table's mark (a reset, a candidate below the stored end, a source whose
description changed) after an operator looked and decided no rewind is needed, for
example because the sink is idempotent and the rewritten periods hold the same rows.
Recorded in the audit table like a rewind, with from = to.

Exit codes: 0 acknowledged, 2 usage or connection error (or no verdict).`,
		Example: `  finalizer acknowledge --table bronze.orders --reason "replay into an idempotent MERGE; nothing changed"`,
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			stdout := newSafeWriter(stdout) // the database's free text, escaped
			defer stdout.Flush()
			if err := required("table", table, "reason", reason); err != nil {
				return err
			}
			if by == "" {
				by = defaultOperator()
			}
			if err := requireReason("acknowledge", reason, by); err != nil {
				return err
			}
			if err := checkOperatorFlags(reason, by); err != nil {
				return err
			}
			s, _, err := openStore(cmd.Context(), cmd.Flags())
			if err != nil {
				return err
			}
			defer s.Close()
			e, err := s.Acknowledge(cmd.Context(), control.Acknowledge{Table: table, Reason: reason, By: by})
			if err != nil {
				return noVerdict(cmd.Context(), s, table, err)
			}
			if e.ClearedMark == "" {
				fmt.Fprintf(stdout, "%s: no mark to clear; acknowledged (audit entry %d)\n", field(table), e.ID)
				return nil
			}
			fmt.Fprintf(stdout, "%s: mark cleared (%d signs: %s) by %s (audit entry %d)\n", field(table), e.ClearedMarks, field(e.ClearedMark), field(e.By), e.ID)
			return nil
		},
	}
	fs := cmd.Flags()
	fs.StringVar(&table, "table", "", "the table (required)")
	addOperatorFlags(fs, &reason, &by)
	addPostgresClientFlags(fs)
	return cmd
}

func newAuditCmd(stdout io.Writer) *cobra.Command {
	var table string
	var limit int
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "audit [--table T] [--limit N] [--json]",
		Short: "List rewinds, acknowledgements and unretires, newest first",
		Long: `Lists the audit table, newest first: every rewind, acknowledgement and feeder
taken back (feeders unretire; its ACTION is unretire), who made it, when, from and to
which verdict, why, and the provenance and mark it replaced. --limit N (default 100,
at least 1) shows the newest N entries; 0 and negative limits are refused.

--json prints {"audit": [...]}, each entry with the audit table's column names (id,
table_name, action, at, by_operator, db_user, reason, from_until, to_until,
from_query_id, from_run_id, from_batch_id, from_end_time, cleared_mark, cleared_marks)
and null for a NULL. Before 2026-12-06 it printed Go's field names and the zero time
0001-01-01T00:00:00Z for a NULL; that was a bug.

Exit codes: 0 shown, 2 usage or connection error.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			stdout := newSafeWriter(stdout) // the database's free text, escaped
			defer stdout.Flush()
			if limit < 1 {
				return usageError(fmt.Errorf("--limit %d: want at least 1 (the newest N entries; the default is 100)", limit))
			}
			s, _, err := openStore(cmd.Context(), cmd.Flags())
			if err != nil {
				return err
			}
			defer s.Close()
			entries, err := s.Audit(cmd.Context(), table, limit)
			if err != nil {
				return usageError(err)
			}
			if asJSON {
				enc := json.NewEncoder(stdout)
				enc.SetIndent("", "  ")
				doc := make([]auditJSON, len(entries))
				for i, e := range entries {
					doc[i] = toAuditJSON(e)
				}
				return enc.Encode(map[string]any{"audit": doc})
			}
			tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "ID\tAT\tTABLE\tACTION\tFROM\tTO\tBY\tREASON")
			for _, e := range entries {
				fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", e.ID, e.At.Format(time.RFC3339), field(e.Table), field(e.Action),
					fmtTime(e.From), fmtTime(e.To), field(e.By), field(e.Reason))
			}
			if len(entries) == 0 {
				fmt.Fprintln(tw, "(none)")
			}
			return tw.Flush()
		},
	}
	fs := cmd.Flags()
	fs.StringVar(&table, "table", "", "only this table")
	fs.IntVar(&limit, "limit", 100, "the newest this many entries (at least 1)")
	fs.BoolVar(&asJSON, "json", false, "print JSON")
	addPostgresClientFlags(fs)
	return cmd
}

// auditJSON is one row of the audit table as audit --json prints it: its
// columns' names, and null for a NULL (a rewind of a verdict no run wrote
// has no from_query_id, an acknowledgement no cleared_mark).
type auditJSON struct {
	ID           int64      `json:"id"`
	TableName    string     `json:"table_name"`
	Action       string     `json:"action"`
	At           time.Time  `json:"at"`
	ByOperator   string     `json:"by_operator"`
	DBUser       string     `json:"db_user"`
	Reason       string     `json:"reason"`
	FromUntil    *time.Time `json:"from_until"`
	ToUntil      *time.Time `json:"to_until"`
	FromQueryID  *string    `json:"from_query_id"`
	FromRunID    *string    `json:"from_run_id"`
	FromBatchID  *int64     `json:"from_batch_id"`
	FromEndTime  *time.Time `json:"from_end_time"`
	ClearedMark  *string    `json:"cleared_mark"`
	ClearedMarks *int64     `json:"cleared_marks"`
}

// toAuditJSON is e as audit --json prints it. A zero time, an empty id or
// mark and a zero count were NULL; a batch is NULL when no run is named
// (control writes them together).
func toAuditJSON(e control.AuditEntry) auditJSON {
	ts := func(t time.Time) *time.Time {
		if t.IsZero() {
			return nil
		}
		return &t
	}
	str := func(s string) *string {
		if s == "" {
			return nil
		}
		return &s
	}
	j := auditJSON{ID: e.ID, TableName: e.Table, Action: e.Action, At: e.At, ByOperator: e.By, DBUser: e.DBUser, Reason: e.Reason,
		FromUntil: ts(e.From), ToUntil: ts(e.To), FromQueryID: str(e.FromQueryID), FromRunID: str(e.FromRunID),
		FromEndTime: ts(e.FromEndTime), ClearedMark: str(e.ClearedMark)}
	if e.FromRunID != "" {
		j.FromBatchID = &e.FromBatchID
	}
	if e.ClearedMark != "" || e.ClearedMarks != 0 {
		j.ClearedMarks = &e.ClearedMarks
	}
	return j
}

// fmtTime prints a verdict time in RFC 3339 with its fraction when it has
// one (a stored 10:59:59.999999 must not read 10:59:59), or "-" when zero.
func fmtTime(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return t.Format(time.RFC3339Nano)
}
