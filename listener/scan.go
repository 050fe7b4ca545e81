package listener

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/zap"

	"github.com/finalizer-dev/finalizer/progress"
)

// DefaultScanBatch is how many messages a stream scan's consumer asks
// for at once.
const DefaultScanBatch = 4096

// DefaultScanStalls is how many waits in a row for the next message, each
// bounded by Options.RequestTimeout, may bring nothing before a stream scan
// gives up.
const DefaultScanStalls = 3

// BatchCatchUpMin is how many run subscriptions to catch up at once make
// one scan of the stream cheaper than one lookup per run (three requests
// each): fewer are caught up one by one.
const BatchCatchUpMin = 64

// scanStream reads every message the stream retains under the prefix with
// one ordered consumer, in stream order, and calls visit for each message
// of the given kinds. It replaces a lookup per run (ADR 0006): one
// consumer, pulled DefaultScanBatch messages at a time. The stream keeps
// one message per subject (an operator who allows more gets the older ones
// too, in order, which the mailbox and Retained take in their stride). No
// overall deadline but ctx's applies: each wait for the next message is
// bounded by Options.RequestTimeout, and the scan fails only when
// DefaultScanStalls waits in a row bring nothing while messages are
// pending, so a large stream takes as long as it needs and one slow answer
// does not fail the whole scan. It returns ErrNoJetStream or ErrNoStream
// when there is no stream to read. A from above 0 starts the scan at that
// stream sequence instead of the first (the tail a snapshot has not seen,
// see HoldCatchUps). It returns the stream sequence of the last message
// it read (0 when none). visit is given the time the stream stored the
// message and its stream sequence.
func (l *Listener) scanStream(ctx context.Context, kinds []progress.Kind, from uint64, visit func(subject string, data []byte, stored time.Time, seq uint64)) (uint64, error) {
	if _, err := l.eventStream(ctx); err != nil {
		return 0, err
	}
	want := make([]string, len(kinds))
	for i, k := range kinds {
		want[i] = l.opts.Prefix + "." + k.String() + "."
	}
	// One filter and DeliverAll: a consumer that delivers the last message
	// per subject, or filters each kind, costs the server a count of its
	// pending messages per subject when it is made (seconds at 100,000 runs).
	cfg := jetstream.OrderedConsumerConfig{
		FilterSubjects:    []string{l.opts.Prefix + ".>"},
		DeliverPolicy:     jetstream.DeliverAllPolicy,
		InactiveThreshold: max(4*l.opts.RequestTimeout, 30*time.Second),
	}
	if from > 0 {
		cfg.DeliverPolicy, cfg.OptStartSeq = jetstream.DeliverByStartSequencePolicy, from
	}
	cctx, cancel := context.WithTimeout(ctx, l.opts.RequestTimeout)
	cons, err := l.js.OrderedConsumer(cctx, l.opts.Stream, cfg)
	cancel()
	if err != nil {
		if noJetStream(err) {
			return 0, ErrNoJetStream
		}
		return 0, fmt.Errorf("scan stream %s: %w", l.opts.Stream, err)
	}
	defer l.dropScanConsumer(cons)
	pending := cons.CachedInfo().NumPending
	if pending == 0 {
		return 0, nil
	}
	it, err := cons.Messages(jetstream.PullMaxMessages(DefaultScanBatch))
	if err != nil {
		return 0, fmt.Errorf("scan stream %s: %w", l.opts.Stream, err)
	}
	defer it.Stop()
	wait := newScanWait(ctx, l.opts.RequestTimeout)
	defer wait.stop()
	var last uint64
	for stalls := 0; pending > 0; {
		if err := ctx.Err(); err != nil {
			return last, fmt.Errorf("scan stream %s: %w", l.opts.Stream, err)
		}
		m, err := wait.next(it)
		switch {
		case errors.Is(err, nats.ErrTimeout):
			if stalls++; stalls >= DefaultScanStalls {
				return last, fmt.Errorf("scan stream %s: no message in %d waits of %s with %d pending", l.opts.Stream,
					stalls, l.opts.RequestTimeout, pending)
			}
			continue
		case err != nil:
			return last, fmt.Errorf("scan stream %s: %w", l.opts.Stream, err)
		}
		stalls = 0
		md, err := m.Metadata()
		if err != nil {
			return last, fmt.Errorf("scan stream %s: %w", l.opts.Stream, err)
		}
		pending, last = md.NumPending, md.Sequence.Stream
		subject := m.Subject()
		for _, w := range want {
			if strings.HasPrefix(subject, w) {
				visit(subject, m.Data(), md.Timestamp, md.Sequence.Stream)
				break
			}
		}
	}
	return last, nil
}

// scanWait bounds each of a scan's waits for its next message by d with
// one timer and one context for the whole scan, re-armed at each wait,
// instead of NextMaxWait's timer, channel and option per message: a
// restart's listing reads every message the stream retains (hundreds of
// thousands at 100,000 runs), and those were a third of the scan's
// allocations (issue 12, ninth pass). A wait the timer ends returns
// nats.ErrTimeout, as NextMaxWait's does, and the next wait gets a fresh
// context; the parent's cancellation is returned as it is.
type scanWait struct {
	parent context.Context
	d      time.Duration
	timer  *time.Timer

	mu     sync.Mutex
	ctx    context.Context     // the current wait context
	cancel context.CancelFunc  // its cancel
	opts   []jetstream.NextOpt // NextContext(ctx)
	armed  time.Time           // when the current wait began
}

func newScanWait(parent context.Context, d time.Duration) *scanWait {
	w := &scanWait{parent: parent, d: d}
	w.renew()
	w.armed = time.Now()
	w.timer = time.AfterFunc(d, w.expire)
	return w
}

// expire ends the current wait, once it has lasted d. A call that comes
// sooner is the timer of an earlier wait, fired as its message came and
// run late, after next renewed the context and armed the timer again: it
// ended the next wait at once (a spurious stall of the scan) before this
// check.
func (w *scanWait) expire() {
	w.mu.Lock()
	cancel := w.cancel
	early := time.Since(w.armed) < w.d
	w.mu.Unlock()
	if !early {
		cancel()
	}
}

// renew makes the context the next waits use.
func (w *scanWait) renew() {
	ctx, cancel := context.WithCancel(w.parent)
	w.mu.Lock()
	old := w.cancel
	w.ctx, w.cancel, w.opts = ctx, cancel, []jetstream.NextOpt{jetstream.NextContext(ctx)}
	w.mu.Unlock()
	if old != nil {
		old()
	}
}

// next waits up to d for its next message.
func (w *scanWait) next(it jetstream.MessagesContext) (jetstream.Msg, error) {
	w.mu.Lock()
	opts := w.opts
	w.armed = time.Now()
	w.mu.Unlock()
	w.timer.Reset(w.d)
	m, err := it.Next(opts...)
	fired := !w.timer.Stop()
	switch {
	case err == nil:
		if fired {
			// The timer ended the context as the message came: the
			// next wait gets a fresh one.
			w.renew()
		}
		return m, nil
	case errors.Is(err, context.Canceled) && w.parent.Err() == nil:
		// The timer ended this wait: a wait that brought nothing.
		w.renew()
		return nil, nats.ErrTimeout
	}
	return nil, err
}

// stop releases the timer and the current context.
func (w *scanWait) stop() {
	w.timer.Stop()
	w.mu.Lock()
	cancel := w.cancel
	w.mu.Unlock()
	cancel()
}

// dropScanConsumer deletes a scan's consumer at once instead of leaving it
// to the server's inactivity threshold.
func (l *Listener) dropScanConsumer(cons jetstream.Consumer) {
	ctx, cancel := context.WithTimeout(l.ctx, l.opts.RequestTimeout)
	defer cancel()
	name := cons.CachedInfo().Name
	if err := l.js.DeleteConsumer(ctx, l.opts.Stream, name); err != nil && !errors.Is(err, jetstream.ErrConsumerNotFound) {
		l.log.Debug("delete the stream scan's consumer", zap.String("consumer", name), zap.Error(err))
	}
}

// HoldCatchUps makes every Subscribe until release defer its catch-up
// from the stream; release then catches all of them up with one scan of
// the stream (scanStream) instead of three lookups per run, and so a
// restart that subscribes many runs at once (the registry's Recover) reads
// the stream once. The runs are routed before release reads the stream, so
// nothing published meanwhile is missed. If the scan fails, each run's
// catch-up is retried on its own in the background (as a failed catch-up
// of Subscribe is) and release returns the error. Holds may nest; the
// outermost release does the scan. release must be called once.
//
// A Retained made under the hold keeps what it read (a snapshot: each
// run's checked started, progress and termination, and the stream
// sequence it read up to), and the release catches the held runs up from
// the snapshot and a scan of only what the stream stored after it: a
// restart reads the stream once, not once to list the runs and once more
// to catch them up, and parses each run's progress once. Everything the
// stream holds at the release is either in the snapshot or after it, so
// the two offer each run at least what one scan at the release would.
// A snapshot is not used when the stream was purged, deleted or replaced,
// or the connection reconnected, after it was read (a whole scan then).
func (l *Listener) HoldCatchUps() (release func(context.Context) error) {
	l.mu.Lock()
	l.holds++
	l.mu.Unlock()
	return func(ctx context.Context) error {
		l.mu.Lock()
		l.holds--
		var (
			held  []*RunSubscription
			early map[*RunSubscription]bool
			snap  *retainedSnapshot
		)
		if l.holds == 0 {
			if l.snap != nil && l.snap.gen == l.streamGen {
				snap = l.snap
			}
			for s, offered := range l.held {
				if _, live := l.runs[s]; live {
					held = append(held, s)
					// Offered from this very snapshot: one read
					// before the stream changed is not this one.
					if snap != nil && offered == snap.gen+1 {
						if early == nil {
							early = make(map[*RunSubscription]bool)
						}
						early[s] = true
					}
				}
			}
			clear(l.held)
			l.snap = nil
			l.late = nil
		}
		l.mu.Unlock()
		if len(held) == 0 || l.nc.IsReconnecting() {
			return nil // the reconnect catches every run up
		}
		return l.catchUpMany(ctx, held, snap, early)
	}
}

// holdCatchUp defers s's catch-up to the release of HoldCatchUps, and
// reports whether it did (false: no hold, catch up now).
//
// Under a hold with a snapshot (a Retained made under it: a restart), s
// is offered the snapshot's started event and progress of its run at
// once, before holdCatchUp returns, and the release offers it only the
// termination and what the stream stored after the snapshot: its tracker
// can step and write its first advance while the restart still starts
// the other runs, instead of every tracker waiting for the last start
// (issue 12, sixth pass; ADR 0023 addendum). What is offered is what the
// release would have offered first (the same messages, already checked);
// a newer progress, live or from the scan after the snapshot, replaces
// it in the mailbox, an older one never does. The termination still
// waits for the release, after the stream's newer progress, as before.
func (l *Listener) holdCatchUp(s *RunSubscription) bool {
	l.mu.Lock()
	if l.holds == 0 {
		l.mu.Unlock()
		return false
	}
	var (
		now     []retainedMsg
		offered uint64
	)
	if l.snap != nil && l.snap.gen == l.streamGen && !l.late[s.runID] {
		now, offered = l.snap.runs[s.runID], l.snap.gen+1
	}
	l.held[s] = offered
	l.mu.Unlock()
	for _, m := range now {
		if m.kind != progress.KindTerminated {
			s.deliverRetained(m)
		}
	}
	return true
}

// OfferLate makes the runs of runIDs wait for the
// release of the current hold of catch-ups for everything, as before the
// early offer of holdCatchUp: a restart's recovery names the runs whose
// table another query of the same recovery also feeds, so that no run's
// first advance moves a table before every one of its feeders being
// recovered has joined it (ADR 0023, sixth-pass addendum). Without a hold
// it does nothing; the release forgets it.
func (l *Listener) OfferLate(runIDs []string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.holds == 0 || len(runIDs) == 0 {
		return
	}
	if l.late == nil {
		l.late = make(map[string]bool, len(runIDs))
	}
	for _, id := range runIDs {
		l.late[id] = true
	}
}

// retainedSnapshot is what a Retained made under a hold of catch-ups read
// of the stream, for the hold's release (see HoldCatchUps).
type retainedSnapshot struct {
	runs map[string][]retainedMsg // run id -> its started, progress and termination, in stream order
	last uint64                   // the stream sequence of the last message read; 0: none
	gen  uint64                   // Listener.streamGen when it was read
	// created is the stream's creation time when it was read: a stream
	// created since is another one, whose sequences start again.
	created time.Time
}

// streamCreated returns the event stream's creation time and the
// sequence of its last message, as the server reports them now; ok is
// false when it does not answer.
func (l *Listener) streamCreated(ctx context.Context) (created time.Time, lastSeq uint64, ok bool) {
	info, ok := l.streamState(ctx)
	return info.Created, info.State.LastSeq, ok
}

// streamState returns the event stream's info as the server reports it
// now; ok is false when it does not answer.
func (l *Listener) streamState(ctx context.Context) (*jetstream.StreamInfo, bool) {
	st, err := l.eventStream(ctx)
	if err != nil {
		return &jetstream.StreamInfo{}, false
	}
	cctx, cancel := context.WithTimeout(ctx, l.opts.RequestTimeout)
	defer cancel()
	info, err := st.Info(cctx)
	if err != nil {
		return &jetstream.StreamInfo{}, false
	}
	return info, true
}

// snapshotUsable reports whether snap still describes the stream whose
// creation time and last sequence are created and lastSeq: the same
// stream (a stream created since is another one, whose sequences start
// again), and one whose sequences did not go back below what snap read.
// They go back when the server lost the end of the stream (an R1 stream
// in persist_mode async on a server killed and restarted, ADR 0004
// addendum, where this process's connection may not have dropped: the
// server of a cluster that holds the stream is not always the one this
// process is connected to); the messages stored since would reuse the
// sequences snap read, and a scan from after them would miss them. It
// sees the loss only while fewer messages were stored since than were
// lost (the usual window: the restart's listing to its release, about a
// second); beyond, a run whose message it misses waits for its next
// event: behind, never ahead.
func snapshotUsable(snap *retainedSnapshot, created time.Time, lastSeq uint64) bool {
	return created.Equal(snap.created) && lastSeq >= snap.last
}

// retainedMsg is one message of a snapshot: checked against its subject
// when ev is set (parsed once, shared by the run's subscriptions as
// discovery's pending runs share theirs); data is kept only when the
// check failed, so that the catch-up counts and logs it as it would have.
type retainedMsg struct {
	subject string
	kind    progress.Kind
	ev      *progress.Event
	data    []byte
	stored  int64  // when the stream stored it (Unix ns, the server's clock)
	seq     uint64 // its stream sequence
}

// snapshotKinds are the kinds a catch-up offers.
var snapshotKinds = []progress.Kind{progress.KindStarted, progress.KindProgress, progress.KindTerminated}

// keepSnapshot makes snap the snapshot of the hold in force, unless
// there is none or it has one of the same stream already (the first, with
// the stream after it, is as good as any later one).
func (l *Listener) keepSnapshot(snap *retainedSnapshot) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.holds > 0 && snap.gen == l.streamGen && (l.snap == nil || l.snap.gen != l.streamGen) {
		l.snap = snap
	}
}

// snapshotting reports whether a Retained now should keep a snapshot, and
// the stream generation it reads.
func (l *Listener) snapshotting() (bool, uint64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.holds > 0, l.streamGen
}

// streamChanged notes that what the stream held may be gone (a purge, a
// deletion, a replacement, a reconnect): a snapshot read before is not
// used.
func (l *Listener) streamChanged() {
	l.mu.Lock()
	l.streamGen++
	l.snap = nil
	l.mu.Unlock()
}

// catchUpMany catches subs up from the stream: one lookup per run for a
// few, one scan of the stream for BatchCatchUpMin or more (from snap and
// the stream after it, when snap is not nil). A run whose catch-up failed
// is retried on its own in the background; the first error is returned.
func (l *Listener) catchUpMany(ctx context.Context, subs []*RunSubscription, snap *retainedSnapshot, early map[*RunSubscription]bool) error {
	if len(subs) < BatchCatchUpMin && snap == nil {
		var first error
		for _, s := range subs {
			cctx, cancel := context.WithTimeout(ctx, l.opts.RequestTimeout)
			err := l.catchUp(cctx, s)
			cancel()
			if err != nil {
				first = cmpErr(first, err)
				l.catchUpLater(s, err)
			}
		}
		return first
	}
	err := l.scanCatchUp(ctx, subs, snap, early)
	if err != nil {
		for _, s := range subs {
			l.catchUpLater(s, err)
		}
		return fmt.Errorf("catch up %d runs: %w", len(subs), err)
	}
	return nil
}

// scanCatchUp catches subs up with one scan of the stream, offering each
// run's retained started event and progress as they come and its
// termination after the scan. With snap, it offers the snapshot's
// messages first and scans only the stream after it; a subscription in
// early was offered the snapshot's started event and progress when it
// was held (holdCatchUp), and is offered only its termination from it.
// Without a stream it returns nil.
func (l *Listener) scanCatchUp(ctx context.Context, subs []*RunSubscription, snap *retainedSnapshot, early map[*RunSubscription]bool) error {
	byRun := make(map[string][]*RunSubscription, len(subs))
	for _, s := range subs {
		byRun[s.runID] = append(byRun[s.runID], s)
	}
	// A run's termination is offered after the scan, once its progress is:
	// a worker that took the termination first would end the run.
	var terminations []retainedMsg
	var from uint64
	if snap != nil {
		// The same stream, still, not behind the snapshot: else a
		// whole scan.
		if created, lastSeq, ok := l.streamCreated(ctx); !ok || !snapshotUsable(snap, created, lastSeq) {
			snap = nil
		}
	}
	if snap != nil {
		for runID, held := range byRun {
			for _, m := range snap.runs[runID] {
				if m.kind == progress.KindTerminated {
					terminations = append(terminations, m)
					continue
				}
				for _, s := range held {
					if !early[s] {
						s.deliverRetained(m)
					}
				}
			}
		}
		from = snap.last + 1
	}
	term := "." + progress.KindTerminated.String() + "."
	_, err := l.scanStream(ctx, snapshotKinds, from, func(subject string, data []byte, stored time.Time, seq uint64) {
		held := byRun[lastToken(subject)]
		switch {
		case len(held) == 0:
		case strings.HasPrefix(subject[min(len(l.opts.Prefix), len(subject)):], term):
			terminations = append(terminations, retainedMsg{subject: subject, kind: progress.KindTerminated, data: data, stored: unixNanos(stored), seq: seq})
		default:
			for _, s := range held {
				s.deliverNow(subject, data, stored, seq)
			}
		}
	})
	for _, t := range terminations {
		for _, s := range byRun[lastToken(t.subject)] {
			s.deliverRetained(t)
		}
	}
	if errors.Is(err, ErrNoJetStream) || errors.Is(err, ErrNoStream) {
		return nil // nothing retained: live events only
	}
	return err
}

// deliverRetained offers a snapshot's message (or a scan's, unchecked) as
// deliverNow would: a message checked already is counted and offered
// without a second parse.
func (s *RunSubscription) deliverRetained(m retainedMsg) {
	if m.ev == nil {
		var stored time.Time
		if m.stored != 0 {
			stored = time.Unix(0, m.stored)
		}
		s.deliverNow(m.subject, m.data, stored, m.seq)
		return
	}
	es, ok := s.checkSubject(m.subject)
	if !ok {
		return
	}
	s.l.event(es.kind, OutcomeAccepted)
	s.box.offer(m.ev, false, m.stored, m.seq) // OfferRetainedSeq
}

// cmpErr returns a unless it is nil, else b.
func cmpErr(a, b error) error {
	if a != nil {
		return a
	}
	return b
}

// StreamPosition is where the event stream stands: the sequence of the
// newest message it stored (0 when it stored none) and when the stream was
// created. Sequences increase within one stream, assigned by its leader
// whatever any clock says; a stream deleted and created again starts them
// again, and its creation time tells it from the one before.
type StreamPosition struct {
	LastSeq uint64
	Created time.Time
}

// StreamPosition returns the event stream's position as the server
// reports it now (its stream info's State.LastSeq and Created). A message
// the stream stores after this call answered carries a later sequence.
// The registry reads it when it hears an operator's rewind, and
// `finalizer rewind` after its transaction commits (finalizer.StreamMarker,
// ADR 0019, addendum of 2026-12-06, "judged by sequence"): a progress
// read from the stream's retained copy with a later sequence was stored
// after the rewind committed. Without a deadline in ctx,
// Options.RequestTimeout applies.
func (l *Listener) StreamPosition(ctx context.Context) (StreamPosition, error) {
	st, err := l.eventStream(ctx)
	if err != nil {
		return StreamPosition{}, err
	}
	cctx, cancel := l.withTimeout(ctx, l.opts.RequestTimeout)
	defer cancel()
	info, err := st.Info(cctx)
	if err != nil {
		return StreamPosition{}, fmt.Errorf("stream %s: info: %w", l.opts.Stream, err)
	}
	return StreamPosition{LastSeq: info.State.LastSeq, Created: info.Created.UTC()}, nil
}
