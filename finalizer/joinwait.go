package finalizer

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/cenkalti/backoff/v4"
	"go.uber.org/zap"

	"github.com/finalizer-dev/finalizer/control"
)

// A query is a feeder of a table from the moment it is mapped to it (ADR
// 0015): its join, at its run's start (launch), or earlier, under a
// restart's hold (prejoin, joinEarly), is what makes a first batch still
// running hold the table against the table's other feeders. A join that
// did not succeed for a reason a retry may change (another session holds
// the table locked, control.ErrBusy; the database unavailable; a try that
// timed out) leaves the table pending: its trackers hold their advances
// (Tracker.write, errJoinPending) and a later start into it waits behind,
// while the join is tried again on a goroutine of the registry's until it
// succeeds, the registry closes or its run is stopped. Only a refusal of
// the join itself (joinRetryable) lets the run be tracked without it.

// joinWait is one feeder join a table waits for (Registry.joining).
type joinWait struct {
	req   Request // QueryID, QueryName; RunID "" for an early join
	since time.Time
	err   error         // the last try's; guarded by Registry.mu
	done  chan struct{} // closed once it ended (joined, or given up)
}

// JoinWait is a table waiting for a feeder join that did not succeed and
// is tried again: the table does not move before it joined (Registry.JoinWaits).
type JoinWait struct {
	Table     string    `json:"table"`
	QueryID   string    `json:"query_id"`
	QueryName string    `json:"query_name,omitempty"`
	RunID     string    `json:"run_id,omitempty"` // "" for a join made before its run's start (a restart's)
	Since     time.Time `json:"since"`
	LastError string    `json:"last_error,omitempty"`
}

// JoinWaits returns the feeder joins the tables wait for, by table, then
// in the order they began: an operator's answer to why a table does not
// move (finalizer status, the metrics' finalizer_join_waiting_tables).
func (r *Registry) JoinWaits() []JoinWait {
	if r.waitingJoins.Load() == 0 {
		return nil
	}
	r.mu.RLock()
	defer r.mu.RUnlock()
	var out []JoinWait
	for table, ws := range r.joining {
		for _, w := range ws {
			jw := JoinWait{Table: table, QueryID: w.req.QueryID, QueryName: w.req.QueryName, RunID: w.req.RunID, Since: w.since}
			if w.err != nil {
				jw.LastError = w.err.Error()
			}
			out = append(out, jw)
		}
	}
	slices.SortStableFunc(out, func(a, b JoinWait) int {
		return cmp.Or(cmp.Compare(a.Table, b.Table), a.Since.Compare(b.Since))
	})
	return out
}

// joinPending reports whether table waits for a feeder join that did not
// succeed (joinLater, joinEarlyLater). A tracker of the table advances
// only once it joined: the table's other feeders' advances would
// otherwise move it on their word past data the new feeder was writing
// since its start. Lock-free while no join waits (the common case: every
// advance asks).
func (r *Registry) joinPending(table string) bool {
	if r.waitingJoins.Load() == 0 {
		return false
	}
	r.mu.RLock()
	defer r.mu.RUnlock()
	return len(r.joining[table]) > 0
}

// joinRetryable reports whether a join that failed with err is to be
// tried again before its run is tracked: any failure but a refusal of the
// join itself (control.Refused: an invalid table or query id, a name
// PostgreSQL cannot store), which no retry changes. An error not known as
// a refusal holds the table (late, never wrong), said at WARN with the
// error until it joins.
func joinRetryable(err error) bool {
	return err != nil && !control.Refused(err)
}

// queueJoin adds a wait for req's join (failed is the error of its try,
// nil when it was not tried) to its table's, the table pending from now
// on, and returns it with the end of the wait before it (nil when none).
// Once the registry is closed it marks the table pending for good
// (markJoinPending) and reports false; otherwise the caller runs the wait
// on a goroutine counted in r.wg and ends it with unqueueJoin.
func (r *Registry) queueJoin(req Request, failed error) (w *joinWait, prev <-chan struct{}, ok bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		r.markJoinPending(req, failed)
		return nil, nil, false
	}
	w = r.addJoinWait(req, failed)
	if ws := r.joining[req.Table]; len(ws) > 1 {
		prev = ws[len(ws)-2].done
	}
	r.wg.Add(1)
	return w, prev, true
}

// addJoinWait appends a wait for req's join to its table's. r.mu held.
func (r *Registry) addJoinWait(req Request, failed error) *joinWait {
	w := &joinWait{req: req, since: r.cfg.Clock.Now(), err: failed, done: make(chan struct{})}
	ws := r.joining[req.Table]
	if len(ws) == 0 {
		r.waitingJoins.Add(1)
	}
	r.joining[req.Table] = append(ws, w)
	r.cfg.Metrics.JoinWaitingTables.Set(float64(len(r.joining)))
	return w
}

// markJoinPending keeps req's table pending for the rest of the
// registry's life: a join that did not succeed at shutdown. The trackers
// the shutdown stops must not send the advances held for it (a lock that
// goes meanwhile, the database back, would let them move the table past
// the new feeder's data); the next start's recovery joins it first. r.mu
// held.
func (r *Registry) markJoinPending(req Request, failed error) {
	w := r.addJoinWait(req, failed)
	close(w.done)
}

// unqueueJoin ends w, a wait of table's: the table is no longer pending
// once none waits. At shutdown the table stays pending (markJoinPending's
// reason): the wait ends, its entry stays.
func (r *Registry) unqueueJoin(table string, w *joinWait) {
	r.mu.Lock()
	if !r.closed {
		ws := r.joining[table]
		if i := slices.Index(ws, w); i >= 0 {
			ws = slices.Delete(slices.Clone(ws), i, i+1)
		}
		if len(ws) == 0 {
			delete(r.joining, table)
			r.waitingJoins.Add(-1)
			r.cfg.Metrics.JoinWaitingTables.Set(float64(len(r.joining)))
		} else {
			r.joining[table] = ws
		}
	}
	r.mu.Unlock()
	close(w.done)
}

// join joins e's query to its table's feeders. It returns the error of a
// join that did not succeed and is to be tried again (joinRetryable)
// before the run is subscribed (joinLater); nil when joined, or refused
// for good (said by noteJoin).
func (r *Registry) join(ctx context.Context, e *entry) (failed error) {
	fj, ok := r.cfg.Store.(FeederJoiner)
	if !ok {
		return nil
	}
	// A query is a feeder from the moment it is mapped to the table, not
	// from its first verdict: a first batch still running, or a run held
	// by a guard, must hold the table against the other feeders.
	j, err := r.joinFeeder(ctx, fj, e.req)
	if joinRetryable(err) {
		return err
	}
	r.noteJoin(e.req, j, err)
	return nil
}

// joinLater has e's start wait, on a goroutine of the registry's, behind
// the joins its table waits for already (if any), then join (again, when
// failed, the error of the try launch made, is not nil and nothing was
// waiting) until it joined, and only then be subscribed and started. The
// table is pending from here until it joined.
func (r *Registry) joinLater(e *entry, failed error) error {
	w, prev, ok := r.queueJoin(e.req, failed)
	if !ok {
		return r.finish(e, ErrClosed)
	}
	go func() {
		defer r.wg.Done()
		// The table stays pending until the run's tracker started: the
		// next start into it, waiting behind, is tracked after it.
		defer r.unqueueJoin(e.req.Table, w)
		err := r.awaitJoin(w, e, prev, failed)
		if err := r.finish(e, err); err != nil && !errors.Is(err, ErrClosed) && r.ctx.Err() == nil {
			r.log.Error("could not track run; a rescan of the stream tries again", zap.String("table", e.req.Table),
				zap.String("query_id", e.req.QueryID), zap.String("run_id", e.req.RunID), zap.Error(err))
			r.mu.Lock()
			r.missedRun(e.req.RunID)
			r.mu.Unlock()
		}
	}()
	return nil
}

// awaitJoin waits for prev, then joins e's query until it is joined
// (retryJoin), and says what came of it (noteJoin). It fails only when the
// registry closes; a run stopped meanwhile (superseded) is started and
// stopped at once by finish, so that its stop is recorded.
func (r *Registry) awaitJoin(w *joinWait, e *entry, prev <-chan struct{}, failed error) error {
	if prev != nil {
		select {
		case <-prev:
			failed = nil // tried before the wait: again now
		case <-r.stop:
			return ErrClosed
		}
	}
	if failed == nil {
		if failed = r.join(r.stopCtx, e); failed == nil {
			return nil
		}
	}
	stopped := func() bool {
		r.mu.RLock()
		defer r.mu.RUnlock()
		return e.stopReason != ""
	}
	j, err := r.retryJoin(w, e.req, failed, stopped)
	switch {
	case errors.Is(err, ErrClosed):
		return err
	case errors.Is(err, errStoppedWhileWaiting):
		return nil
	}
	r.noteJoin(e.req, j, err)
	return nil
}

// joinEarlyLater holds j's table for j's join, made before its run's
// start (prejoin, earlyJoinLoop), which failed with failed (joinRetryable):
// the table is pending, and the join tried again on a goroutine of the
// registry's, until it joined, is refused, or the registry closes. The
// run's start, later, waits behind it and joins again (a read, for a
// feeder the table knows). Without it, the table's feeders a restart's
// recovery started moved the table on their live events before the run's
// start joined it.
func (r *Registry) joinEarlyLater(j control.FeederJoin, failed error) {
	req := Request{QueryID: j.Query, Table: j.Table, QueryName: j.Name}
	w, prev, ok := r.queueJoin(req, failed)
	if !ok {
		return
	}
	go func() {
		defer r.wg.Done()
		defer r.unqueueJoin(req.Table, w)
		if prev != nil {
			select {
			case <-prev:
				failed = nil
			case <-r.stop:
				return
			}
		}
		joined, err := r.retryJoin(w, req, failed, nil)
		if err != nil && !errors.Is(err, ErrClosed) {
			r.noteJoin(req, joined, err)
		}
	}()
}

// errStoppedWhileWaiting: the run was stopped (superseded) while its
// join was tried again.
var errStoppedWhileWaiting = errors.New("the tracker was stopped while its join to the table's feeders waited")

// maxJoinRetryDelay bounds the wait between two tries of a join that did
// not succeed: from the tracker's retry delay, doubling.
const maxJoinRetryDelay = 30 * time.Second

// retryJoin tries req's join (failed: the error of the try just made; nil
// to try at once) from the tracker's retry delay doubling to
// maxJoinRetryDelay, each try bounded by the advance timeout, until it is
// joined, refused for good (joinRetryable: its error is returned), the
// registry closes (ErrClosed) or stopped reports true
// (errStoppedWhileWaiting). Why the table waits is logged at WARN
// (rate-limited) and recorded in w for JoinWaits; the join at INFO.
func (r *Registry) retryJoin(w *joinWait, req Request, failed error, stopped func() bool) (control.Joined, error) {
	fj, _ := r.cfg.Store.(FeederJoiner)
	since := w.since
	op := func() (control.Joined, error) {
		if r.stopCtx.Err() != nil {
			return control.Joined{}, backoff.Permanent(ErrClosed)
		}
		if failed != nil {
			err := failed
			failed = nil
			return control.Joined{}, err
		}
		if stopped != nil && stopped() {
			return control.Joined{}, backoff.Permanent(errStoppedWhileWaiting)
		}
		j, err := r.joinFeeder(r.stopCtx, fj, req)
		switch {
		case err == nil:
			return j, nil
		case r.stopCtx.Err() != nil:
			return j, backoff.Permanent(ErrClosed)
		case !joinRetryable(err):
			return j, backoff.Permanent(err)
		}
		return j, err
	}
	notify := func(err error, next time.Duration) {
		r.mu.Lock()
		w.err = err
		r.mu.Unlock()
		r.warnJoinWait(req, err, r.cfg.Clock.Now().Sub(since), next)
	}
	b := backoff.NewExponentialBackOff(
		backoff.WithInitialInterval(cmp.Or(r.cfg.Tracker.RetryDelay, DefaultRetryDelay)),
		backoff.WithMultiplier(2),
		backoff.WithRandomizationFactor(0),
		backoff.WithMaxInterval(maxJoinRetryDelay),
		backoff.WithMaxElapsedTime(0),
		backoff.WithClockProvider(r.cfg.Clock),
	)
	j, err := backoff.RetryNotifyWithTimerAndData(op, backoff.WithContext(b, r.stopCtx), notify, r.cfg.Clock.NewTimer())
	switch {
	case err == nil:
		if ok, n := r.refuseLog.Allow("join-wait-done"); ok {
			r.log.Info("the query joined the table's feeders after waiting; the table moves again, and its run is tracked",
				zap.String("table", req.Table), zap.String("query_id", req.QueryID), zap.String("run_id", req.RunID),
				zap.Duration("waited", r.cfg.Clock.Now().Sub(since).Round(time.Millisecond)), zap.Int("suppressed", n))
		}
	case r.stopCtx.Err() != nil && !errors.Is(err, errStoppedWhileWaiting):
		return j, ErrClosed
	}
	return j, err
}

// warnJoinWait says, at WARN (rate-limited per kind), which table waits
// for which query's join, and why.
func (r *Registry) warnJoinWait(req Request, err error, waiting, next time.Duration) {
	who := "this run waits to join the table's feeders before it is tracked"
	if req.RunID == "" {
		who = "this query (its run not started yet: a restart's recovery) waits to join the table's feeders"
	}
	kind, msg := "join-wait/failed", fmt.Sprintf("could not join the query to the table's feeders in the control database (see error); %s, and the table does not move meanwhile (its other feeders' advances wait for the join, retried until it joins; runs of other tables are tracked as usual)", who)
	if errors.Is(err, control.ErrBusy) {
		kind, msg = "join-wait/busy", fmt.Sprintf("another session holds the table locked in the control database (an open transaction: a reader's SELECT ... FOR SHARE, an operator's UPDATE); %s, and the table does not move meanwhile (its other feeders' advances wait for the join; runs of other tables are tracked as usual); find the session in pg_stat_activity (state 'idle in transaction') and end it", who)
	}
	if ok, n := r.refuseLog.Allow(kind); ok {
		r.log.Warn(msg, zap.String("table", req.Table), zap.String("query_id", req.QueryID), zap.String("query_name", req.QueryName),
			zap.String("run_id", req.RunID), zap.Duration("waiting", waiting.Round(time.Second)), zap.Duration("retry_in", next),
			zap.Int("suppressed", n), zap.Error(err))
	}
}
