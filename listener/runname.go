package listener

import "context"

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
