package listener

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/zap"

	"github.com/finalizer-dev/finalizer/internal/actions"
)

// DefaultFinalStream is the JetStream stream of the nats action's events
// (issue 19): <api prefix>.final.<table>.
const DefaultFinalStream = "FINALIZER_FINAL"

var _ actions.Publisher = (*Listener)(nil)

// FinalPrefix is the subject prefix of the nats action's events:
// <api prefix>.final.
func (l *Listener) FinalPrefix() string { return l.opts.APIPrefix + ".final" }

// EnsureFinalStream creates the stream of the nats action's events when
// it is missing (subjects <api prefix>.final.>, file storage, the event
// stream's age, size bound, replicas and placement, a duplicate window of
// two minutes), so a consumer that was down catches up; an existing
// stream is kept as it is.
func (l *Listener) EnsureFinalStream(ctx context.Context) error {
	if l.isClosed() {
		return ErrClosed
	}
	ctx, cancel := l.withTimeout(ctx, l.opts.RequestTimeout)
	defer cancel()
	_, err := l.js.Stream(ctx, DefaultFinalStream)
	if err == nil {
		return nil
	}
	if !errors.Is(err, jetstream.ErrStreamNotFound) {
		if noJetStream(err) {
			return ErrNoJetStream
		}
		return fmt.Errorf("ensure stream %s: %w", DefaultFinalStream, err)
	}
	cfg := jetstream.StreamConfig{
		Name:        DefaultFinalStream,
		Description: "finalizer: one message per period that became final, per table (the nats action)",
		Subjects:    []string{l.FinalPrefix() + ".>"},
		Retention:   jetstream.LimitsPolicy,
		Discard:     jetstream.DiscardOld,
		MaxAge:      l.opts.MaxAge,
		MaxBytes:    l.opts.MaxBytes,
		Storage:     jetstream.FileStorage,
		Replicas:    l.opts.Replicas,
	}
	if l.opts.PlacementCluster != "" || len(l.opts.PlacementTags) > 0 {
		cfg.Placement = &jetstream.Placement{Cluster: l.opts.PlacementCluster, Tags: slices.Clone(l.opts.PlacementTags)}
	}
	if _, err := l.js.CreateStream(ctx, cfg); err != nil && !errors.Is(err, jetstream.ErrStreamNameAlreadyInUse) {
		if noJetStream(err) {
			return ErrNoJetStream
		}
		return fmt.Errorf("create stream %s: %w", DefaultFinalStream, err)
	}
	l.log.Info("created the stream of final periods", zap.String("stream", DefaultFinalStream), zap.Strings("subjects", cfg.Subjects))
	return nil
}

// PublishFinal publishes msgs through JetStream, each with its id as
// Nats-Msg-Id (the stream drops a duplicate within its window), all at
// once, and waits for every acknowledgement: one error per message, nil
// when the stream stored it.
func (l *Listener) PublishFinal(ctx context.Context, msgs []actions.Message) []error {
	errs := make([]error, len(msgs))
	if l.isClosed() {
		for i := range errs {
			errs[i] = ErrClosed
		}
		return errs
	}
	ctx, cancel := l.withTimeout(ctx, l.opts.RequestTimeout)
	defer cancel()
	futures := make([]jetstream.PubAckFuture, len(msgs))
	for i, m := range msgs {
		f, err := l.js.PublishAsync(m.Subject, m.Data, jetstream.WithMsgID(m.ID))
		if err != nil {
			errs[i] = fmt.Errorf("publish %s: %w", m.Subject, err)
			continue
		}
		futures[i] = f
	}
	for i, f := range futures {
		if f == nil {
			continue
		}
		select {
		case <-f.Ok():
		case err := <-f.Err():
			errs[i] = fmt.Errorf("publish %s: %w", msgs[i].Subject, err)
		case <-ctx.Done():
			errs[i] = fmt.Errorf("publish %s: %w", msgs[i].Subject, ctx.Err())
		}
	}
	return errs
}
