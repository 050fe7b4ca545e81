package listener

import (
	"github.com/nats-io/nats.go"

	"github.com/finalizer-dev/finalizer/progress"
)

// SetAfterFlush sets a hook that runs in Subscribe between the live
// subscription becoming active and the catch-up from the stream. Set it
// before subscribing.
func SetAfterFlush(l *Listener, f func()) { l.afterFlush = f }

// SetParse replaces the parser, to observe which payloads are parsed. Set
// it before subscribing.
func SetParse(l *Listener, f func([]byte, progress.Kind) (*progress.Event, error)) { l.parse = f }

// Deliver runs a run subscription's message handling on one message, as
// its callback does.
func Deliver(s *RunSubscription, subject string, data []byte) { s.deliver(subject, data) }

// DiscoverMsg runs a discovery subscription's callback on one message.
func DiscoverMsg(s *DiscoverySubscription, subject string, data []byte) {
	s.onDiscover(&nats.Msg{Subject: subject, Data: data})
}

// MaxFallbacks is maxFallbacks, for tests.
const MaxFallbacks = maxFallbacks

// RouterPasses is how many times the router goroutine was woken to route
// what the connection's read loop left to it (routerQueue).
func RouterPasses(l *Listener) int64 {
	if q := l.rq.Load(); q != nil {
		return q.passes.Load()
	}
	return 0
}
