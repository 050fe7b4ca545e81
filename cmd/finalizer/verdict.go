package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/finalizer-dev/finalizer/control"
	"github.com/finalizer-dev/finalizer/finalizer"
	"github.com/finalizer-dev/finalizer/internal/redact"
)

// parseTS reads a command-line time: RFC 3339 with any offset, or a naive
// date-time (or date) read as UTC.
func parseTS(s string) (time.Time, error) {
	if t, err := time.Parse(time.RFC3339Nano, s); err == nil {
		return t.UTC(), nil
	}
	for _, layout := range []string{"2006-01-02T15:04:05.999999999", "2006-01-02 15:04:05.999999999", "2006-01-02T15:04", "2006-01-02 15:04", "2006-01-02"} {
		if t, err := time.ParseInLocation(layout, s, time.UTC); err == nil {
			return t, nil
		}
	}
	return time.Time{}, fmt.Errorf("%q is not a time: want RFC 3339 (2026-09-28T15:00:00Z, 2026-09-28T12:00:00-03:00) or a naive UTC time (2026-09-28T15:00:00)", s)
}

func newIsFinalCmd(stdout io.Writer) *cobra.Command {
	var table, periodEnd, httpURL, httpToken string
	var allowMissing bool
	cmd := &cobra.Command{
		Use:   "is-final --table T --period-end TS",
		Short: "Check once whether the period ending at TS is final",
		Long: `Checks once whether every period of the table ending at or before TS is complete
(finalized_until >= TS). TS is RFC 3339 with any offset; a naive time is UTC.

A table without a verdict is not final (exit 1) while something could write it: a
feeder row (an expected feeder that never reported: the line says what holds the
table), an explicit track, a rule of the --config file, or a tracker or join wait of
the running service. When
nothing could (a misspelled name), is-final exits 3 and names the table;
--allow-missing makes that exit 1 too.

A table that is not final (no verdict yet, or one short of TS) gets the reason on its
line when one is known: what holds it (a feeder, a join) and, for each run of a
holding feeder that the service holds (no usable time in its progress, a time in the
future, ...) or whose advances fail, the service's own reason, as status shows it:
"held by orders: no verdict of its own yet (reporting); run 1a2b3c4d (orders): held by
no_time: ...". At most 3 runs are named, then how many more (a name is cut at 100
characters, a reason at 400). The runs are read from --http-url; without the service,
the feeders alone, and when it does not answer the line says so. An --http-url that
is not an http:// or https:// URL is a usage error (2).

Exit codes: 0 final, 1 not final (or no verdict yet), 2 usage or connection error,
3 unknown table.`,
		Example: `  finalizer is-final --table bronze.orders --period-end 2026-09-28T15:00:00Z && run_the_batch_job`,
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			stdout := newSafeWriter(stdout) // the table's name, escaped
			defer stdout.Flush()
			if err := required("table", table, "period-end", periodEnd); err != nil {
				return err
			}
			end, err := parseTS(periodEnd)
			if err != nil {
				return usageError(err)
			}
			s, c, err := openStore(cmd.Context(), cmd.Flags())
			if err != nil {
				return err
			}
			defer s.Close()
			v, err := s.Get(cmd.Context(), table)
			switch {
			case errors.Is(err, control.ErrNotFound):
				var held string
				if allowMissing {
					held = whyNotFinal(cmd.Context(), s, c, control.Verdict{Table: table}, httpToken)
				} else if held, err = knownTable(cmd.Context(), s, c, table, httpToken, missingHint["is-final"]); err != nil {
					return err
				}
				fmt.Fprintf(stdout, "%s: no verdict yet%s; period ending %s is not final\n", field(table), inParens(held), end.Format(time.RFC3339Nano))
				return negative("")
			case err != nil:
				return usageError(err)
			case v.FinalizedUntil.IsZero():
				// A row without a verdict (NULL finalized_until: its
				// feeders have not all reported): not the zero time.
				held := whyNotFinal(cmd.Context(), s, c, v, httpToken)
				fmt.Fprintf(stdout, "%s: no verdict yet%s; period ending %s is not final\n", field(table), inParens(held), end.Format(time.RFC3339Nano))
				return negative("")
			}
			if !v.Reaches(end) {
				held := whyNotFinal(cmd.Context(), s, c, v, httpToken)
				if held != "" {
					held = "; " + held
				}
				fmt.Fprintf(stdout, "%s: period ending %s is not final (final until %s%s)\n", field(table),
					end.Format(time.RFC3339Nano), v.FinalizedUntil.UTC().Format(time.RFC3339Nano), held)
				return negative("")
			}
			fmt.Fprintf(stdout, "%s: period ending %s is final\n", field(table), end.Format(time.RFC3339Nano))
			return nil
		},
	}
	fs := cmd.Flags()
	fs.StringVar(&table, "table", "", "the table (required)")
	fs.StringVar(&periodEnd, "period-end", "", "end of the period to check (required)")
	addMissingFlags(fs, &allowMissing, &httpURL, &httpToken)
	addPostgresClientFlags(fs)
	return cmd
}

func newWaitCmd(stdout io.Writer) *cobra.Command {
	var table, until, httpURL, httpToken string
	var timeout time.Duration
	var allowMissing bool
	cmd := &cobra.Command{
		Use:   "wait --table T --until TS [--timeout D]",
		Short: "Block until finalized_until >= TS (LISTEN/NOTIFY, not a poll loop)",
		Long: `Blocks until the table's verdict reaches TS, woken by PostgreSQL's NOTIFY on the
finalizer_verdict channel (no polling). Returns at once when it is already final.
TS is RFC 3339 with any offset; a naive time is UTC.

A table without a verdict is waited for while something could write it: a feeder row,
an explicit track, a rule of the --config file, or a tracker or join wait of the
running service. When nothing
could (a misspelled name), wait exits 3 at once instead of waiting out its timeout;
--allow-missing waits anyway, for a table whose first verdict is still to come.

A PostgreSQL outage once the wait began (a restart, a failover to a promoted standby)
is waited out: the wait goes on when the database is back, within --timeout.

While it waits, wait says on stderr why the table is not final yet, as is-final's
line does (what holds it, and the service's reason for each run of a holding feeder
it holds: "finalizer: still waiting for T to reach TS: ..."), after 1 s and then
whenever that changed (asked every minute); nothing while nothing is known to hold it.
While PostgreSQL does not answer it says so once (with the error's kind), and again
when it answers. A time-out says it too: during an outage, the reason known before it,
and that PostgreSQL did not answer at the end.

Exit codes: 0 final, 1 timed out, 2 usage or connection error, 3 unknown table.`,
		Example: `  finalizer wait --table bronze.orders --until 2026-09-28T15:00:00Z --timeout 2h`,
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			stdout := newSafeWriter(stdout) // the table's name, escaped
			defer stdout.Flush()
			if err := required("table", table, "until", until); err != nil {
				return err
			}
			ts, err := parseTS(until)
			if err != nil {
				return usageError(err)
			}
			if timeout < 0 {
				return usageError(fmt.Errorf("--timeout %s is negative (0 waits as long as it takes)", timeout))
			}
			ctx := cmd.Context()
			if timeout > 0 {
				var cancel context.CancelFunc
				ctx, cancel = context.WithTimeout(ctx, timeout)
				defer cancel()
			}
			// --timeout bounds the whole command: a deadline that expires
			// while PostgreSQL is still being reached is a time-out (1),
			// like one that expires while waiting, not an error (2).
			timedOut := func(err error) error {
				if timeout > 0 && errors.Is(ctx.Err(), context.DeadlineExceeded) {
					return negative("%s: not final until %s within %s (PostgreSQL had not answered yet: %v)", table, ts.Format(time.RFC3339Nano), timeout, err)
				}
				return err
			}
			s, c, err := openStore(ctx, cmd.Flags())
			if err != nil {
				return timedOut(err)
			}
			defer s.Close()
			if !allowMissing {
				if _, err := s.Get(ctx, table); errors.Is(err, control.ErrNotFound) {
					if _, err := knownTable(ctx, s, c, table, httpToken, missingHint["wait"]); err != nil {
						return timedOut(err)
					}
				}
			}
			// An outage once the wait began (a restart, a failover: the
			// look at the table after the LISTEN connection's reconnect
			// may meet a pooled connection to the server that went) is
			// waited out, as the HTTP long poll does.
			stopNotes := noteWhyWhileWaiting(ctx, cmd.ErrOrStderr(), s, c, table, ts, httpToken, whyFirst, whyEvery, pgEvery)
			v, err := waitThroughOutages(ctx, s, table, ts)
			noted := stopNotes()
			if err != nil {
				switch {
				case errors.Is(err, context.DeadlineExceeded), errors.Is(ctx.Err(), context.DeadlineExceeded) && timeout > 0:
					// Timed out (also during an outage it waited out).
					// Why, asked after the deadline, within a few seconds
					// of its own: a time-out that says only "not final"
					// left the user to find the held run in status.
					if !errors.Is(err, context.DeadlineExceeded) && noted.pgErr == nil {
						noted.pgErr = err // ended in an outage the notes did not see yet
					}
					return negative("%s: not final until %s within %s%s", table, ts.Format(time.RFC3339Nano), timeout,
						inParens(timedOutWhy(cmd.Context(), s, c, table, httpToken, noted)))
				case errors.Is(err, context.Canceled):
					return negative("%s: interrupted", table)
				case ctx.Err() != nil:
					return negative("%s: interrupted (PostgreSQL unavailable: %v)", table, err)
				}
				return usageError(err)
			}
			fmt.Fprintf(stdout, "%s: final until %s\n", field(table), v.FinalizedUntil.Format(time.RFC3339Nano))
			return nil
		},
	}
	fs := cmd.Flags()
	fs.StringVar(&table, "table", "", "the table (required)")
	fs.StringVar(&until, "until", "", "the time the verdict must reach (required)")
	fs.DurationVar(&timeout, "timeout", 0, "give up after this long (0: wait as long as it takes)")
	addMissingFlags(fs, &allowMissing, &httpURL, &httpToken)
	addPostgresClientFlags(fs)
	return cmd
}

// How soon, and then how often, wait asks why the table it waits for is
// not final: the first note comes after whyFirst (a table final at once
// costs no question), then one whenever the answer changed, asked every
// whyEvery (one GET /v1/runs a minute, as a status would). Whether
// PostgreSQL answers is looked at every pgEvery (the table's row, by its
// key): an outage it waits out is said while it lasts, not only at the
// time-out.
const (
	whyFirst = time.Second
	whyEvery = time.Minute
	pgEvery  = 2 * time.Second
)

// waitNoted is what wait's notes knew when the wait ended: the last why
// asked while PostgreSQL answered, and PostgreSQL's error at the last look
// (nil: it answered).
type waitNoted struct {
	why   string
	pgErr error
}

// noteWhyWhileWaiting says on w, while wait waits for table to reach
// until, why it is not final yet (whyNotFinal: what holds it and the runs
// the service holds, with their reasons, or that the service did not
// answer), first after first, then each time the answer changed, asked
// every every; nothing while nothing is known to hold it. It looks at
// the table every check: when PostgreSQL does not answer it says so once
// (with the error's kind, again when that changes), and when it answers
// again. A two-hour wait on a run whose every progress is held told
// nothing until its time-out, and an outage nothing at all. stop ends the
// notes and returns, once the goroutine that writes them has ended
// (nothing is written after it), what they knew.
func noteWhyWhileWaiting(ctx context.Context, w io.Writer, s *control.Store, c clientConfig, table string, until time.Time, token string,
	first, every, check time.Duration) (stop func() waitNoted) {
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	var st waitNoted
	note := func(format string, a ...any) {
		fmt.Fprintf(w, "finalizer: still waiting for %s to reach %s: %s\n", field(table), until.Format(time.RFC3339Nano), fmt.Sprintf(format, a...))
	}
	go func() {
		defer close(done)
		t := time.NewTimer(first)
		defer t.Stop()
		var noted, pgKind string
		var nextWhy time.Time
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
			v, why, err := lookWhileWaiting(ctx, s, c, table, until, token, time.Now().Before(nextWhy))
			if ctx.Err() != nil {
				return
			}
			switch {
			case err == nil && v.Reaches(until):
				return // final: the wait itself answers
			case err != nil && !errors.Is(err, control.ErrNotFound):
				// PostgreSQL unavailable: the wait waits it out.
				kind, _ := errKind(redact.Error(err, c.postgresURL))
				if st.pgErr == nil || kind != pgKind {
					note("PostgreSQL does not answer (%s); the wait goes on when it does", kind)
				}
				st.pgErr, pgKind = err, kind
			default:
				if st.pgErr != nil {
					note("PostgreSQL answers again")
					st.pgErr = nil
					if time.Now().Before(nextWhy) { // ask why again now
						nextWhy = time.Time{}
						t.Reset(0)
						continue
					}
				}
				if time.Now().Before(nextWhy) {
					break
				}
				st.why, nextWhy = why, time.Now().Add(every)
				if why != "" && why != noted {
					note("%s", why)
					noted = why
				}
			}
			t.Reset(check)
		}
	}()
	return func() waitNoted {
		cancel()
		<-done
		return st
	}
}

// lookWhileWaiting is one look of wait's notes at table, within
// whyTimeout: its row and, unless skipWhy or the row could not be read or
// reaches its time, why it is not final (whyNotFinal).
func lookWhileWaiting(ctx context.Context, s *control.Store, c clientConfig, table string, until time.Time, token string, skipWhy bool) (control.Verdict, string, error) {
	ctx, cancel := context.WithTimeout(ctx, whyTimeout)
	defer cancel()
	v, err := s.Get(ctx, table)
	if (err != nil && !errors.Is(err, control.ErrNotFound)) || skipWhy || (err == nil && v.Reaches(until)) {
		return v, "", err
	}
	v.Table = table
	return v, whyNotFinal(ctx, s, c, v, token), err
}

// timedOutWhy is why a timed-out wait's line says table is not final:
// asked again, within whyTimeout, when PostgreSQL answered at the notes'
// last look; else (or when it does not answer now) the last why the notes
// knew, and that PostgreSQL did not answer at the end, with its error's
// kind.
func timedOutWhy(ctx context.Context, s *control.Store, c clientConfig, table, token string, noted waitNoted) string {
	why, pgErr := noted.why, noted.pgErr
	if pgErr == nil {
		wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), whyTimeout)
		defer cancel()
		v, err := s.Get(wctx, table)
		switch {
		case err == nil || errors.Is(err, control.ErrNotFound): // a missing row: the name alone
			v.Table = table
			why = whyNotFinal(wctx, s, c, v, token)
		default:
			pgErr = err
		}
	}
	if pgErr == nil {
		return why
	}
	kind, _ := errKind(redact.Error(pgErr, c.postgresURL))
	if why != "" {
		why += "; "
	}
	return why + "PostgreSQL did not answer at the end (" + kind + ")"
}

// whyTimeout bounds how long wait, timed out, asks why the table is not
// final (its feeders from PostgreSQL, the runs from the service).
const whyTimeout = 5 * time.Second

// inParens is " (why)", or "" for no why.
func inParens(why string) string {
	if why == "" {
		return ""
	}
	return " (" + why + ")"
}

// addMissingFlags adds --allow-missing and the HTTP API flags is-final and
// wait use to ask the service whether a tracker writes a table.
func addMissingFlags(fs *pflag.FlagSet, allow *bool, httpURL, httpToken *string) {
	fs.BoolVar(allow, "allow-missing", false, "a table with no verdict and nothing that could write one is not final yet, not exit 3")
	fs.StringVar(httpURL, "http-url", DefaultHTTPURL, `the service's HTTP API, asked whether a tracker writes a table without a verdict; "" skips it; with --config and no --http-url, the file's http.listen; else`)
	fs.StringVar(httpToken, "http-token", "", "bearer token of the service's HTTP API (prefer FINALIZER_HTTP_TOKEN)")
}

// tableStatus is one table in `status --json` and GET /v1/tables.
type tableStatus struct {
	Table          string          `json:"table"`
	FinalizedUntil time.Time       `json:"finalized_until,omitzero"`
	LagSeconds     float64         `json:"lag_seconds,omitempty"`
	EndTime        time.Time       `json:"end_time,omitzero"`
	EndOffset      json.RawMessage `json:"end_offset,omitempty"`
	QueryID        string          `json:"query_id,omitempty"`
	RunID          string          `json:"run_id,omitempty"`
	// BatchID is the batch of the run that made the last move, null when
	// no run made it (no verdict yet, or an operator's rewind): batch 0
	// would read as a run's first batch.
	BatchID   *int64    `json:"batch_id"`
	Sources   []string  `json:"sources,omitempty"`
	UpdatedAt time.Time `json:"updated_at,omitzero"`
	// Mark is the first sign, since the last rewind or acknowledgement,
	// that the table's history changed under the verdict; Marks counts
	// them (finalizer rewind, finalizer acknowledge).
	Mark      string    `json:"mark,omitempty"`
	MarkedAt  time.Time `json:"marked_at,omitzero"`
	Marks     int64     `json:"marks,omitempty"`
	RewoundAt time.Time `json:"rewound_at,omitzero"`
	// Feeders are the queries writing the table (ADR 0015); HeldBy says
	// which one holds it back, "" when none does.
	Feeders []feederStatus            `json:"feeders"`
	HeldBy  string                    `json:"held_by,omitempty"`
	Runs    []finalizer.TrackerStatus `json:"runs"`
	// JoinWaits are the new feeders whose join to the table did not
	// succeed and is retried (finalizer.Registry.JoinWaits): the table
	// does not move before they joined, and HeldBy says so first.
	JoinWaits []finalizer.JoinWait `json:"join_waits,omitempty"`
	// Actions are the table's actions with events waiting or
	// dead-lettered (issue 19); none when all were delivered.
	Actions []actionStatus `json:"actions,omitempty"`
}

// feederStatus is one feeder of a table in tableStatus.
type feederStatus struct {
	Feeder         string    `json:"feeder"`
	QueryName      string    `json:"query_name,omitempty"`
	FinalizedUntil time.Time `json:"finalized_until,omitzero"`
	LagSeconds     float64   `json:"lag_seconds,omitempty"`
	Expected       bool      `json:"expected,omitempty"`
	JoinedAt       time.Time `json:"joined_at"`
	UpdatedAt      time.Time `json:"updated_at"`
	RetiredAt      time.Time `json:"retired_at,omitzero"`
	RetiredWhy     string    `json:"retired_why,omitempty"`
	// State is what the service knows of the feeder's runs: reporting,
	// idle, stale (silent longer than stale_after), failed (terminated with
	// an exception), terminated, no tracked run (expired, or not tracked
	// by this service), never reported (expected), retired, retired but
	// reporting (a tracked run of a retired query: it does not hold the
	// table); "unknown" without the service's runs.
	State string `json:"state"`
	Holds bool   `json:"holds,omitempty"`
}

// feederState is what runs (nil: unknown) say of feeder f.
func feederState(f control.Feeder, runs []finalizer.TrackerStatus) string {
	switch {
	case f.Retired():
		// A retired query that runs again does not hold the table, which
		// may be final ahead of what it writes: say so.
		for _, r := range runs {
			if r.Table == f.Table && r.QueryID == f.Feeder && !r.Failed && !r.Done && !r.Terminated {
				return "retired but reporting"
			}
		}
		return "retired"
	case f.FinalizedUntil.IsZero() && f.Expected:
		return "never reported"
	case runs == nil:
		return "unknown"
	}
	state := "no tracked run"
	rank := map[string]int{"no tracked run": 0, "terminated": 1, "failed": 2, "stale": 3, "idle": 4, "reporting": 5}
	for _, r := range runs {
		if r.Table != f.Table || r.QueryID != f.Feeder {
			continue
		}
		s := "reporting"
		switch {
		case r.Failed:
			s = "failed"
		case r.Done || r.Terminated:
			s = "terminated"
		case r.Stale:
			s = "stale"
		case r.Idle:
			s = "idle"
		}
		if rank[s] > rank[state] {
			state = s
		}
	}
	return state
}

// toTableStatus is v with its feeders (one table's, as control.Feeders
// returns them) and tracked runs (nil: unknown). A table held before its
// first verdict has a zero v with only Table set.
func toTableStatus(v control.Verdict, now time.Time, runs []finalizer.TrackerStatus, feeders []control.Feeder) tableStatus {
	ts := tableStatus{
		Table: v.Table, FinalizedUntil: v.FinalizedUntil,
		EndTime: v.EndTime, EndOffset: v.EndOffset, QueryID: v.QueryID, RunID: v.RunID,
		UpdatedAt: v.UpdatedAt, Sources: v.Sources, Mark: v.Mark, MarkedAt: v.MarkedAt, Marks: v.Marks,
		RewoundAt: v.RewoundAt, Feeders: []feederStatus{}, Runs: []finalizer.TrackerStatus{},
	}
	if !v.FinalizedUntil.IsZero() {
		ts.LagSeconds = now.Sub(v.FinalizedUntil).Seconds()
	}
	if v.RunID != "" {
		b := v.BatchID
		ts.BatchID = &b
	}
	for _, r := range runs {
		if r.Table == v.Table {
			ts.Runs = append(ts.Runs, r)
		}
	}
	holder, held := control.HeldBy(feeders)
	for _, f := range feeders {
		fs := feederStatus{
			Feeder: f.Feeder, QueryName: f.QueryName, FinalizedUntil: f.FinalizedUntil, Expected: f.Expected,
			JoinedAt: f.JoinedAt, UpdatedAt: f.UpdatedAt, RetiredAt: f.RetiredAt, RetiredWhy: f.RetiredWhy,
			State: feederState(f, runs),
			Holds: held && f.Feeder == holder.Feeder,
		}
		if !f.FinalizedUntil.IsZero() && !f.Retired() {
			fs.LagSeconds = now.Sub(f.FinalizedUntil).Seconds()
		}
		ts.Feeders = append(ts.Feeders, fs)
		if fs.Holds {
			ts.HeldBy = heldBy(f, fs.State, rewoundHold(f, runs))
		}
	}
	if ts.HeldBy == "" {
		ts.HeldBy = notMoving(ts, runs)
	}
	return ts
}

// notMoving says why a table that no feeder holds does not move although
// a run reports into it: the runs that report are of retired feeders (a
// rewind --retire-feeder of its sole feeder, feeders retire), whose
// progress moves nothing, and no other live run feeds it. "" when an
// active feeder or another live run (a solo query that has no feeder row)
// feeds it, or when its runs are not known (runs nil). A status that showed
// such a run as plain "running", and no feeders, let an operator take the
// table for moving.
func notMoving(ts tableStatus, runs []finalizer.TrackerStatus) string {
	retiredFeeder := map[string]string{} // query id -> name
	for _, f := range ts.Feeders {
		if f.RetiredAt.IsZero() {
			return "" // an active feeder: its own state says why
		}
		retiredFeeder[f.Feeder] = feederName(f)
	}
	var reporting []string
	for _, r := range runs {
		if r.Table != ts.Table || r.Done || r.Terminated || r.Failed {
			continue
		}
		name, ok := retiredFeeder[r.QueryID]
		if !ok {
			return "" // a live run of a query that is not retired feeds it
		}
		reporting = append(reporting, fmt.Sprintf("%s (run %s)", field(name), field(short(r.RunID))))
	}
	if len(reporting) == 0 {
		return ""
	}
	return fmt.Sprintf("not moving: the run of retired feeder %s still reports, and a retired query's progress moves nothing; no other run feeds it (finalizer feeders unretire takes it back)",
		strings.Join(reporting, ", "))
}

// feederName is a feeder's query name when known, else its id.
func feederName(f feederStatus) string {
	if f.QueryName != "" {
		return f.QueryName
	}
	return f.Feeder
}

// heldBy says which feeder holds a table and, when it is not reporting,
// why it is silent: "held by region-us at 2026-09-28T12:00:00Z (stale)".
//
// With rewound (rewoundHold: the feeder's run shows its progress held as
// posted before the table's rewind), it says so: "no verdict of its own
// yet" alone left an operator to guess why (review nit 4).
func heldBy(f control.Feeder, state string, rewound bool) string {
	if f.FinalizedUntil.IsZero() && f.Expected {
		return fmt.Sprintf("held by %s: expected, never reported", field(f.Name()))
	}
	if f.FinalizedUntil.IsZero() && rewound {
		return fmt.Sprintf("held by %s: its run's progress is held as before the table's rewind, no verdict of its own yet (%s; the run's held says why)", field(f.Name()), state)
	}
	if f.FinalizedUntil.IsZero() { // tracked, no verdict of its own yet
		return fmt.Sprintf("held by %s: no verdict of its own yet (%s)", field(f.Name()), state)
	}
	s := fmt.Sprintf("held by %s at %s", field(f.Name()), f.FinalizedUntil.Format(time.RFC3339Nano))
	if state != "reporting" && state != "idle" {
		s += " (" + state + ")"
	}
	if rewound {
		s += ": its run's progress is held as before the table's rewind (the run's held says why)"
	}
	return s
}

// runWhy is what status shows of run r's trouble in its LAST ERROR column:
// its last failed advance's error, else the guard that holds its progress
// ("held by no_time: ...", the service's own Held, ADR 0012), else "".
func runWhy(r finalizer.TrackerStatus) string {
	switch {
	case r.LastError != "":
		return r.LastError
	case r.Held != "":
		return "held by " + r.Held
	}
	return ""
}

// Bounds of why: the held runs it names, and the runes of each run's
// reason (the service's text; a longer one is cut, status has it whole).
const (
	whyRuns      = 3
	whyReasonLen = 400
)

// why says why table ts is not final, for the gating answers (is-final,
// wait, GET /v1/tables/{table}/final): what holds it (HeldBy, with the
// holding feeder's state) and, for each run of a holding feeder (or of
// the table, when no active feeder row is there) that the service holds
// or whose advances fail, the service's own reason, as status shows it
// ("run 1a2b3c4d (orders): held by no_time: ..."). "held by orders: no
// verdict of its own yet (reporting)" alone read as healthy while the
// run's every progress lacked the time its rule reads. At most whyRuns
// runs are named, then how many more; "" when nothing is known to hold it
// (runs unknown, or every run fine and no feeder holding it).
func (ts tableStatus) why() string {
	var parts []string
	if ts.HeldBy != "" {
		parts = append(parts, ts.HeldBy)
	}
	holding := holdingFeeders(ts.Feeders)
	retired := map[string]bool{}
	for _, f := range ts.Feeders {
		if !f.RetiredAt.IsZero() {
			retired[f.Feeder] = true
		}
	}
	var held []string
	for _, r := range ts.Runs {
		w := runWhy(r)
		if w == "" || retired[r.QueryID] || (holding != nil && !holding[r.QueryID]) {
			continue
		}
		name := r.QueryName
		if name == "" {
			name = short(r.QueryID)
		}
		w = capRunes(field(w), whyReasonLen) // escaped first: an escape is 6 runes
		held = append(held, fmt.Sprintf("run %s (%s): %s", short(r.RunID), name, w))
	}
	if len(held) > whyRuns {
		more := len(held) - whyRuns
		held = append(held[:whyRuns], fmt.Sprintf("%d more held run(s): finalizer status --table %s", more, ts.Table))
	}
	return field(strings.Join(append(parts, held...), "; "))
}

// holdingFeeders are the query ids of the active feeders that hold a
// table (feeders: its tableStatus's): those with no verdict of their own,
// else those at the lowest watermark; nil when it has no active feeder
// (a solo query's runs write it without a feeder row).
func holdingFeeders(feeders []feederStatus) map[string]bool {
	var active []feederStatus
	for _, f := range feeders {
		if f.RetiredAt.IsZero() {
			active = append(active, f)
		}
	}
	if len(active) == 0 {
		return nil
	}
	low := active[0].FinalizedUntil
	for _, f := range active {
		if f.FinalizedUntil.Before(low) {
			low = f.FinalizedUntil // the zero time first: no verdict of its own
		}
	}
	holding := map[string]bool{}
	for _, f := range active {
		if f.FinalizedUntil.Equal(low) {
			holding[f.Feeder] = true
		}
	}
	return holding
}

// heldAsBeforeRewind is how a run's held starts when its progress, or
// quiet signal, was not used as sent before its table's rewind
// (finalizer's before_rewind outcome).
const heldAsBeforeRewind = "before_rewind"

// rewoundHold reports whether a run of feeder f on its table shows its
// progress held as before the table's rewind.
func rewoundHold(f control.Feeder, runs []finalizer.TrackerStatus) bool {
	for _, r := range runs {
		if r.Table == f.Table && r.QueryID == f.Feeder && strings.HasPrefix(r.Held, heldAsBeforeRewind) {
			return true
		}
	}
	return false
}

// attachJoinWaits adds to each of tables the feeder joins it waits for
// (by table, each in the order they began: Registry.JoinWaitsByTable, or
// joinWaitsByTable of a listing), which are then what holds it back: its
// trackers do not advance it before they joined. A silent "not yet" would
// leave an operator to guess.
func attachJoinWaits(tables []tableStatus, waits map[string][]finalizer.JoinWait) {
	if len(waits) == 0 {
		return
	}
	for i := range tables {
		t := &tables[i]
		if ws := waits[t.Table]; len(ws) > 0 {
			t.JoinWaits = ws
			t.HeldBy = ws[0].HeldBy()
		}
	}
}

// joinWaitsByTable groups a listing of join waits (Registry.JoinWaits, as
// /v1/runs serves it) by table, keeping their order.
func joinWaitsByTable(waits []finalizer.JoinWait) map[string][]finalizer.JoinWait {
	if len(waits) == 0 {
		return nil
	}
	of := map[string][]finalizer.JoinWait{}
	for _, w := range waits {
		of[w.Table] = append(of[w.Table], w)
	}
	return of
}

// withWaitingTables adds to verdicts, each as a table held before its
// first verdict, the tables that wait for a new feeder's join (waits) and
// have neither a verdict in verdicts nor a feeder in feeders: the join
// that did not succeed wrote no row, and a table with no other row was in
// no listing while that join held it (a silent "not yet"). Only names
// after after and up to through ("": no bound) are added: a page's range
// (control.Store.TablesPage's after and next).
func withWaitingTables(verdicts []control.Verdict, feeders []control.Feeder, waits map[string][]finalizer.JoinWait, after, through string) []control.Verdict {
	if len(waits) == 0 {
		return verdicts
	}
	listed := make(map[string]bool, len(verdicts)+len(feeders))
	for _, v := range verdicts {
		listed[v.Table] = true
	}
	for _, f := range feeders {
		listed[f.Table] = true
	}
	var extra []string
	for table := range waits {
		if !listed[table] && table > after && (through == "" || table <= through) {
			extra = append(extra, table)
		}
	}
	sort.Strings(extra)
	for _, table := range extra {
		verdicts = append(verdicts, control.Verdict{Table: table})
	}
	return verdicts
}

// tablesPage is a page of /v1/tables: the verdicts and feeders of the
// tables after after (control.Store.TablesPage, whose next is its last
// name when more follow), with the tracked runs and the join waits. A
// table held by a new feeder's join with no row yet is listed too, in its
// place (withWaitingTables): the page then ends at limit, and next is its
// last name, so that the next page starts after it.
func tablesPage(verdicts []control.Verdict, feeders []control.Feeder, runs []finalizer.TrackerStatus, waits map[string][]finalizer.JoinWait,
	after, next string, limit int, now time.Time) ([]tableStatus, string) {
	verdicts = withWaitingTables(verdicts, feeders, waits, after, next)
	page := tableStatuses(verdicts, feeders, runs, now, "") // sorted by table
	if len(page) > limit {
		page, next = page[:limit], page[limit-1].Table
	}
	attachJoinWaits(page, waits)
	return page, next
}

// tableStatuses joins verdicts, feeders (every table's) and runs: a table
// with feeders and no verdict yet is listed too.
func tableStatuses(verdicts []control.Verdict, feeders []control.Feeder, runs []finalizer.TrackerStatus, now time.Time, only string) []tableStatus {
	byTable := map[string][]control.Feeder{}
	for _, f := range feeders {
		byTable[f.Table] = append(byTable[f.Table], f)
	}
	// Runs indexed by table once, so that T tables and R runs cost
	// O(T + R), not O(T × R) (a flood of runs made /v1/tables take 8 s).
	runsOf := map[string][]finalizer.TrackerStatus{}
	for _, r := range runs {
		runsOf[r.Table] = append(runsOf[r.Table], r)
	}
	of := func(table string) []finalizer.TrackerStatus {
		if runs == nil {
			return nil // not known
		}
		if rs := runsOf[table]; rs != nil {
			return rs
		}
		return []finalizer.TrackerStatus{}
	}
	seen := map[string]bool{}
	out := make([]tableStatus, 0, len(verdicts))
	for _, v := range verdicts {
		seen[v.Table] = true
		out = append(out, toTableStatus(v, now, of(v.Table), byTable[v.Table]))
	}
	for t, fs := range byTable {
		if !seen[t] && (only == "" || only == t) {
			out = append(out, toTableStatus(control.Verdict{Table: t}, now, of(t), fs))
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Table < out[j].Table })
	return out
}

func newStatusCmd(stdout io.Writer) *cobra.Command {
	var table, httpURL, httpToken string
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "status [--table T] [--json]",
		Short: "Show verdicts, lag, tracked runs and their last errors",
		Long: `Shows every table's verdict (or one table's) from the control table: finalized_until,
its lag behind now, when it last moved and from which run; and the runs the service
tracks, with their last error, read from the service's HTTP API (--http-url) when it is
reachable. A table that waits for a new feeder's join is shown held by it ("T is held
until query Q joins its feeders ..."), also before its first verdict.
A run of a retired feeder that still reports moves nothing: it is listed as RETIRED,
with the table's feeders ("retired but reporting"), and a table that no other run
feeds is shown "not moving".

When the control table cannot be read (PostgreSQL down), status still prints the feeder
joins the service's tables wait for, read from its HTTP API ("T is held until query Q
joins its feeders ..."; with --json, {"join_waits": [...]}), then exits 2.

Exit codes: 0 shown, 2 usage or connection error (PostgreSQL down included), 3 --table
names a table with no verdict that no explicit track, --config rule, tracker or join wait
of the service could write (a typo: the nearest known name is suggested).`,
		Example: `  finalizer status
  finalizer status --table bronze.orders --json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			stdout := newSafeWriter(stdout) // the database's free text, escaped
			defer stdout.Flush()
			ctx := cmd.Context()
			s, c, err := openStore(ctx, cmd.Flags())
			if err != nil {
				return joinWaitsWithoutTables(ctx, stdout, c.httpURL, httpToken, table, asJSON, err)
			}
			defer s.Close()
			var (
				verdicts []control.Verdict
				feeders  []control.Feeder
			)
			if table != "" {
				v, err := s.Get(ctx, table)
				if err != nil && !errors.Is(err, control.ErrNotFound) {
					return joinWaitsWithoutTables(ctx, stdout, c.httpURL, httpToken, table, asJSON, err)
				}
				if feeders, err = s.Feeders(ctx, table); err != nil {
					return joinWaitsWithoutTables(ctx, stdout, c.httpURL, httpToken, table, asJSON, err)
				}
				switch {
				case v.Table != "":
					verdicts = []control.Verdict{v}
				case len(feeders) == 0:
					// No verdict yet: a table a track, rule or tracker will
					// write is shown as such; anything else is a typo, told
					// apart (exit 3, with the nearest name) as wait does.
					if _, err := knownTable(ctx, s, c, table, httpToken, missingHint["status"]); err != nil {
						return err
					}
					verdicts = []control.Verdict{{Table: table}}
				}
			} else {
				if verdicts, err = s.List(ctx); err != nil {
					return joinWaitsWithoutTables(ctx, stdout, c.httpURL, httpToken, table, asJSON, err)
				}
				if feeders, err = s.Feeders(ctx, ""); err != nil {
					return joinWaitsWithoutTables(ctx, stdout, c.httpURL, httpToken, table, asJSON, err)
				}
			}
			runs, waits, runsErr := fetchRuns(ctx, c.httpURL, httpToken)
			now := time.Now().UTC()
			known := runs
			if runsErr != nil || c.httpURL == "" {
				known = nil
			}
			byTable := joinWaitsByTable(waits)
			if table == "" {
				verdicts = withWaitingTables(verdicts, feeders, byTable, "", "")
			}
			out := tableStatuses(verdicts, feeders, known, now, table)
			attachJoinWaits(out, byTable)
			if bs, err := s.ActionBacklogs(ctx, table); err == nil {
				attachActions(out, bs, nil, now)
			} else if !errors.Is(err, control.ErrNotMigrated) {
				return usageError(err)
			}
			if asJSON {
				doc := map[string]any{"tables": out, "runs": runs}
				if runsErr != nil {
					doc["runs_error"] = runsErr.Error()
				}
				enc := json.NewEncoder(stdout)
				enc.SetIndent("", "  ")
				return enc.Encode(doc)
			}
			printStatus(stdout, out, runs, runsErr, table)
			return nil
		},
	}
	fs := cmd.Flags()
	fs.StringVar(&table, "table", "", "show only this table")
	fs.BoolVar(&asJSON, "json", false, "print JSON")
	fs.StringVar(&httpURL, "http-url", DefaultHTTPURL, `the service's HTTP API, for tracked runs; "" skips it; with --config and no --http-url, the file's http.listen; else`)
	fs.StringVar(&httpToken, "http-token", "", "bearer token of the service's HTTP API (prefer FINALIZER_HTTP_TOKEN)")
	addPostgresClientFlags(fs)
	return cmd
}

// joinWaitsWithoutTables is status when the control table cannot be read
// (PostgreSQL down, or its table not there): the tables' verdicts are not
// known, but the service (--http-url) still says which tables wait for a
// new feeder's join, retried until PostgreSQL is back; an operator sees
// that here too, not only in /v1/runs and the metrics. It prints them
// (only table's, when given), none when the service is not reachable or
// no table waits, and returns err, a usage or connection error (exit 2).
func joinWaitsWithoutTables(ctx context.Context, stdout io.Writer, base, token, table string, asJSON bool, err error) error {
	_, waits, runsErr := fetchRuns(ctx, base, token)
	shown := []finalizer.JoinWait{}
	if runsErr == nil {
		for _, w := range waits {
			if table == "" || w.Table == table {
				shown = append(shown, w)
			}
		}
	}
	if asJSON {
		if len(shown) > 0 {
			enc := json.NewEncoder(stdout)
			enc.SetIndent("", "  ")
			_ = enc.Encode(map[string]any{"join_waits": shown})
		}
		return usageError(err)
	}
	if len(shown) > 0 {
		fmt.Fprintln(stdout, "the control table cannot be read; the service says these tables wait for a new feeder's join:")
		for _, w := range shown {
			fmt.Fprintf(stdout, "%s is %s\n", field(w.Table), field(w.HeldBy()))
		}
	}
	return usageError(err)
}

// fetchRuns reads the tracked runs, and the feeder joins the tables wait
// for, from the service's HTTP API.
func fetchRuns(ctx context.Context, base, token string) ([]finalizer.TrackerStatus, []finalizer.JoinWait, error) {
	return fetchRunsOf(ctx, base, token, "")
}

// fetchRunsOf is fetchRuns for table alone (all tables for ""): the
// service reads only that table's trackers (GET /v1/runs?table=). A
// service of an earlier release ignores the parameter and answers every
// run, which the callers filter by table as before.
func fetchRunsOf(ctx context.Context, base, token, table string) ([]finalizer.TrackerStatus, []finalizer.JoinWait, error) {
	if base == "" {
		return []finalizer.TrackerStatus{}, nil, nil
	}
	ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	runs, waits, err := getRuns(ctx, base, token, table)
	return runs, waits, redact.Error(err, base)
}

// clientPage is the page size the commands ask /v1/runs for, and
// maxAnswer bounds such a page (status, is-final, wait, rewind's
// live-runs check): 1,000 runs are far smaller (a run's status is about a
// kilobyte); a larger answer is not the service's, and is refused unread.
const (
	clientPage = 1000
	maxAnswer  = 8 << 20
)

// statusError is getRuns's error when the service answered a status other
// than 200 OK ("service at URL answered 401 Unauthorized").
type statusError struct{ shown, status string }

func (e *statusError) Error() string {
	return fmt.Sprintf("service at %s answered %s", e.shown, e.status)
}

// getRuns is fetchRuns before its error is redacted.
func getRuns(ctx context.Context, base, token, table string) ([]finalizer.TrackerStatus, []finalizer.JoinWait, error) {
	runs := []finalizer.TrackerStatus{}
	var waits []finalizer.JoinWait
	shown := redact.URLs(base)
	after := ""
	for { // every page of GET /v1/runs
		u := strings.TrimRight(base, "/") + "/v1/runs?limit=" + strconv.Itoa(clientPage)
		if table != "" {
			u += "&table=" + url.QueryEscape(table)
		}
		if after != "" {
			u += "&after=" + url.QueryEscape(after)
		}
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
		if err != nil {
			return runs, waits, err
		}
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return runs, waits, fmt.Errorf("service not reachable at %s: %w", shown, err)
		}
		if resp.StatusCode != http.StatusOK {
			resp.Body.Close()
			return runs, waits, &statusError{shown: shown, status: resp.Status}
		}
		var doc struct {
			Runs      []finalizer.TrackerStatus `json:"runs"`
			JoinWaits []finalizer.JoinWait      `json:"join_waits"` // the first page's
			Next      string                    `json:"next"`
		}
		// The page is read whole, at most maxAnswer bytes, under ctx (a
		// body that trickles ends with the deadline), then decoded: a
		// json.Decoder buffers the whole value before it decodes it, so a
		// 75 MB answer was read at once and decoded for 36.7 s in 4.8 GB,
		// whatever the deadline said.
		raw, err := io.ReadAll(io.LimitReader(resp.Body, maxAnswer+1))
		resp.Body.Close()
		if err != nil {
			return runs, waits, fmt.Errorf("service at %s: reading its answer: %w", shown, err)
		}
		if len(raw) > maxAnswer {
			return runs, waits, fmt.Errorf("service at %s: answer too large (more than %d MB in a page of /v1/runs; not read)", shown, maxAnswer>>20)
		}
		if err := json.Unmarshal(raw, &doc); err != nil {
			return runs, waits, fmt.Errorf("service at %s: %w", shown, err)
		}
		if err := ctx.Err(); err != nil {
			return runs, waits, fmt.Errorf("service at %s: %w", shown, err)
		}
		runs = append(runs, doc.Runs...)
		if after == "" {
			waits = doc.JoinWaits
		}
		if doc.Next == "" || doc.Next == after {
			return runs, waits, nil
		}
		after = doc.Next
	}
}

func printStatus(w io.Writer, tables []tableStatus, runs []finalizer.TrackerStatus, runsErr error, only string) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "TABLE\tFINALIZED_UNTIL\tLAG\tLAST MOVE\tBY RUN\tBATCH")
	for _, t := range tables {
		if t.FinalizedUntil.IsZero() {
			fmt.Fprintf(tw, "%s\t-\t-\t-\t-\t-\n", field(t.Table))
			continue
		}
		by, batch := moveBy(t)
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", field(t.Table), t.FinalizedUntil.Format(time.RFC3339Nano),
			fmtLag(t.LagSeconds), t.UpdatedAt.Format(time.RFC3339), by, batch)
	}
	if len(tables) == 0 {
		fmt.Fprintln(tw, "(no verdicts yet)")
	}
	tw.Flush()
	printFeeders(w, tables)
	printActions(w, tables)
	for _, t := range tables {
		if t.Mark != "" {
			fmt.Fprintf(w, "\nMARKED %s since %s (%d signs): %s\n  its history may have changed under the verdict: look, then `finalizer rewind --table %s --to TS --reason ...` or `finalizer acknowledge --table %s --reason ...`\n",
				field(t.Table), t.MarkedAt.Format(time.RFC3339), t.Marks, field(t.Mark), field(t.Table), field(t.Table))
		}
		if !t.RewoundAt.IsZero() {
			fmt.Fprintf(w, "\n%s was last rewound at %s (finalizer audit --table %s)\n", field(t.Table), t.RewoundAt.Format(time.RFC3339Nano), field(t.Table))
		}
	}
	fmt.Fprintln(w)
	if runsErr != nil {
		fmt.Fprintf(w, "tracked runs: unknown (%v)\n", runsErr)
		return
	}
	sort.Slice(runs, func(i, j int) bool { return runs[i].Table < runs[j].Table })
	retired := map[string]bool{} // table NUL query id of every retired feeder
	for _, t := range tables {
		for _, f := range t.Feeders {
			if !f.RetiredAt.IsZero() {
				retired[t.Table+"\x00"+f.Feeder] = true
			}
		}
	}
	tw = tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "TRACKED RUN\tTABLE\tQUERY\tLAST EVENT\tSTATE\tLAST ERROR")
	n := 0
	for _, r := range runs {
		if only != "" && r.Table != only {
			continue
		}
		n++
		state := "running"
		switch {
		case retired[r.Table+"\x00"+r.QueryID] && !r.Done && !r.Terminated && !r.Failed:
			// A retired query's run: its progress moves nothing.
			state = "RETIRED, reporting (moves nothing)"
		case r.Done:
			state = "done"
		case r.Stale:
			state = "STALE"
		case r.Failures > 0:
			state = fmt.Sprintf("FAILING (%d)", r.Failures)
		case r.Held != "":
			state = "HELD"
		case r.Quiet != nil && r.Quiet.Until.Equal(r.Written):
			// The verdict this run wrote last came from a quiet source (ADR 0014).
			state = "running, quiet (" + r.Quiet.Signal + ")"
		}
		last := runWhy(r) // the guard that keeps the verdict where it is (ADR 0012)
		heard := r.LastEvent.UTC().Format(time.RFC3339)
		if r.NotHeard {
			// A restart read its events from the stream: nothing
			// heard live since its tracker started (the time shown).
			heard = "none since " + heard
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", field(r.RunID), field(r.Table), field(short(r.QueryID)), heard, state, field(last))
	}
	if n == 0 {
		fmt.Fprintln(tw, "(none)")
	}
	tw.Flush()
}

// printFeeders lists the feeders of the tables that have several, or one
// that holds them, and says which one holds each table back.
func printFeeders(w io.Writer, tables []tableStatus) {
	var shown []tableStatus
	for _, t := range tables {
		if len(t.Feeders) > 1 || t.HeldBy != "" || retiredButReporting(t) {
			shown = append(shown, t)
		}
	}
	if len(shown) == 0 {
		return
	}
	fmt.Fprintln(w)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "TABLE\tFEEDER\tQUERY\tWATERMARK\tLAG\tSTATE")
	for _, t := range shown {
		for _, f := range t.Feeders {
			mark, until, lag := "", "-", "-"
			if f.Holds {
				mark = "  <- holds the table"
			}
			if !f.FinalizedUntil.IsZero() {
				until = f.FinalizedUntil.Format(time.RFC3339Nano)
				if f.RetiredAt.IsZero() {
					lag = fmtLag(f.LagSeconds)
				}
			}
			state := f.State
			if !f.RetiredAt.IsZero() && f.RetiredWhy != "" {
				state += ": " + field(f.RetiredWhy)
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s%s\n", field(t.Table), field(shortFeeder(f.Feeder)), field(f.QueryName), until, lag, state, mark)
		}
	}
	tw.Flush()
	for _, t := range shown {
		if t.HeldBy != "" {
			fmt.Fprintf(w, "%s is %s\n", field(t.Table), field(t.HeldBy))
		}
	}
}

// retiredButReporting reports whether a feeder of t is retired but a run
// of it still reports: always shown, however many feeders t has.
func retiredButReporting(t tableStatus) bool {
	for _, f := range t.Feeders {
		if f.State == "retired but reporting" {
			return true
		}
	}
	return false
}

// fmtLag prints a lag the way an operator reads it: 42s, 1h5m0s, 3d4h.
func fmtLag(sec float64) string {
	d := time.Duration(sec * float64(time.Second)).Round(time.Second)
	if d >= 48*time.Hour {
		days := d / (24 * time.Hour)
		return fmt.Sprintf("%dd%dh", days, (d-days*24*time.Hour)/time.Hour)
	}
	return d.String()
}

// shortFeeder is a feeder's query id shortened as short does, or an
// expected feeder's configured name in full: "region-us" and "region-eu"
// must not both read "region-".
func shortFeeder(f string) string {
	if len(f) == 36 && f[8] == '-' && f[13] == '-' && f[18] == '-' && f[23] == '-' {
		return short(f)
	}
	return f
}

// moveBy is the BY RUN and BATCH of a table's last move: "-" for both when
// no run made it (an operator's rewind leaves the control row without a
// run and batch: batch 0 would read as a run's first batch).
func moveBy(t tableStatus) (run, batch string) {
	if t.RunID == "" || t.BatchID == nil {
		return "-", "-"
	}
	return short(t.RunID), strconv.FormatInt(*t.BatchID, 10)
}

func short(id string) string {
	if len(id) > 8 {
		return id[:8]
	}
	return id
}
