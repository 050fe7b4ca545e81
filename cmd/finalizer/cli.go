package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// Exit codes (docs/contract.md §5).
const (
	exitOK       = 0
	exitNegative = 1 // not final, timeout
	exitUsage    = 2 // usage or connection error
	exitStopped  = 3 // join: the tracker stopped without the run's end applied
)

// exitError carries an exit code out of a command. A nil err prints
// nothing (a plain "no").
type exitError struct {
	code int
	err  error
}

func (e *exitError) Error() string {
	if e.err == nil {
		return fmt.Sprintf("exit %d", e.code)
	}
	return e.err.Error()
}

func (e *exitError) Unwrap() error { return e.err }

// negative ends a command with exit code 1 and an optional message.
func negative(format string, args ...any) error {
	if format == "" {
		return &exitError{code: exitNegative}
	}
	return &exitError{code: exitNegative, err: fmt.Errorf(format, args...)}
}

// envPrefix is the prefix of the environment variables that stand in for
// flags: --postgres-url is FINALIZER_POSTGRES_URL.
const envPrefix = "FINALIZER_"

// envName returns the environment variable of a flag.
func envName(flag string) string {
	return envPrefix + strings.ToUpper(strings.ReplaceAll(flag, "-", "_"))
}

// applyEnv sets every flag that the command line did not set from its
// FINALIZER_* environment variable.
func applyEnv(fs *pflag.FlagSet) error {
	var err error
	fs.VisitAll(func(f *pflag.Flag) {
		if f.Changed || err != nil || f.Name == "help" {
			return
		}
		if v, ok := os.LookupEnv(envName(f.Name)); ok {
			if e := fs.Set(f.Name, v); e != nil {
				err = fmt.Errorf("%s=%q: %w", envName(f.Name), v, e)
			}
		}
	})
	return err
}

// run is the whole program: it parses args, runs the command and maps its
// error to an exit code, printing one line for it on stderr.
func run(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	root := newRoot(stdin, stdout, stderr)
	root.SetArgs(args)
	root.SetOut(stdout)
	root.SetErr(stderr)
	err := root.ExecuteContext(ctx)
	if err == nil {
		return exitOK
	}
	var ee *exitError
	if errors.As(err, &ee) {
		if ee.err != nil {
			fmt.Fprintf(stderr, "finalizer: %s\n", errLine(ee.err))
		}
		return ee.code
	}
	fmt.Fprintf(stderr, "finalizer: %s\n", errLine(err))
	return exitUsage
}

// errLine is err as the one line run prints on stderr: folded (oneLine),
// then escaped as the commands print the database's free text (field): an
// error names a table or feeder the operator typed, or one read from the
// database (a "did you mean", the tables with a verdict), written by hand
// in SQL with an escape sequence in it.
func errLine(err error) string {
	return field(oneLine(err))
}

// oneLine folds a multi-line error (pgx lists every address it tried) into
// the one line a scheduler's log shows.
func oneLine(err error) string {
	return strings.Join(strings.Fields(strings.ReplaceAll(err.Error(), "\n", " ; ")), " ")
}

func newRoot(stdin io.Reader, stdout, stderr io.Writer) *cobra.Command {
	root := &cobra.Command{
		Use:   "finalizer",
		Short: "Tells downstream jobs when a period of streaming data is complete",
		Long: `finalizer tracks runs of Spark Structured Streaming queries through their listener
events on NATS and advances, once per period, a forward-only verdict per table in a
PostgreSQL control table: every period [start, end) with end <= finalized_until is complete.

Every flag can also be set with an environment variable: --postgres-url is
FINALIZER_POSTGRES_URL, --nats-url is FINALIZER_NATS_URL, and so on.

Exit codes: 0 success (final, done), 1 not final or timed out, 2 usage or connection error, 3 unknown table (is-final and wait: no verdict and nothing that could write one, a typo?).`,
		Version:       readBuildVersion().String(),
		SilenceUsage:  true,
		SilenceErrors: true,
		PersistentPreRunE: func(cmd *cobra.Command, _ []string) error {
			if err := applyEnv(cmd.Flags()); err != nil {
				return &exitError{code: exitUsage, err: err}
			}
			return nil
		},
	}
	root.SetVersionTemplate("finalizer {{.Version}}\n")
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error {
		return &exitError{code: exitUsage, err: err}
	})
	root.AddCommand(
		newServeCmd(stdout, stderr),
		newTrackCmd(stdout),
		newJoinCmd(stdout),
		newStatusCmd(stdout),
		newIsFinalCmd(stdout),
		newWaitCmd(stdout),
		newRewindCmd(stdout),
		newAcknowledgeCmd(stdout),
		newAuditCmd(stdout),
		newFeedersCmd(stdout),
		newPublishCmd(stdin, stdout, stderr),
		newBenchCmd(stdout, stderr),
		newVersionCmd(stdout),
	)
	root.CompletionOptions.DisableDefaultCmd = true
	return root
}

// usageError wraps err as a usage or connection error (exit code 2).
func usageError(err error) error {
	if err == nil {
		return nil
	}
	var ee *exitError
	if errors.As(err, &ee) {
		return err
	}
	return &exitError{code: exitUsage, err: err}
}

// required reports missing required string flags as a usage error.
func required(pairs ...string) error {
	var missing []string
	for i := 0; i+1 < len(pairs); i += 2 {
		if pairs[i+1] == "" {
			missing = append(missing, "--"+pairs[i])
		}
	}
	if len(missing) > 0 {
		return &exitError{code: exitUsage, err: fmt.Errorf("missing %s", strings.Join(missing, ", "))}
	}
	return nil
}
