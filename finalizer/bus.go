package finalizer

import (
	"context"

	"github.com/finalizer-dev/finalizer/listener"
)

// Bus is what the registry needs of the event bus (package listener, one
// NATS connection): a subscription to one run's events that fills a
// Mailbox. *listener.Listener implements it through ListenerBus, below.
type Bus interface {
	Subscribe(queryID, runID string, box *listener.Mailbox) (RunSubscription, error)
}

// RunSubscription is one run's live subscription.
type RunSubscription interface {
	Unsubscribe() error
}

// Namer looks up a run's query name when its first event carried none (an
// idle or terminated event). Optional: a Bus may implement it.
type Namer interface {
	RunName(ctx context.Context, queryID, runID string) (string, error)
}

// RunStater is optional on a Bus: RetainedRun reads what the stream
// retains of one run (listener.Listener.RetainedRun). Before a tracker
// starts into a table an operator rewound, the registry reads it to tell
// whether the run can still post a progress newer than the rewind
// (Registry.judgeSilence); without it, a run is judged only by a
// restart's recovery.
type RunStater interface {
	RetainedRun(ctx context.Context, queryID, runID string) (listener.Run, bool, error)
}

// StreamMarker is optional on a Bus: StreamPosition says where the
// event stream stands now, its last sequence and when it was created
// (listener.Listener.StreamPosition). The registry asks it once per
// rewind it hears live, and once per read of the rewinds from the rows
// that recorded a position (to tell the stream's incarnation): a progress
// read later from the stream's retained copy with a later sequence was
// stored after the rewind committed, judged by the order the stream
// stored in, never by a clock (Tracker.beforeRewind; ADR 0019, addendum
// of 2026-12-06, "judged by sequence"). Without it, a retained progress
// is judged with rewindMargin across the NATS and PostgreSQL servers'
// clocks.
type StreamMarker interface {
	StreamPosition(ctx context.Context) (listener.StreamPosition, error)
}

// CatchUpHolder is optional on a Bus: HoldCatchUps defers the catch-up
// from the stream of every run subscribed until release, which catches
// them all up at once (one read of the stream instead of one per run).
// Recover holds while it subscribes the runs of a restart.
type CatchUpHolder interface {
	HoldCatchUps() (release func(context.Context) error)
}

// LateOfferer is optional on a CatchUpHolder whose hold offers a run
// subscribed under it some of its retained events at once (the listener's
// early offer): OfferLate makes the runs of runIDs (every run, when all)
// wait for the release instead. Recover names the runs whose table
// another query of the same recovery also feeds.
type LateOfferer interface {
	OfferLate(runIDs []string)
}

// RunReserver is optional on a Bus: ReserveRuns makes room for n more run
// subscriptions at once, before a recovery subscribes them.
type RunReserver interface {
	ReserveRuns(n int)
}

// ListenerBus adapts a *listener.Listener to Bus, Namer and CatchUpHolder: its
// Subscribe returns the concrete *listener.RunSubscription.
type ListenerBus struct{ L *listener.Listener }

var (
	_ Bus            = ListenerBus{}
	_ Namer          = ListenerBus{}
	_ CatchUpHolder  = ListenerBus{}
	_ LateOfferer    = ListenerBus{}
	_ RunReserver    = ListenerBus{}
	_ RunStater      = ListenerBus{}
	_ StreamMarker   = ListenerBus{}
	_ intoSubscriber = ListenerBus{}
)

// Subscribe subscribes box to the run's events (see listener.Subscribe).
func (b ListenerBus) Subscribe(queryID, runID string, box *listener.Mailbox) (RunSubscription, error) {
	s, err := b.L.Subscribe(queryID, runID, box)
	if err != nil {
		return nil, err // not a typed nil in the interface
	}
	return s, nil
}

// subscribeInto subscribes box into s (see listener.SubscribeInto): the
// registry keeps the subscription in the run's entry (intoSubscriber).
func (b ListenerBus) subscribeInto(s *listener.RunSubscription, queryID, runID string, box *listener.Mailbox) error {
	return b.L.SubscribeInto(s, queryID, runID, box)
}

// intoSubscriber is a Bus that subscribes into a listener.RunSubscription
// the registry keeps in the run's entry (ListenerBus), instead of one of
// its own: a heap object per tracked run fewer for the collector to mark
// (issue 12).
type intoSubscriber interface {
	subscribeInto(s *listener.RunSubscription, queryID, runID string, box *listener.Mailbox) error
}

// HoldCatchUps defers the runs' catch-ups (see listener.HoldCatchUps).
func (b ListenerBus) HoldCatchUps() func(context.Context) error { return b.L.HoldCatchUps() }

// OfferLate makes runs wait for the hold's release (listener.OfferLate).
func (b ListenerBus) OfferLate(runIDs []string) { b.L.OfferLate(runIDs) }

// ReserveRuns is listener.Listener.ReserveRuns.
func (b ListenerBus) ReserveRuns(n int) { b.L.ReserveRuns(n) }

// RunName looks the run's query name up in what JetStream retained.
func (b ListenerBus) RunName(ctx context.Context, queryID, runID string) (string, error) {
	return b.L.RunName(ctx, queryID, runID)
}

// StreamPosition says where the event stream stands (see
// listener.StreamPosition).
func (b ListenerBus) StreamPosition(ctx context.Context) (listener.StreamPosition, error) {
	return b.L.StreamPosition(ctx)
}

// RetainedRun reads what the stream retains of one run (see
// listener.RetainedRun).
func (b ListenerBus) RetainedRun(ctx context.Context, queryID, runID string) (listener.Run, bool, error) {
	return b.L.RetainedRun(ctx, queryID, runID)
}
