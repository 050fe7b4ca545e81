package finalizer

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/cenkalti/backoff/v4"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

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
// while the join is tried again (joinLoop) until it succeeds, the
// registry closes or its run is stopped. Only a refusal of the join
// itself (joinRetryable) lets the run be tracked without it.
//
// The waits of a table are a list, in the order they began; only its
// first is tried, the next one once it ended (the runs of a table are
// tracked in the order they were started). One goroutine of the
// registry's (joinLoop) tries the first wait of every table when it is
// due, up to maxJoinTries at once (on goroutines that end with the try,
// so that the tries of many tables ride in the group commit's groups):
// a wait costs its list entry and no goroutine, so that the database
// down while 100,000 runs start (a restart) costs what their entries do.

// joinWait is one feeder join a table waits for (Registry.joining). Its
// fields but req, e and since are guarded by Registry.mu.
type joinWait struct {
	req   Request // QueryID, QueryName; RunID "" for an early join
	e     *entry  // the start that waits; nil for an early join
	since time.Time
	err   error // the last try's
	// next is when the wait is tried next, once it is its table's first
	// (zero: at once); b spaces its tries once one failed.
	next   time.Time
	b      *backoff.ExponentialBackOff
	trying bool // a try is in flight
	ended  bool // joined, refused, or its run stopped: out of the list
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
// move (finalizer status, /v1/runs). It sorts the tables' names; a
// caller that looks the waits up by table takes JoinWaitsByTable or
// JoinWaitsOf instead, which sort nothing.
func (r *Registry) JoinWaits() []JoinWait {
	by := r.JoinWaitsByTable()
	if len(by) == 0 {
		return nil
	}
	tables := make([]string, 0, len(by))
	n := 0
	for table, ws := range by {
		tables = append(tables, table)
		n += len(ws)
	}
	slices.Sort(tables)
	out := make([]JoinWait, 0, n)
	for _, table := range tables {
		out = append(out, by[table]...)
	}
	return out
}

// JoinWaitsByTable returns the feeder joins each table waits for, in the
// order they began (the order joinLoop tries them in), nil while none
// waits: what a listing of tables attaches to each row (/v1/tables, the
// status page). Lock-free while no join waits.
func (r *Registry) JoinWaitsByTable() map[string][]JoinWait {
	if r.waitingJoins.Load() == 0 {
		return nil
	}
	r.mu.RLock()
	defer r.mu.RUnlock()
	n := 0
	for _, ws := range r.joining {
		n += len(ws)
	}
	all := make([]JoinWait, 0, n) // one array for every table's
	out := make(map[string][]JoinWait, len(r.joining))
	for table, ws := range r.joining {
		i := len(all)
		all = appendJoinWaits(all, table, ws)
		out[table] = all[i:len(all):len(all)]
	}
	return out
}

// JoinWaitsOf returns the feeder joins table waits for, in the order they
// began; nil when it waits for none. Lock-free while no join waits.
func (r *Registry) JoinWaitsOf(table string) []JoinWait {
	if r.waitingJoins.Load() == 0 {
		return nil
	}
	r.mu.RLock()
	defer r.mu.RUnlock()
	return joinWaitsOf(table, r.joining[table])
}

// joinWaitsOf copies ws, table's waits, for a caller. r.mu held.
func joinWaitsOf(table string, ws []*joinWait) []JoinWait {
	if len(ws) == 0 {
		return nil
	}
	return appendJoinWaits(make([]JoinWait, 0, len(ws)), table, ws)
}

// appendJoinWaits appends the copies of ws, table's waits, to out. r.mu
// held.
func appendJoinWaits(out []JoinWait, table string, ws []*joinWait) []JoinWait {
	for _, w := range ws {
		jw := JoinWait{Table: table, QueryID: w.req.QueryID, QueryName: w.req.QueryName, RunID: w.req.RunID, Since: w.since}
		if w.err != nil {
			jw.LastError = w.err.Error()
		}
		out = append(out, jw)
	}
	return out
}

// HeldBy says, in words, why a table waits for w: "held until query Q
// (run R) joins its feeders (waiting since T; retried: ERR)". The CLI's
// status, the HTTP API's held_by and the status page all say it so.
func (w JoinWait) HeldBy() string {
	who := "query " + shortQuery(w.QueryID)
	if w.QueryName != "" {
		who = "query " + w.QueryName
	}
	if w.RunID != "" {
		who += " (run " + shortID(w.RunID) + ")"
	}
	s := fmt.Sprintf("held until %s joins its feeders (waiting since %s; retried", who, w.Since.UTC().Format(time.RFC3339))
	if w.LastError != "" {
		s += ": " + w.LastError
	}
	return s + ")"
}

// shortID is the first 8 characters of an id, as operators read run ids.
func shortID(id string) string {
	if len(id) > 8 {
		return id[:8]
	}
	return id
}

// shortQuery is a query id as HeldBy prints it: a UUID shortened like a
// run id, any other id (a name-like one) whole.
func shortQuery(id string) string {
	if len(id) == 36 && id[8] == '-' && id[13] == '-' && id[18] == '-' && id[23] == '-' {
		return shortID(id)
	}
	return id
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

// queueJoin adds a wait for req's join (e: the start that waits, nil for
// an early join; failed: the error of its try, nil when it was not tried)
// to its table's, the table pending from now on, for joinLoop. Once the
// registry is closed it marks the table pending for good (markJoinPending)
// and reports false.
func (r *Registry) queueJoin(req Request, e *entry, failed error) bool {
	r.mu.Lock()
	if r.closed {
		r.markJoinPending(req, failed)
		r.mu.Unlock()
		return false
	}
	w := r.addJoinWait(req, failed)
	w.e = e
	var next time.Duration
	if failed != nil && len(r.joining[req.Table]) == 1 {
		// Its table's first, tried already: the next try after the
		// first delay. Behind another, it is tried once it is the
		// first, at once.
		w.b = r.joinBackOff()
		next = w.b.NextBackOff()
		w.next = w.since.Add(next)
	}
	r.kickJoins()
	r.mu.Unlock()
	if failed != nil {
		r.warnJoinWait(req, failed, 0, next)
	}
	return true
}

// addJoinWait appends a wait for req's join to its table's. r.mu held.
func (r *Registry) addJoinWait(req Request, failed error) *joinWait {
	w := &joinWait{req: req, since: r.cfg.Clock.Now(), err: failed}
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
	r.addJoinWait(req, failed).ended = true
}

// endJoinWait takes w, the first wait of its table, out of the list: the
// table is no longer pending once none waits, else the next wait is tried
// at once. At shutdown the table stays pending (markJoinPending's reason).
// r.mu held.
func (r *Registry) endJoinWait(w *joinWait) {
	w.ended = true
	if r.closed {
		return
	}
	table := w.req.Table
	ws := r.joining[table]
	if i := slices.Index(ws, w); i >= 0 {
		ws = slices.Delete(slices.Clone(ws), i, i+1)
	}
	if len(ws) == 0 {
		delete(r.joining, table)
		r.waitingJoins.Add(-1)
		r.cfg.Metrics.JoinWaitingTables.Set(float64(len(r.joining)))
		// The table's trackers holding an advance for its joins go on
		// now (afterJoins), off r.mu.
		if held := r.joinHolds[table]; len(held) > 0 {
			delete(r.joinHolds, table)
			r.wg.Add(1)
			go func() {
				defer r.wg.Done()
				held.call()
			}()
		}
		return
	}
	r.joining[table] = ws
	ws[0].next, ws[0].err = time.Time{}, nil // tried before its wait: again now
	r.kickJoins()
}

// afterJoins calls fn once table waits for no feeder's join (endJoinWait)
// or the registry's trackers are stopped (Close), at once when it waits
// for none: a tracker holding its advance for the joins (errJoinPending)
// goes on as soon as they ended, not at its retry's next delay. Once the
// registry is closed it never calls fn (the tables stay pending: the
// holder's own delay ends its hold). stop forgets fn and reports whether
// fn was still waiting.
func (r *Registry) afterJoins(table string, fn func()) (stop func() bool) {
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		return func() bool { return false }
	}
	if len(r.joining[table]) == 0 {
		r.mu.Unlock()
		fn()
		return func() bool { return false }
	}
	if r.joinHolds == nil {
		r.joinHolds = map[string]waiters{}
	}
	held := r.joinHolds[table]
	key := held.add(fn)
	r.joinHolds[table] = held
	r.mu.Unlock()
	return func() bool {
		r.mu.Lock()
		defer r.mu.Unlock()
		held := r.joinHolds[table]
		ok := held.remove(key)
		if ok && len(held) == 0 {
			delete(r.joinHolds, table)
		}
		return ok
	}
}

// takeJoinHolds takes every afterJoins callback still waiting, by table,
// for Close to call (off r.mu). r.mu held.
func (r *Registry) takeJoinHolds() map[string]waiters {
	held := r.joinHolds
	r.joinHolds = nil
	return held
}

// kickJoins wakes joinLoop. Never blocks.
func (r *Registry) kickJoins() {
	select {
	case r.joinKick <- struct{}{}:
	default:
	}
}

// joinBackOff spaces the tries of a join that did not succeed: from the
// tracker's retry delay, doubling to maxJoinRetryDelay, for ever.
func (r *Registry) joinBackOff() *backoff.ExponentialBackOff {
	return backoff.NewExponentialBackOff(
		backoff.WithInitialInterval(cmp.Or(r.cfg.Tracker.RetryDelay, DefaultRetryDelay)),
		backoff.WithMultiplier(2),
		backoff.WithRandomizationFactor(0),
		backoff.WithMaxInterval(maxJoinRetryDelay),
		backoff.WithMaxElapsedTime(0),
		backoff.WithClockProvider(r.cfg.Clock),
	)
}

// maxJoinTries is how many joins joinLoop tries at once: enough for a
// restart's waits to fill the group commit's groups (ADR 0023).
const maxJoinTries = 2 * DefaultMaxTrackBatch

// maxJoinRetryDelay bounds the wait between two tries of a join that did
// not succeed: from the tracker's retry delay, doubling.
const maxJoinRetryDelay = 30 * time.Second

// joinLoop tries the first wait of every table when it is due (joinTry),
// until the registry closes; then it ends the starts still waiting
// (ErrClosed: not tracked; their tables stay pending).
func (r *Registry) joinLoop() {
	defer r.wg.Done()
	sem := make(chan struct{}, maxJoinTries)
	var (
		tries sync.WaitGroup
		stop  func() bool // the wake-up armed for the next due wait
	)
	defer func() {
		if stop != nil {
			stop()
		}
		tries.Wait()
		r.mu.Lock()
		var left []*entry
		for _, ws := range r.joining {
			for _, w := range ws {
				if w.e != nil && !w.ended {
					w.ended = true
					left = append(left, w.e)
				}
			}
		}
		r.mu.Unlock()
		for _, e := range left {
			_ = r.finish(e, ErrClosed)
		}
	}()
	for {
		select {
		case <-r.joinKick:
		case <-r.stop:
			return
		}
		if stop != nil {
			stop()
			stop = nil
		}
		now := r.cfg.Clock.Now()
		var (
			due  []*joinWait
			wake time.Time
		)
		r.mu.Lock()
		for _, ws := range r.joining {
			w := ws[0]
			switch {
			case w.ended || w.trying:
			case !w.next.After(now):
				w.trying = true
				due = append(due, w)
			case wake.IsZero() || w.next.Before(wake):
				wake = w.next
			}
		}
		r.mu.Unlock()
		for _, w := range due {
			select {
			case sem <- struct{}{}:
			case <-r.stop:
				return
			}
			tries.Add(1)
			go func() {
				defer tries.Done()
				defer func() { <-sem }()
				r.joinTry(w)
			}()
		}
		if !wake.IsZero() {
			stop = r.cfg.Clock.AfterFunc(wake.Sub(now), r.kickJoins)
		}
	}
}

// joinTry tries w's join once and settles what came of it: joined, or
// refused for good (said by noteJoin), or its run stopped meanwhile
// (superseded: it is started and stopped at once by finish, so that its
// stop is recorded): the run is tracked and the wait ends; failed again:
// the next try after the back-off, said at WARN (rate-limited).
func (r *Registry) joinTry(w *joinWait) {
	r.mu.RLock()
	stopped := w.e != nil && w.e.stopReason != ""
	r.mu.RUnlock()
	var (
		j   control.Joined
		err error
	)
	if !stopped {
		fj, _ := r.cfg.Store.(FeederJoiner)
		j, err = r.joinFeeder(r.stopCtx, fj, w.req)
	}
	now := r.cfg.Clock.Now()
	r.mu.Lock()
	w.trying = false
	if r.closed {
		r.mu.Unlock()
		return // joinLoop ends the start
	}
	if !stopped && joinRetryable(err) {
		w.err = err
		if w.b == nil {
			w.b = r.joinBackOff()
		}
		next := w.b.NextBackOff()
		w.next = now.Add(next)
		r.kickJoins()
		r.mu.Unlock()
		r.warnJoinWait(w.req, err, now.Sub(w.since), next)
		return
	}
	w.ended = true
	e, retried := w.e, w.b != nil
	r.mu.Unlock()
	switch {
	case err == nil && !stopped && retried:
		if ok, n := r.refuseLog.Allow(zapcore.InfoLevel, "join-wait-done"); ok {
			r.log.Info("the query joined the table's feeders after waiting; the table moves again, and its run is tracked",
				zap.String("table", w.req.Table), zap.String("query_id", w.req.QueryID), zap.String("run_id", w.req.RunID),
				zap.Duration("waited", now.Sub(w.since).Round(time.Millisecond)), zap.Int("suppressed", n))
		}
	case err != nil:
		r.noteJoin(w.req, j, err, nil)
	}
	// The table stays pending until the run's tracker started: the next
	// start into it, waiting behind, is tracked after it.
	if e != nil {
		if err := r.finish(e, nil); err != nil && !errors.Is(err, ErrClosed) && r.ctx.Err() == nil {
			r.log.Error("could not track run; a rescan of the stream tries again", zap.String("table", e.req.Table),
				zap.String("query_id", e.req.QueryID), zap.String("run_id", e.req.RunID), zap.Error(err))
			r.mu.Lock()
			r.missedRun(e.req.RunID)
			r.mu.Unlock()
		}
	}
	r.mu.Lock()
	r.endJoinWait(w)
	r.mu.Unlock()
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
	r.noteJoin(e.req, j, err, e)
	return nil
}

// joinLater has e's start wait behind the joins its table waits for
// already (if any), then join (again, when failed, the error of the try
// launch made, is not nil) until it joined, and only then be subscribed
// and started (joinLoop). The table is pending from here until it
// joined.
func (r *Registry) joinLater(e *entry, failed error) error {
	if !r.queueJoin(e.req, e, failed) {
		return r.finish(e, ErrClosed)
	}
	return nil
}

// joinEarlyLater holds j's table for j's join, made before its run's
// start (prejoin, earlyJoinLoop), which failed with failed (joinRetryable):
// the table is pending, and the join tried again (joinLoop) until it
// joined, is refused, or the registry closes. The run's start, later,
// waits behind it and joins again (a read, for a feeder the table knows).
// Without it, the table's feeders a restart's recovery started moved the
// table on their live events before the run's start joined it.
func (r *Registry) joinEarlyLater(j control.FeederJoin, failed error) {
	r.queueJoin(Request{QueryID: j.Query, Table: j.Table, QueryName: j.Name}, nil, failed)
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
	if ok, n := r.refuseLog.Allow(zapcore.WarnLevel, kind); ok {
		r.log.Warn(msg, zap.String("table", req.Table), zap.String("query_id", req.QueryID), zap.String("query_name", req.QueryName),
			zap.String("run_id", req.RunID), zap.Duration("waiting", waiting.Round(time.Second)), zap.Duration("retry_in", next),
			zap.Int("suppressed", n), zap.Error(err))
	}
}

// nameFeeder queues req's query to be joined to its table's feeders
// again, with the name its tracker learnt from its progress (req, an
// explicit track's, names none). The tracker's advances carry the name,
// but a solo table's advance writes only the table's row (the sole
// statement): the feeder's row, added by the track's join without a
// name, showed none in finalizer status and feeders list until the table
// was shared. The join writes the name into a row that has none and is a
// read otherwise (a first verdict's advance wrote it).
//
// It only queues: one goroutine, nameLoop, joins what is queued in
// groups (JoinFeeders), so that the first verdicts of 100,000 explicitly
// tracked runs cost a few hundred statements and no goroutine each (a
// goroutine per call, each waiting on the joins' group commit, was up to
// 100,000 stacks at once). A failure is left to the next start's join,
// at debug level.
func (r *Registry) nameFeeder(req Request, name string) {
	if _, ok := r.cfg.Store.(FeederJoiner); !ok {
		return
	}
	r.namesMu.Lock()
	r.names = append(r.names, control.FeederJoin{Table: req.Table, Query: req.QueryID, Name: name})
	r.namesMu.Unlock()
	select {
	case r.nameKick <- struct{}{}:
	default:
	}
}

// nameLoop joins the feeders queued by nameFeeder, in groups of at most
// MaxTrackBatch (one when the store cannot batch), until the registry
// stops; what is queued then is left to the next start's joins.
func (r *Registry) nameLoop() {
	defer r.wg.Done()
	fj, _ := r.cfg.Store.(FeederJoiner)
	bj, _ := r.cfg.Store.(BatchFeederJoiner)
	max := max(r.cfg.MaxTrackBatch, 1)
	timeout := cmp.Or(r.cfg.Tracker.AdvanceTimeout, DefaultAdvanceTimeout)
	for {
		select {
		case <-r.nameKick:
		case <-r.stop:
			return
		}
		r.namesMu.Lock()
		js := r.names
		r.names = nil
		r.namesMu.Unlock()
		for len(js) > 0 {
			n := min(len(js), max)
			if bj == nil {
				n = 1
			}
			group := js[:n]
			js = js[n:]
			ctx, cancel := context.WithTimeout(r.stopCtx, timeout)
			var errs []error
			if bj != nil {
				for _, res := range bj.JoinFeeders(ctx, group) {
					errs = append(errs, res.Err)
				}
			} else {
				_, err := fj.JoinFeeder(ctx, group[0].Table, group[0].Query, group[0].Name)
				errs = append(errs, err)
			}
			cancel()
			for i, err := range errs {
				if err != nil {
					r.log.Debug("could not give the feeder's row the query's name its progress gave; the next start's join does",
						zap.String("table", group[i].Table), zap.String("query_id", group[i].Query), zap.String("query_name", group[i].Name), zap.Error(err))
				}
			}
			select {
			case <-r.stop:
				return
			default:
			}
		}
	}
}
