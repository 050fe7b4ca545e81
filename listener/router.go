package listener

import (
	"sync"
	"sync/atomic"

	"github.com/nats-io/nats.go"
)

// The event subscription's delivery (ADR 0009, ADR 0022 addendum 11).
//
// nats.go hands every message of an asynchronous subscription from the
// connection's read loop to a goroutine of the subscription's own: at the
// idle rhythm (10,000 runs, an event each every 10 s, a millisecond apart)
// every message woke that goroutine, and with it an idle P's thread, which
// found nothing to do and slept again: about a third of the service's CPU
// per idle event (BENCHMARKS.md, "Idle cost (sixth pass)").
//
// The event subscription is instead a channel subscription whose channel
// nobody waits on: the read loop only appends to it (no wake-up), and the
// connection's Read (routedConn) routes what it holds before it reads the
// socket again, on the read loop's goroutine, so a message is routed before
// anything that arrived after it is read. It routes there only what is
// cheap and cannot wait on the connection: a message of a run that every
// discovery already knows (deliveries into its mailboxes, if any, which
// never block on I/O), while the backlog is short. Anything else (a message discovery
// must see, a backlog of more than inlineMax messages, a route already
// running on the router goroutine) is left to the router goroutine, kicked
// once; it routes in order until the channel is empty. At most one of the
// two routes at a time (rq.mu), each message once, in the order the
// server sent them, as the subscription's goroutine did.
type routerQueue struct {
	ch chan *nats.Msg
	// mu is held by whoever routes: the read loop (routeReady) or the
	// router goroutine (routerLoop). next is a message taken from ch by
	// the read loop and left to the router goroutine: the first it routes.
	mu   sync.Mutex
	next *nats.Msg
	kick chan struct{} // buffered 1: the router goroutine has work
	// passes counts the router goroutine's passes (tests: what the read
	// loop did not route itself).
	passes atomic.Int64
}

// inlineMax is the most messages the read loop routes at once: a longer
// backlog (a burst) is routed on the router goroutine, so that the
// connection goes on reading while it is.
const inlineMax = 64

// routerChanLen is the event subscription's channel's capacity for o: its
// backlog beyond that is dropped by the client (a slow consumer; every run
// then catches up from the stream, afterSlowConsumer). A channel
// subscription has no byte limit of its own, so RouterPendingBytes bounds
// it at 4 KiB a message (a progress document is about 2 KB): by default
// 262,144 messages, 2 MiB of channel.
func routerChanLen(o Options) int {
	n := o.RouterPendingMsgs
	if b := o.RouterPendingBytes / (4 << 10); b < n {
		n = b
	}
	return max(n, 1)
}

func newRouterQueue(n int) *routerQueue {
	return &routerQueue{ch: make(chan *nats.Msg, n), kick: make(chan struct{}, 1)}
}

// wake kicks the router goroutine (no wake-up when it runs already: the
// kick waits in the buffer for its next pass).
func (q *routerQueue) wake() {
	select {
	case q.kick <- struct{}{}:
	default:
	}
}

// routeReady routes what the event subscription's channel holds, on the
// read loop's goroutine, before the connection reads again (routedConn).
// See routerQueue.
func (l *Listener) routeReady() {
	q := l.rq.Load()
	if q == nil || len(q.ch) == 0 {
		return
	}
	if len(q.ch) > inlineMax || !q.mu.TryLock() {
		// A burst, or the router goroutine routes: it goes on until
		// the channel is empty.
		q.wake()
		return
	}
	if q.next != nil {
		q.mu.Unlock()
		q.wake()
		return
	}
	for {
		var m *nats.Msg
		select {
		case m = <-q.ch:
		default:
			q.mu.Unlock()
			return
		}
		if !l.routeInline(m) {
			q.next = m
			q.mu.Unlock()
			q.wake()
			return
		}
	}
}

// routerLoop routes on its own goroutine what the read loop left to it,
// until the listener's context ends.
func (l *Listener) routerLoop(q *routerQueue) {
	defer l.wg.Done()
	for {
		select {
		case <-l.ctx.Done():
			return
		case <-q.kick:
		}
		q.passes.Add(1)
		for {
			q.mu.Lock()
			if m := q.next; m != nil {
				q.next = nil
				l.route(m)
			}
		drain:
			for {
				select {
				case m := <-q.ch:
					l.route(m)
				default:
					break drain
				}
			}
			q.mu.Unlock()
			// The read loop leaves what it finds while this one routes
			// (TryLock): look again after the unlock.
			if len(q.ch) == 0 || l.ctx.Err() != nil {
				break
			}
		}
	}
}

// routeInline routes m as route would, and reports true, when doing so
// only delivers it to its run's subscriptions, if any: every discovery
// knows the run (a run tracked, or one a discovery ignores, with none to
// deliver to). Otherwise it does nothing and reports false (m is for the
// router goroutine).
func (l *Listener) routeInline(m *nats.Msg) bool {
	runID := lastToken(m.Subject)
	l.routeMu.RLock()
	subs, disc := l.routes[runID], l.discs
	l.routeMu.RUnlock()
	for _, d := range disc {
		if !d.known(runID) {
			return false
		}
	}
	for _, s := range subs {
		s.deliver(m.Subject, m.Data)
	}
	return true
}

// routerHook is what the connections' reads call (routedConn): the
// Listener's routeReady once it exists (the dialer is made before it).
type routerHook struct {
	l atomic.Pointer[Listener]
}

func (h *routerHook) beforeRead() {
	if l := h.l.Load(); l != nil {
		l.routeReady()
	}
}
