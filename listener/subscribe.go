package listener

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/finalizer-dev/finalizer/internal/mapcap"
	"github.com/finalizer-dev/finalizer/progress"
)

// subscription is what every kind of subscription of a Listener holds:
// the Listener, the NATS subscriptions it made (none for a run or discovery,
// which the event subscription serves, ADR 0009), and a once-only
// unsubscribe.
type subscription struct {
	l    *Listener
	subs []*nats.Subscription
	once sync.Once
	err  error
}

// RunSubscription delivers one run's events into its Mailbox (Subscribe).
type RunSubscription struct {
	subscription
	queryID, runID string
	box            *Mailbox
	// self backs the router's list of the run's subscriptions while s is
	// its only one (every run tracked into one table): no slice of its
	// own per run (issue 12). Lists are copied on every change, so self
	// is only read once routed.
	self [1]*RunSubscription
}

// DiscoverySubscription hands the runs that nobody tracks to a callback
// (Discover).
type DiscoverySubscription struct {
	subscription
	known func(runID string) bool
	found func(Run)
	// rescan is set by Rescan and cleared by the maintenance goroutine
	// as it starts the rescan it asked for.
	rescan atomic.Bool
}

// APISubscription answers requests to the service (ServeAPI,
// ServeRetire).
type APISubscription struct {
	subscription
}

// Unsubscribe ends the run's subscription: no message is delivered to its
// mailbox after it returns, apart from one whose delivery is already
// running. It is safe to call more than once and after Close (then it
// returns nil).
func (s *RunSubscription) Unsubscribe() error {
	return s.unsubscribe(func() {
		s.l.mu.Lock()
		delete(s.l.runs, s)
		delete(s.l.retry, s)
		delete(s.l.held, s)
		s.l.mu.Unlock()
		s.l.unrouteRun(s)
	})
}

// Unsubscribe ends discovery: no run is found after it returns, apart from
// one whose callback is already running. It is safe to call more than once
// and after Close (then it returns nil).
func (s *DiscoverySubscription) Unsubscribe() error {
	return s.unsubscribe(func() {
		s.l.mu.Lock()
		delete(s.l.discover, s)
		s.l.mu.Unlock()
		s.l.unrouteDiscovery(s)
	})
}

// Unsubscribe stops answering requests: no handler starts after it
// returns (Close waits for those running). It is safe to call more than
// once and after Close (then it returns nil).
func (s *APISubscription) Unsubscribe() error {
	return s.unsubscribe(func() {
		s.l.mu.Lock()
		delete(s.l.api, s)
		s.l.mu.Unlock()
	})
}

// unsubscribe runs forget, which takes the subscription out of the
// Listener's sets and routes, then unsubscribes its NATS subscriptions,
// once; later calls return the first call's error.
func (s *subscription) unsubscribe(forget func()) error {
	s.once.Do(func() {
		forget()
		for _, sub := range s.subs {
			err := sub.Unsubscribe()
			switch {
			case err == nil,
				errors.Is(err, nats.ErrConnectionClosed),
				errors.Is(err, nats.ErrConnectionDraining),
				errors.Is(err, nats.ErrBadSubscription):
			default:
				s.err = errors.Join(s.err, fmt.Errorf("unsubscribe %s: %w", sub.Subject, err))
			}
		}
	})
	return s.err
}

// subscribe makes a core subscription with the package's pending limits.
func (l *Listener) subscribe(subject string, cb nats.MsgHandler) (*nats.Subscription, error) {
	sub, err := l.nc.Subscribe(subject, cb)
	if err != nil {
		return nil, fmt.Errorf("subscribe %s: %w", subject, err)
	}
	if err := sub.SetPendingLimits(DefaultPendingMsgs, DefaultPendingBytes); err != nil {
		_ = sub.Unsubscribe()
		return nil, fmt.Errorf("subscribe %s: pending limits: %w", subject, err)
	}
	return sub, nil
}

// register adds s to *set, one of l's sets of subscriptions, unless l is
// closed. The set is read under l.mu: ReserveRuns may make it again.
func register[S comparable](l *Listener, set *map[S]struct{}, s S) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return ErrClosed
	}
	(*set)[s] = struct{}{}
	return nil
}

// ensureRouter makes the listener's one event subscription,
// <prefix>.*.*.*, unless it exists, and flushes it so that the server has
// it before the caller reads the stream. Every run subscription and
// discovery is served by it (ADR 0009). A flush that fails while the
// connection is reconnecting is no error: the subscription is sent again
// with the reconnect, after which every run is caught up. The flush is
// bounded by Options.RequestTimeout; its context is made only when there
// is a flush to make (once, not per run: a context with a deadline under
// l.ctx costs a timer and a child registration under l.ctx's lock, which
// 1,000 subscriptions at once of a restart queued on, issue 12).
func (l *Listener) ensureRouter() error {
	l.routerMu.Lock()
	defer l.routerMu.Unlock()
	if l.router == nil {
		// A channel subscription that the connection's reads route
		// (routerQueue): no goroutine woken per message.
		subject := l.opts.Prefix + ".*.*.*"
		q := newRouterQueue(routerChanLen(l.opts))
		sub, err := l.nc.ChanSubscribe(subject, q.ch)
		if err != nil {
			return fmt.Errorf("subscribe %s: %w", subject, err)
		}
		l.mu.Lock()
		closed := l.closed
		if !closed {
			l.wg.Add(1)
		}
		l.mu.Unlock()
		if closed {
			_ = sub.Unsubscribe()
			return ErrClosed
		}
		go l.routerLoop(q)
		l.rq.Store(q)
		l.router = sub
		l.routerFlushed = false
	}
	if l.routerFlushed {
		return nil
	}
	ctx, cancel := context.WithTimeout(l.ctx, l.opts.RequestTimeout)
	defer cancel()
	if err := l.nc.FlushWithContext(ctx); err != nil {
		if l.nc.IsReconnecting() {
			return nil
		}
		return fmt.Errorf("subscribe %s: %w", l.router.Subject, err)
	}
	l.routerFlushed = true
	return nil
}

// isRouter reports whether sub is the event subscription.
func (l *Listener) isRouter(sub *nats.Subscription) bool {
	l.routerMu.Lock()
	defer l.routerMu.Unlock()
	return sub != nil && sub == l.router
}

// route is the event subscription's delivery (on the router goroutine, or
// as routeInline on the connection's read loop: routerQueue): it hands a
// message to the run subscriptions of the run named by the subject's last token, without
// parsing it, or, when the run has none, to discovery; a message of a run
// nobody tracks or discovers is dropped uncounted, as the server would
// have filtered it out of a subscription of its own.
func (l *Listener) route(m *nats.Msg) {
	runID := lastToken(m.Subject)
	l.routeMu.RLock()
	subs, disc := l.routes[runID], l.discs
	l.routeMu.RUnlock()
	if len(subs) > 0 {
		for _, s := range subs {
			s.deliver(m.Subject, m.Data)
		}
		// A run whose trackers are still subscribing is not known to
		// discovery: it hands the message over to those not subscribed yet.
		for _, d := range disc {
			if !d.known(runID) {
				d.onDiscover(m)
			}
		}
		return
	}
	for _, d := range disc {
		d.onDiscover(m)
	}
}

// ReserveRuns makes the listener's sets and routes of run subscriptions
// (and, under a hold of catch-ups, its held ones) hold n more without
// growing: a restart subscribes up to 100,000 runs at once, and growing
// the maps from what they held cost a rehash of every entry at each
// doubling (issue 12, ninth pass). A map is made again only when it
// holds fewer than n; what it held is copied.
func (l *Listener) ReserveRuns(n int) {
	if n <= 0 {
		return
	}
	l.mu.Lock()
	l.runs = mapcap.Reserved(l.runs, n)
	if l.holds > 0 {
		l.held = mapcap.Reserved(l.held, n)
	}
	l.mu.Unlock()
	l.routeMu.Lock()
	l.routes = mapcap.Reserved(l.routes, n)
	l.routeMu.Unlock()
}

// routeRun makes the router deliver s's run to s. The slices in routes
// and discs are replaced, never changed, so route reads them unlocked.
func (l *Listener) routeRun(s *RunSubscription) {
	l.routeMu.Lock()
	defer l.routeMu.Unlock()
	if subs := l.routes[s.runID]; len(subs) > 0 {
		l.routes[s.runID] = append(slices.Clip(subs), s)
		return
	}
	s.self[0] = s
	l.routes[s.runID] = s.self[:]
}

// routeDiscovery makes the router offer the runs nobody tracks to s.
func (l *Listener) routeDiscovery(s *DiscoverySubscription) {
	l.routeMu.Lock()
	defer l.routeMu.Unlock()
	l.discs = append(slices.Clip(l.discs), s)
}

// unrouteDiscovery undoes routeDiscovery.
func (l *Listener) unrouteDiscovery(s *DiscoverySubscription) {
	l.routeMu.Lock()
	defer l.routeMu.Unlock()
	l.discs = slices.DeleteFunc(slices.Clone(l.discs), func(o *DiscoverySubscription) bool { return o == s })
}

// unrouteRun undoes routeRun; a subscription never routed is ignored.
func (l *Listener) unrouteRun(s *RunSubscription) {
	l.routeMu.Lock()
	defer l.routeMu.Unlock()
	if s.runID == "" {
		return
	}
	subs := l.routes[s.runID]
	if len(subs) == 1 && subs[0] == s {
		delete(l.routes, s.runID) // the run's only one: nothing to copy
		return
	}
	left := slices.DeleteFunc(slices.Clone(subs), func(o *RunSubscription) bool { return o == s })
	if len(left) == 0 {
		delete(l.routes, s.runID)
	} else {
		l.routes[s.runID] = left
	}
}

// Subscribe delivers the events of one run into box. The listener's one
// event subscription, <prefix>.*.*.*, made and flushed by the first
// Subscribe or Discover, routes each message by the run id at the end of
// its subject (ADR 0009): no other run's message is parsed or counted
// here. A message is offered to box only if its subject has the right
// shape, its query token is queryID, it parses, and the ids in its payload
// match the subject; any other message is counted (Options.OnEvent),
// logged at most once per class every DefaultWarnEvery, and dropped.
//
// Once the run is routed, Subscribe reads the run's last progress
// and its termination from the stream (when there is one) and offers them,
// progress first. Because the Mailbox keeps only a newer progress, a message
// read from the stream never replaces a newer live one, and a message
// published in between is seen at least once. If the connection is down at
// that moment, the catch-up happens after the reconnect; if the catch-up
// fails (JetStream does not answer), it is retried in the background until
// it succeeds or the subscription ends. Under HoldCatchUps the catch-up
// waits for the release, which catches up every run held with one scan of
// the stream (or from what a Retained under the hold read and the stream
// after it, see HoldCatchUps). Subscribe returns an error, and no subscription, when the
// ids are not valid subject tokens.
func (l *Listener) Subscribe(queryID, runID string, box *Mailbox) (*RunSubscription, error) {
	s := new(RunSubscription)
	if err := l.SubscribeInto(s, queryID, runID, box); err != nil {
		return nil, err
	}
	return s, nil
}

// SubscribeInto is Subscribe into s, a zero RunSubscription its caller
// keeps (the registry keeps it in the run's entry: no heap object of its
// own for the collector to mark, issue 12). s must not be used for
// another subscription, nor copied, once SubscribeInto returned nil.
func (l *Listener) SubscribeInto(s *RunSubscription, queryID, runID string, box *Mailbox) error {
	if err := checkToken("query id", queryID); err != nil {
		return err
	}
	if err := checkToken("run id", runID); err != nil {
		return err
	}
	if box == nil {
		return errors.New("subscribe: nil mailbox")
	}
	if l.isClosed() {
		return ErrClosed
	}
	if err := l.ensureRouter(); err != nil {
		return fmt.Errorf("subscribe run %s: %w", runID, err)
	}
	s.l, s.queryID, s.runID, s.box = l, queryID, runID, box
	if err := register(l, &l.runs, s); err != nil {
		return err
	}
	// From here on the router delivers the run's live messages to s; the
	// catch-up below reads what the stream holds from before.
	l.routeRun(s)
	if l.nc.IsReconnecting() {
		// The reconnect handling catches this run up.
		return nil
	}
	if l.afterFlush != nil {
		l.afterFlush()
	}
	if l.holdCatchUp(s) {
		// HoldCatchUps' release catches this run up with the others.
		return nil
	}
	ctx, cancel := context.WithTimeout(l.ctx, l.opts.RequestTimeout)
	defer cancel()
	if err := l.catchUp(ctx, s); err != nil && !l.nc.IsReconnecting() {
		// JetStream did not answer (a clustered stream electing its
		// leader): the live subscription stands, the catch-up is retried.
		l.catchUpLater(s, err)
	}
	return nil
}

// catchUp offers the run's last retained progress and termination.
func (l *Listener) catchUp(ctx context.Context, s *RunSubscription) error {
	st, err := l.eventStream(ctx)
	if errors.Is(err, ErrNoJetStream) || errors.Is(err, ErrNoStream) {
		return nil // nothing retained: live events only
	}
	if err != nil {
		return fmt.Errorf("catch up: %w", err)
	}
	for _, kind := range []progress.Kind{progress.KindStarted, progress.KindProgress, progress.KindTerminated} {
		subj := l.subject(kind.String(), s.queryID, s.runID)
		msg, err := st.GetLastMsgForSubject(ctx, subj)
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			continue
		}
		if err != nil {
			return fmt.Errorf("catch up %s: %w", subj, err)
		}
		s.deliverNow(msg.Subject, msg.Data, msg.Time, msg.Sequence)
	}
	return nil
}

// DefaultTerminationWait bounds how long CatchUp waits for the stream to
// store the run's termination before it reads the run's last progress.
const DefaultTerminationWait = 2 * time.Second

// CatchUp offers the run's last retained started event, progress and
// termination to the mailbox once more, as Subscribe does. It is meant for
// the run's end: it first waits, up to DefaultTerminationWait, for the
// stream to hold the run's termination, since the stream stores in order
// and every progress posted before the termination is then stored too. A
// progress that reached the stream but not this subscription (around a
// reconnect, or before the subscription was made) is so not lost. Without
// JetStream it returns nil at once.
func (s *RunSubscription) CatchUp(ctx context.Context) error {
	l := s.l
	wait, cancel := context.WithTimeout(ctx, DefaultTerminationWait)
	defer cancel()
	subj := l.subject(progress.KindTerminated.String(), s.queryID, s.runID)
	for {
		st, err := l.eventStream(wait)
		if errors.Is(err, ErrNoJetStream) || errors.Is(err, ErrNoStream) {
			return nil
		}
		if err == nil {
			if _, err = st.GetLastMsgForSubject(wait, subj); err == nil {
				break
			}
		}
		select {
		case <-wait.Done():
		case <-time.After(20 * time.Millisecond):
			continue
		}
		break
	}
	return l.catchUp(ctx, s)
}

// deliver checks one live message of s's run and offers it to the run's
// mailbox. A progress whose batch id and run id can be read without
// parsing goes into the slot unparsed (ADR 0011): the worker's Take parses
// it, unless a newer one replaces it first. Anything else is parsed and
// checked now, as deliverNow does. It never blocks on I/O.
func (s *RunSubscription) deliver(subject string, data []byte) {
	es, ok := s.checkSubject(subject)
	if !ok {
		return
	}
	l := s.l
	if es.kind == progress.KindProgress && len(data) <= l.opts.MaxPayload {
		if batch, ok := peekProgress(data, es.runID); ok {
			s.box.offerRaw(newRawProgress(s, subject, es, data, batch))
			return
		}
	}
	s.offerParsed(es, subject, data, true, time.Time{}, 0)
}

// checkSubject splits a message's subject and checks that it names s's
// query and run; otherwise it counts and drops the message and reports
// false.
func (s *RunSubscription) checkSubject(subject string) (eventSubject, bool) {
	l := s.l
	es, ok := l.splitSubject(subject)
	if !ok {
		l.drop(es, subject, OutcomeMalformed, errBadSubject)
		return es, false
	}
	if es.queryID != s.queryID || es.runID != s.runID {
		l.drop(es, subject, OutcomeMismatch, fmt.Errorf("subject ids differ from the tracked run %s/%s", s.queryID, s.runID))
		return es, false
	}
	return es, true
}

// deliverNow is deliver without the unparsed slot: the catch-up's messages
// from the stream, which may be older than what waits, are parsed and
// ordered at once. stored is when the stream stored the message (its
// metadata, the server's clock; zero when not known), seq its stream
// sequence (0 when not known).
func (s *RunSubscription) deliverNow(subject string, data []byte, stored time.Time, seq uint64) {
	es, ok := s.checkSubject(subject)
	if !ok {
		return
	}
	s.offerParsed(es, subject, data, false, stored, seq)
}

// offerParsed parses and checks a message whose subject is s's run's, and
// offers it (live: heard now, or read from the stream's retained copy,
// which stored it at stored with sequence seq).
func (s *RunSubscription) offerParsed(es eventSubject, subject string, data []byte, live bool, stored time.Time, seq uint64) {
	l := s.l
	ev, outcome, err := l.check(es, data)
	if err != nil {
		l.drop(es, subject, outcome, err)
		return
	}
	l.event(es.kind, OutcomeAccepted)
	if live {
		s.box.Offer(ev)
	} else {
		s.box.OfferRetainedSeq(ev, stored, seq)
	}
}

var (
	errBadSubject      = errors.New("subject is not <prefix>.<kind>.<queryId>.<runId>")
	errPayloadTooLarge = errors.New("payload too large")
)

// check parses the payload of a well-formed subject and checks its ids.
// On failure it returns the outcome to count.
func (l *Listener) check(es eventSubject, data []byte) (*progress.Event, string, error) {
	if len(data) > l.opts.MaxPayload {
		return nil, OutcomeMalformed, fmt.Errorf("%w: %d bytes, limit %d", errPayloadTooLarge, len(data), l.opts.MaxPayload)
	}
	ev, err := l.parse(data, es.kind)
	switch {
	case errors.Is(err, progress.ErrIgnored):
		return nil, OutcomeIgnored, err
	case errors.Is(err, progress.ErrKindMismatch):
		return nil, OutcomeMismatch, err
	case err != nil:
		return nil, OutcomeMalformed, err
	case ev == nil:
		return nil, OutcomeMalformed, errors.New("parser returned no event")
	}
	if ev.QueryID != es.queryID || ev.RunID != es.runID {
		return nil, OutcomeMismatch, fmt.Errorf("payload ids %s/%s differ from the subject's", ev.QueryID, ev.RunID)
	}
	return ev, OutcomeAccepted, nil
}

// drop counts a message that is not delivered and logs it, rate-limited
// per outcome and kind. Ignored events are logged at debug level only.
//
// The count comes after the log line: whoever sees the count (a test, the
// metrics) sees the line written too (CI: a test read the count before the
// line and found one warning missing).
func (l *Listener) drop(es eventSubject, subject, outcome string, err error) {
	defer l.event(es.kind, outcome)
	if outcome == OutcomeIgnored {
		l.log.Debug("event ignored", zap.String("subject", subject), zap.Error(err))
		return
	}
	if ok, n := l.warn.Allow(zapcore.WarnLevel, outcome+"/"+es.kindToken); ok {
		l.log.Warn("event dropped",
			zap.String("outcome", outcome),
			zap.String("kind", es.kindToken),
			zap.String("subject", subject),
			zap.String("query_id", es.queryID),
			zap.String("run_id", es.runID),
			zap.Error(err),
			zap.Int("suppressed", n))
	}
}

// Run is a run of a streaming query that discovery or the stream knows of.
type Run struct {
	QueryID, RunID string
	// Name is the query's name, "" when it has none or none was found.
	Name string
	// Kind is the kind of the event the run was found through (Discover),
	// or the most telling kind the stream retains for it (Retained):
	// terminated, else progress, else idle, else started.
	Kind progress.Kind
	// Terminated is true when the run's termination was seen.
	Terminated bool
	// Stored is when the stream stored the newest of the run's retained
	// events (Retained, from the server's clock); zero for Discover,
	// whose event is the run's newest by being live.
	Stored time.Time
	// Seq is the stream sequence of the newest of the run's retained
	// events (Retained, RetainedRun); 0 for Discover, or when not known.
	// Whether the run stored anything since a rewind is judged by it when
	// the rewind's mark is known (ADR 0019, addendum of 2026-12-06,
	// "judged by sequence").
	Seq uint64
	// Event is the event the run was found through (Discover), checked
	// against its subject; nil for Retained. The caller offers it to the
	// run's mailbox once subscribed, so that the event that revealed the
	// run is not lost while JetStream is still storing it.
	Event *progress.Event
}

// Discover calls found for runs it sees that known does not know, for
// declarative tracking. It is served by the listener's event subscription,
// <prefix>.*.*.*, which sees every event (ADR 0009): a message of a run
// that has a run subscription goes to that subscription, and to discovery
// too while known(runID) is false (its trackers are still subscribing);
// for any other message it takes the run id from the subject and returns
// at once, without parsing, when known(runID) is true. known should
// therefore also return true for runs already decided against, so that
// each run is parsed once. For another run it parses the message, checks
// its ids against the subject, and calls found, with the name the event
// carries ("" for idle and terminated events): discovery does no I/O on
// the goroutine that delivers every run's events, and the caller looks a
// missing name up (RunName) off it. After a reconnect, the runs the
// stream retains are offered to known and found again, so a run that began
// while the connection was down is found too. known and found run on the
// subscription's goroutine, one message at a time, and also on the
// listener's reconnect goroutine: they must be safe for concurrent use, and
// found must not block long (queue the run).
func (l *Listener) Discover(known func(runID string) bool, found func(Run)) (*DiscoverySubscription, error) {
	if known == nil || found == nil {
		return nil, errors.New("discover: nil callback")
	}
	if l.isClosed() {
		return nil, ErrClosed
	}
	if err := l.ensureRouter(); err != nil {
		return nil, fmt.Errorf("discover: %w", err)
	}
	s := &DiscoverySubscription{subscription: subscription{l: l}, known: known, found: found}
	if err := register(l, &l.discover, s); err != nil {
		return nil, err
	}
	l.routeDiscovery(s)
	return s, nil
}

// onDiscover is Discover's callback.
func (s *DiscoverySubscription) onDiscover(m *nats.Msg) {
	if s.known(lastToken(m.Subject)) {
		return
	}
	l := s.l
	es, ok := l.splitSubject(m.Subject)
	if !ok {
		l.drop(es, m.Subject, OutcomeMalformed, errBadSubject)
		return
	}
	ev, outcome, err := l.check(es, m.Data)
	if err != nil {
		l.drop(es, m.Subject, outcome, err)
		return
	}
	// The run's ids from the payload when they are the subject's (check
	// makes sure of it): one string, the parse's, holds the ids and the
	// name of a run tracked from here on, instead of that one and the
	// message's subject as well (issue 12: an object per discovered run).
	qid, rid := es.queryID, es.runID
	if ev.QueryID == qid && ev.RunID == rid {
		qid, rid = ev.QueryID, ev.RunID
	}
	s.found(Run{QueryID: qid, RunID: rid, Name: ev.Name, Kind: es.kind,
		Terminated: es.kind == progress.KindTerminated, Event: ev})
}

// Rescan asks for the runs the stream retains to be offered once more to
// found, those that known does not know: a caller that could not take a
// run when it was found (too many waiting for a decision, a subscription
// that failed) finds it again without waiting for the run's next event,
// which may be an hour away. It never blocks: the rescan runs on a
// goroutine of the listener's own (rescanLoop), and requests made before
// it starts are served by one rescan. Without JetStream it does nothing.
func (s *DiscoverySubscription) Rescan() {
	s.rescan.Store(true)
	select {
	case s.l.rescanKick <- struct{}{}:
	default:
	}
}

// rescanAsked runs the rescans that discoveries asked for (Rescan), each
// bounded by ctx. It runs on rescanLoop's goroutine. It reports whether
// one failed: that one is asked for again, and rescanLoop retries it
// after a delay.
func (l *Listener) rescanAsked(ctx context.Context) (failed bool) {
	_, disc := l.subscriptions()
	for _, s := range disc {
		if s.rescan.CompareAndSwap(true, false) && !l.rescan(ctx, s) {
			s.rescan.Store(true)
			failed = true
		}
	}
	return failed
}

// rescan offers the retained runs that s.known does not know to s.found.
// It reports false when the stream could not be read (not when there is no
// stream to read).
func (l *Listener) rescan(ctx context.Context, s *DiscoverySubscription) bool {
	runs, err := l.Retained(ctx)
	if err != nil {
		if errors.Is(err, ErrNoJetStream) || errors.Is(err, ErrNoStream) {
			return true
		}
		if ctx.Err() == nil {
			l.log.Warn("could not rescan the runs the stream retains for discovery; retried", zap.Error(err))
		}
		return false
	}
	for _, r := range runs {
		if ctx.Err() != nil {
			return false // ended by a reconnect or Close: asked again
		}
		if !s.known(r.RunID) {
			s.found(r)
		}
	}
	return true
}
