package listener

import (
	"context"
	"errors"
	"fmt"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/finalizer-dev/finalizer/progress"
)

// RunName returns the query name of a run, read from its retained progress
// or started event, for a run first seen through an idle or terminated
// event (which carry no name). It returns "" and no error when nothing with
// a name is retained, JetStream is not there, or the lookup fails (logged
// at debug level); a later event of the run carries the name. Without a
// deadline in ctx, Options.RequestTimeout applies.
func (l *Listener) RunName(ctx context.Context, queryID, runID string) (string, error) {
	ctx, cancel := l.withTimeout(ctx, l.opts.RequestTimeout)
	defer cancel()
	return l.retainedName(ctx, queryID, runID, true, true), nil
}

// RetainedRun reads what the stream retains of one run, as Retained does
// for every run: Terminated when its termination is retained, Stored when
// the stream stored the newest of its started, progress, idle and
// terminated events (the server's clock). found is false when nothing of
// the run is retained, or without JetStream. A registry reads it before it
// starts a tracker into a rewound table (finalizer.RunStater): a run that
// cannot post a progress newer than the rewind applies none from before it.
// Without a deadline in ctx, Options.RequestTimeout applies.
func (l *Listener) RetainedRun(ctx context.Context, queryID, runID string) (run Run, found bool, err error) {
	ctx, cancel := l.withTimeout(ctx, l.opts.RequestTimeout)
	defer cancel()
	st, err := l.eventStream(ctx)
	if errors.Is(err, ErrNoJetStream) || errors.Is(err, ErrNoStream) {
		return Run{}, false, nil
	}
	if err != nil {
		return Run{}, false, fmt.Errorf("retained run %s: %w", runID, err)
	}
	run = Run{QueryID: queryID, RunID: runID}
	for _, kind := range eventKinds {
		subj := l.subject(kind.String(), queryID, runID)
		msg, err := st.GetLastMsgForSubject(ctx, subj)
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			continue
		}
		if err != nil {
			return Run{}, false, fmt.Errorf("retained run %s: read %s: %w", runID, subj, err)
		}
		found = true
		if kind == progress.KindTerminated {
			run.Terminated, run.Kind = true, kind
		}
		if msg.Time.After(run.Stored) {
			run.Stored = msg.Time.UTC()
		}
		run.Seq = max(run.Seq, msg.Sequence)
	}
	return run, found, nil
}
