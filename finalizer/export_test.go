package finalizer

import (
	"context"
	"time"
)

// StartTracker starts the worker of cfg. The worker stops when the run
// terminates, on Stop (after applying what is pending) or when ctx is
// cancelled (abandoning an advance in flight). Wait for it with Done or Join.
func StartTracker(ctx context.Context, cfg TrackerConfig) *Tracker {
	t := newTracker(cfg)
	p := newPool(1)
	p.keep = 0 // no worker waits on a pool that nobody closes
	t.begin(ctx, p, nil)
	go func() { // the end of ctx reaches the tracker as a step
		select {
		case <-ctx.Done():
			t.schedule()
		case <-t.done.wait():
		}
	}()
	return t
}

// Steps returns how many steps of t were submitted to its pool (a pool
// worker's wake-up each); t must have been started by StartTracker, which
// gives it a pool of its own.
func (t *Tracker) Steps() int64 { return t.pool.submitted() }

// Settled reports whether t has no step queued or running.
func (t *Tracker) Settled() bool { return t.state.Load() == stateIdle }

// Done is closed when the worker has exited.
func (t *Tracker) Done() <-chan struct{} { return t.done.wait() }

// Join waits until the worker has exited or ctx is done. It reports whether
// the worker finished; whether its last advance succeeded is LastError.
func (t *Tracker) Join(ctx context.Context) bool {
	select {
	case <-t.done.wait():
		return true
	case <-ctx.Done():
		return false
	}
}

// SetDiscoveryLimits sets how many discovered runs may wait for a
// decision, and the first delay of a rescan for the runs dropped.
func (r *Registry) SetDiscoveryLimits(maxPending int, rescanEvery time.Duration) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.maxPending, r.rescanEvery = maxPending, rescanEvery
}

// SilentRuns returns how many runs the registry notes silent since their
// table's rewind (noteSilent).
func (r *Registry) SilentRuns() int {
	if sl := r.silent.Load(); sl != nil {
		return len(*sl)
	}
	return 0
}

// Sweep runs one sweep of the janitor now.
func (r *Registry) Sweep() { r.sweep() }

// StreamMarkOf is what the registry keeps of table's latest rewind heard
// live (its entry in r.marks): the rewind as kept, its stored
// rewound_at, whether it was heard live, and the stream's last sequence
// read for it (read false while none).
func (r *Registry) StreamMarkOf(table string) (rewind, stored time.Time, last uint64, heard, read bool) {
	m := r.marks.Load()
	if m == nil {
		return
	}
	x := (*m)[table]
	return x.rewind, x.stored, x.seq, x.heard, x.read
}
