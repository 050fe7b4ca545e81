package finalizer

import (
	"context"

	"github.com/finalizer-dev/finalizer/listener"
)

// Events is what the registry needs of the event bus: a subscription to
// one run's events that fills a Mailbox. *listener.Listener implements it
// through ListenerEvents, below.
type Events interface {
	Subscribe(queryID, runID string, box *listener.Mailbox) (Subscription, error)
}

// Subscription is one run's live subscription.
type Subscription interface {
	Unsubscribe() error
}

// Namer looks up a run's query name when its first event carried none (an
// idle or terminated event). Optional: Events may implement it.
type Namer interface {
	RunName(ctx context.Context, queryID, runID string) (string, error)
}

// ListenerEvents adapts a *listener.Listener to Events and Namer: its
// Subscribe returns the concrete *listener.Subscription.
type ListenerEvents struct{ L *listener.Listener }

var (
	_ Events = ListenerEvents{}
	_ Namer  = ListenerEvents{}
)

// Subscribe subscribes box to the run's events (see listener.Subscribe).
func (b ListenerEvents) Subscribe(queryID, runID string, box *listener.Mailbox) (Subscription, error) {
	s, err := b.L.Subscribe(queryID, runID, box)
	if err != nil {
		return nil, err // not a typed nil in the interface
	}
	return s, nil
}

// RunName looks the run's query name up in what JetStream retained.
func (b ListenerEvents) RunName(ctx context.Context, queryID, runID string) (string, error) {
	return b.L.RunName(ctx, queryID, runID)
}
