package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	neturl "net/url"
	"path/filepath"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/finalizer-dev/finalizer/internal/peerowner"
	"github.com/finalizer-dev/finalizer/internal/service"
	"github.com/finalizer-dev/finalizer/listener"
	"github.com/finalizer-dev/finalizer/progress"
)

// DefaultDialTimeout bounds connecting to NATS from a client command.
const DefaultDialTimeout = 5 * time.Second

// addNATSClientFlags adds the flags of the commands that talk to NATS.
func addNATSClientFlags(fs *pflag.FlagSet) {
	// No default value shown: the URL used unless given is the data
	// dir's (natsTarget), which --help showing nats://127.0.0.1:4222 hid.
	fs.String("nats-url", "", "NATS server URL(s), comma-separated (empty: the URL in --data-dir's nats-login.json, written by serve "+
		"for its embedded server; without that file, or with NATS credentials given, "+DefaultNATSURL+")")
	fs.String("subject-prefix", listener.DefaultPrefix, "subject prefix of the listener events")
	fs.String("data-dir", DefaultDataDir, "data dir of the serve whose embedded NATS server to use: its URL and login (nats-login.json) "+
		"are used unless --nats-url names another server or NATS credentials are given")
	addNATSAuthFlags(fs)
}

// localLogin returns the URL and login to use from the data dir's
// nats-login.json (written by serve for its embedded server): only when no
// credentials are given, and --nats-url is not set or names that same
// server, so that the login never goes to another server.
func localLogin(fs *pflag.FlagSet, c NATSConfig, url string) (service.LocalLogin, bool) {
	if c.User != "" || c.Password != "" || c.Token != "" || c.NKeySeed != "" || c.Creds != "" || strings.Contains(url, "@") {
		return service.LocalLogin{}, false
	}
	dir, _ := fs.GetString("data-dir")
	l, err := service.ReadLocalLogin(dir)
	if err != nil {
		return l, false
	}
	if fs.Changed("nats-url") && !sameServer(url, l.URL) {
		return l, false
	}
	return l, true
}

// sameServer reports whether two NATS URLs name the same host and port
// (nats:// assumed, 4222 by default).
func sameServer(a, b string) bool {
	hostPort := func(s string) string {
		s = strings.TrimSpace(s)
		if !strings.Contains(s, "://") {
			s = "nats://" + s
		}
		u, err := neturl.Parse(s)
		if err != nil {
			return ""
		}
		host, port := u.Hostname(), u.Port()
		if port == "" {
			port = "4222"
		}
		if host == "localhost" {
			host = "127.0.0.1"
		}
		return net.JoinHostPort(host, port)
	}
	ha := hostPort(a)
	return ha != "" && ha == hostPort(b)
}

// natsTarget is the NATS URL a client command connects to, and the data
// dir's login when it is to be sent (localLogin): --nats-url when given
// and not that same server, else the login file's URL, else
// DefaultNATSURL.
func natsTarget(fs *pflag.FlagSet, c NATSConfig) (string, service.LocalLogin, bool) {
	url, _ := fs.GetString("nats-url")
	if l, ok := localLogin(fs, c, url); ok {
		return l.URL, l, true
	}
	if url == "" {
		url = DefaultNATSURL
	}
	return url, service.LocalLogin{}, false
}

// loginDialer dials NATS for a client that uses the data dir's login
// (natsTarget): the login goes only to a server run by the file's owner:
// while the service is stopped, any local user may listen on its port and
// would read the password from the CONNECT.
func loginDialer(fs *pflag.FlagSet) (nats.CustomDialer, error) {
	dir, _ := fs.GetString("data-dir")
	file := filepath.Join(dir, service.NATSLoginFile)
	owner, err := peerowner.FileUID(file)
	if err != nil && !errors.Is(err, peerowner.ErrUnknown) {
		return nil, fmt.Errorf("NATS: %s: %w", file, err)
	}
	return peerowner.Dialer{UID: owner, Timeout: DefaultDialTimeout, What: "the login of " + file}, nil
}

// dialNATS connects a client command to NATS; failure is exit code 2.
func dialNATS(ctx context.Context, fs *pflag.FlagSet) (*listener.Listener, error) {
	var c NATSConfig
	applyNATSAuthFlags(fs, &c)
	prefix, _ := fs.GetString("subject-prefix")
	var dialer nats.CustomDialer
	url, login, ok := natsTarget(fs, c)
	if ok {
		c.User, c.Password = login.User, login.Password
		d, err := loginDialer(fs)
		if err != nil {
			return nil, usageError(err)
		}
		dialer = d
	}
	dctx, cancel := context.WithTimeout(ctx, DefaultDialTimeout)
	defer cancel()
	l, err := listener.Dial(dctx, listener.Options{
		URL: url, Prefix: prefix, APIPrefix: c.APIPrefix, Name: "finalizer-cli",
		User: c.User, Password: c.Password, Token: c.Token, NKeySeedFile: c.NKeySeed, CredsFile: c.Creds,
		TLSCAFile: c.TLSCA, TLSCertFile: c.TLSCert, TLSKeyFile: c.TLSKey, Dialer: dialer,
	})
	if err != nil {
		return nil, usageError(fmt.Errorf("NATS: %w", err)) // the error names the (redacted) URL
	}
	return l, nil
}

func newTrackCmd(stdout io.Writer) *cobra.Command {
	var queryID, runID, table string
	var spec progress.SpecOptions
	cmd := &cobra.Command{
		Use:   "track --query-id Q --run-id R --table T",
		Short: "Track one run of a query into a table (a request to the running service)",
		Long: `Asks the running service to track one run of a streaming query: every progress of
that run moves the table's verdict, once per period, until the run terminates. The track
is persisted and survives a restart of the service. A new run of the same query tracked
into the same table supersedes the old run's tracker.

Exit codes: 0 tracked (or already tracked), 2 usage error or no service reachable.`,
		Example: `  finalizer track --query-id 8d268dc2-bc9c-4be8-97a9-b135d2943028 \
    --run-id e225d92f-2545-48f8-87a2-9c0309580f8a --table bronze.orders --granularity hour`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := required("query-id", queryID, "run-id", runID, "table", table); err != nil {
				return err
			}
			if err := service.CheckIDs(strings.ToLower(queryID), strings.ToLower(runID)); err != nil {
				return usageError(err)
			}
			if _, err := progress.ParseSpec(spec); err != nil {
				return usageError(err)
			}
			l, err := dialNATS(cmd.Context(), cmd.Flags())
			if err != nil {
				return err
			}
			defer l.Close()
			rep, err := l.RequestTrack(cmd.Context(), listener.TrackRequest{
				QueryID: strings.ToLower(queryID), RunID: strings.ToLower(runID), Table: table, Spec: spec,
			})
			if err != nil {
				return usageError(err)
			}
			if rep.Error != "" || !rep.OK {
				return usageError(fmt.Errorf("track refused: %s", rep.Error))
			}
			if rep.Tracked {
				fmt.Fprintf(stdout, "tracking run %s of query %s into %s\n", field(runID), field(queryID), field(table))
			} else {
				fmt.Fprintf(stdout, "run %s is already tracked into %s\n", field(runID), field(table))
			}
			return nil
		},
	}
	fs := cmd.Flags()
	fs.StringVar(&queryID, "query-id", "", "the query's id (required)")
	fs.StringVar(&runID, "run-id", "", "the run's id (required)")
	fs.StringVar(&table, "table", "", "the table whose verdict this run moves (required)")
	addSpecFlags(fs, &spec)
	addNATSClientFlags(fs)
	addAPIPrefixFlag(fs)
	return cmd
}

// addSpecFlags adds the tracking spec flags (docs/contract.md §3).
func addSpecFlags(fs *pflag.FlagSet, s *progress.SpecOptions) {
	fs.StringVar(&s.Time, "time", progress.DefaultTime, "offset:<JSON Pointer> into the source's endOffset, watermark, or trigger")
	fs.StringVar(&s.Source, "source", progress.DefaultSource, "index into the progress's sources, all (the earliest time), or description:<glob> (the one source whose description matches)")
	fs.StringVar(&s.Granularity, "granularity", progress.DefaultGranularity, "period: minute, hour or day")
	fs.StringVar(&s.Timezone, "timezone", progress.DefaultTimezone, "IANA time zone whose wall clock sets period boundaries")
	fs.StringVar(&s.Delay, "delay", progress.DefaultDelay, "allowed lateness subtracted before flooring")
	fs.StringVar(&s.Unit, "unit", "", "unit of offset times written as numbers: ms, s or us; empty means ms")
	fs.StringVar(&s.NaiveTimezone, "naive-timezone", "", "IANA zone of offset times written without a zone; empty means UTC")
	fs.BoolVar(&s.LateRowsFiltered, "late-rows-filtered", false, "time watermark: the table never receives a row older than the watermark, whatever the query's stateful operators")
	fs.BoolVar(&s.ProcessingTime, "processing-time", false, "time trigger: the table's time column is current_timestamp(), so sources need not have caught up")
	fs.Var(quietFlag{s}, "quiet-after", "finalize quiet periods: no row arrives later than this after its source caught up (offset and trigger times; ADR 0014)")
}

// quietFlag sets SpecOptions.Quiet from --quiet-after.
type quietFlag struct{ s *progress.SpecOptions }

func (q quietFlag) String() string {
	if q.s == nil || q.s.Quiet == nil {
		return ""
	}
	return q.s.Quiet.After
}

func (q quietFlag) Set(v string) error {
	q.s.Quiet = &progress.QuietOptions{After: v}
	return nil
}

func (quietFlag) Type() string { return "duration" }

func newJoinCmd(stdout io.Writer) *cobra.Command {
	var runID string
	var timeout time.Duration
	cmd := &cobra.Command{
		Use:   "join --run-id R [--timeout D]",
		Short: "Wait until a run's tracker has applied its last progress after termination",
		Long: `Waits until the run is done: it terminated and every tracker of it applied its last
progress. Join asks the service over NATS, so the service that tracks the run answers.

Exit codes:
  0  done: the run terminated and its last progress was applied, or, for a table
     rewound after that progress was posted, done with unapplied (applying it would
     undo the rewind): "done (its last progress was posted before the rewind of
     table T and not applied)"
  1  not done within --timeout (the run is still live)
  2  usage error, unknown run, or no service reachable
  3  a tracker of the run stopped without that, and join says why: the run was
     superseded by a run of the same query that started later, it was silent
     past tracking.expire_after (its next event tracks it again: join again),
     the service shut down (the track resumes when it starts again: join
     again), or its last advance failed (the error is printed)

A join that reaches the service while it recovers its tracks at start waits
for the recovery (within --timeout) instead of calling the run unknown.`,
		Example: `  finalizer join --run-id e225d92f-2545-48f8-87a2-9c0309580f8a --timeout 5m`,
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := required("run-id", runID); err != nil {
				return err
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
			l, err := dialNATS(ctx, cmd.Flags())
			if err != nil {
				return err
			}
			defer l.Close()
			for {
				step := time.Minute
				if dl, ok := ctx.Deadline(); ok {
					step = min(step, time.Until(dl))
				}
				if step <= 0 {
					return negative("run %s: not done within %s", runID, timeout)
				}
				rep, err := l.RequestJoin(ctx, listener.JoinRequest{RunID: strings.ToLower(runID), Timeout: step})
				if err != nil {
					if ctx.Err() != nil {
						return negative("run %s: not done within %s", runID, timeout)
					}
					return usageError(err)
				}
				if rep.Error != "" {
					return usageError(fmt.Errorf("join: %s", rep.Error))
				}
				if rep.Stopped != "" {
					if rep.LastError != "" {
						fmt.Fprintf(cmd.ErrOrStderr(), "finalizer: the run's last advance failed: %s\n", field(rep.LastError))
					}
					return &exitError{code: exitStopped, err: fmt.Errorf("run %s: not done: %s", runID, rep.Stopped)}
				}
				if rep.Done {
					if rep.LastError != "" {
						fmt.Fprintf(cmd.ErrOrStderr(), "finalizer: warning: the run's last advance failed: %s\n", field(rep.LastError))
					}
					if rep.Note != "" {
						fmt.Fprintf(stdout, "run %s: done (%s)\n", field(runID), field(rep.Note))
						return nil
					}
					fmt.Fprintf(stdout, "run %s: done\n", field(runID))
					return nil
				}
			}
		},
	}
	fs := cmd.Flags()
	fs.StringVar(&runID, "run-id", "", "the run's id (required)")
	fs.DurationVar(&timeout, "timeout", 0, "give up after this long (0: wait as long as it takes)")
	addNATSClientFlags(fs)
	addAPIPrefixFlag(fs)
	return cmd
}
