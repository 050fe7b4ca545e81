package listener

import (
	"context"
	"errors"
	"fmt"
	"strings"
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
// when there is no stream to read.
func (l *Listener) scanStream(ctx context.Context, kinds []progress.Kind, visit func(subject string, data []byte)) error {
	if _, err := l.eventStream(ctx); err != nil {
		return err
	}
	want := make([]string, len(kinds))
	for i, k := range kinds {
		want[i] = l.opts.Prefix + "." + k.String() + "."
	}
	// One filter and DeliverAll: a consumer that delivers the last message
	// per subject, or filters each kind, costs the server a count of its
	// pending messages per subject when it is made (seconds at 100,000 runs).
	cctx, cancel := context.WithTimeout(ctx, l.opts.RequestTimeout)
	cons, err := l.js.OrderedConsumer(cctx, l.opts.Stream, jetstream.OrderedConsumerConfig{
		FilterSubjects:    []string{l.opts.Prefix + ".>"},
		DeliverPolicy:     jetstream.DeliverAllPolicy,
		InactiveThreshold: max(4*l.opts.RequestTimeout, 30*time.Second),
	})
	cancel()
	if err != nil {
		if noJetStream(err) {
			return ErrNoJetStream
		}
		return fmt.Errorf("scan stream %s: %w", l.opts.Stream, err)
	}
	defer l.dropScanConsumer(cons)
	pending := cons.CachedInfo().NumPending
	if pending == 0 {
		return nil
	}
	it, err := cons.Messages(jetstream.PullMaxMessages(DefaultScanBatch))
	if err != nil {
		return fmt.Errorf("scan stream %s: %w", l.opts.Stream, err)
	}
	defer it.Stop()
	for stalls := 0; pending > 0; {
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("scan stream %s: %w", l.opts.Stream, err)
		}
		m, err := it.Next(jetstream.NextMaxWait(l.opts.RequestTimeout))
		switch {
		case errors.Is(err, nats.ErrTimeout):
			if stalls++; stalls >= DefaultScanStalls {
				return fmt.Errorf("scan stream %s: no message in %d waits of %s with %d pending", l.opts.Stream,
					stalls, l.opts.RequestTimeout, pending)
			}
			continue
		case err != nil:
			return fmt.Errorf("scan stream %s: %w", l.opts.Stream, err)
		}
		stalls = 0
		md, err := m.Metadata()
		if err != nil {
			return fmt.Errorf("scan stream %s: %w", l.opts.Stream, err)
		}
		pending = md.NumPending
		subject := m.Subject()
		for _, w := range want {
			if strings.HasPrefix(subject, w) {
				visit(subject, m.Data())
				break
			}
		}
	}
	return nil
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
func (l *Listener) HoldCatchUps() (release func(context.Context) error) {
	l.mu.Lock()
	l.holds++
	l.mu.Unlock()
	return func(ctx context.Context) error {
		l.mu.Lock()
		l.holds--
		var held []*RunSubscription
		if l.holds == 0 {
			for s := range l.held {
				if _, live := l.runs[s]; live {
					held = append(held, s)
				}
			}
			clear(l.held)
		}
		l.mu.Unlock()
		if len(held) == 0 || l.nc.IsReconnecting() {
			return nil // the reconnect catches every run up
		}
		return l.catchUpMany(ctx, held)
	}
}

// holdCatchUp defers s's catch-up to the release of HoldCatchUps, and
// reports whether it did (false: no hold, catch up now).
func (l *Listener) holdCatchUp(s *RunSubscription) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.holds == 0 {
		return false
	}
	l.held[s] = struct{}{}
	return true
}

// catchUpMany catches subs up from the stream: one lookup per run for a
// few, one scan of the stream for BatchCatchUpMin or more. A run whose
// catch-up failed is retried on its own in the background; the first
// error is returned.
func (l *Listener) catchUpMany(ctx context.Context, subs []*RunSubscription) error {
	if len(subs) < BatchCatchUpMin {
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
	err := l.scanCatchUp(ctx, subs)
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
// termination after the scan. Without a stream it returns nil.
func (l *Listener) scanCatchUp(ctx context.Context, subs []*RunSubscription) error {
	byRun := make(map[string][]*RunSubscription, len(subs))
	for _, s := range subs {
		byRun[s.runID] = append(byRun[s.runID], s)
	}
	// A run's termination is offered after the scan, once its progress is:
	// a worker that took the termination first would end the run.
	type msg struct {
		subject string
		data    []byte
	}
	var terminations []msg
	term := "." + progress.KindTerminated.String() + "."
	err := l.scanStream(ctx, []progress.Kind{progress.KindStarted, progress.KindProgress, progress.KindTerminated},
		func(subject string, data []byte) {
			held := byRun[lastToken(subject)]
			switch {
			case len(held) == 0:
			case strings.HasPrefix(subject[min(len(l.opts.Prefix), len(subject)):], term):
				terminations = append(terminations, msg{subject, data})
			default:
				for _, s := range held {
					s.deliverNow(subject, data)
				}
			}
		})
	for _, t := range terminations {
		for _, s := range byRun[lastToken(t.subject)] {
			s.deliverNow(t.subject, t.data)
		}
	}
	if errors.Is(err, ErrNoJetStream) || errors.Is(err, ErrNoStream) {
		return nil // nothing retained: live events only
	}
	return err
}

// cmpErr returns a unless it is nil, else b.
func cmpErr(a, b error) error {
	if a != nil {
		return a
	}
	return b
}
