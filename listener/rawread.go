package listener

import (
	"net"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
)

// quietReadDialer makes the NATS connection's TCP connections (reconnects
// too) through inner, or a net.Dialer bounded by nats.DefaultTimeout when
// inner is nil, and gives the client each one wrapped by quietRead: a TCP
// connection whose reads do not enter the Go scheduler's syscall path
// (Linux; elsewhere the connection as dialed). Writes, deadlines, Close
// and the rest are the connection's own.
//
// Why (BENCHMARKS.md, "Idle cost (sixth pass)", ADR 0022 addendum 8): at
// the idle rhythm (10,000 runs, an event each every 10 s, one at a time
// a millisecond apart) every P is idle between two events, so the
// runtime's monitor thread (sysmon) sleeps deeply, and each read(2) of the
// client's read loop woke it (entersyscall), after which it polled every
// 20 µs until the process was idle again: about a quarter of the service
// process's CPU at that rhythm, as context switches. A read of a
// non-blocking socket never blocks, so nothing needs sysmon to take the P
// back from it: quietRead issues it as a raw system call through the
// connection's syscall.RawConn, and waits for readiness on the runtime's
// network poller exactly as net.Conn.Read does.
//
// Every connection is also a routedConn: its Read first routes what the
// event subscription holds (routerHook, see routerQueue).
type quietReadDialer struct {
	inner nats.CustomDialer
	hook  *routerHook
}

// Dial dials and wraps the connection (a *net.TCPConn; anything else, e.g.
// a custom dialer's own type, is returned as is).
func (d quietReadDialer) Dial(network, address string) (net.Conn, error) {
	var c net.Conn
	var err error
	if d.inner != nil {
		c, err = d.inner.Dial(network, address)
	} else {
		c, err = (&net.Dialer{Timeout: nats.DefaultTimeout}).Dial(network, address)
	}
	if err != nil {
		return nil, err
	}
	return &routedConn{Conn: quietRead(c), hook: d.hook}, nil
}

// SkipTLSHandshake forwards inner's answer (nats.go asks a custom dialer
// whether it wraps TLS itself).
func (d quietReadDialer) SkipTLSHandshake() bool {
	sd, ok := d.inner.(interface{ SkipTLSHandshake() bool })
	return ok && sd.SkipTLSHandshake()
}

// routedConn is a NATS connection whose Read first routes the messages the
// client's read loop put into the event subscription's channel
// (Listener.routeReady): the read loop's goroutine routes them, instead of
// waking a goroutine of their own. It routes only once the client is
// connected: nats.go sets a deadline for its connect (its INFO, CONNECT and
// first PONG, read holding the connection's lock) and clears it for its
// read loop, which sets none.
type routedConn struct {
	net.Conn
	hook     *routerHook
	deadline atomic.Bool // a read deadline is set: the client connects
}

// Read routes what waits (unless a deadline is set), then reads.
func (c *routedConn) Read(p []byte) (int, error) {
	if c.hook != nil && !c.deadline.Load() {
		c.hook.beforeRead()
	}
	return c.Conn.Read(p)
}

// SetDeadline sets the connection's deadlines and notes the read's.
func (c *routedConn) SetDeadline(t time.Time) error {
	c.deadline.Store(!t.IsZero())
	return c.Conn.SetDeadline(t)
}

// SetReadDeadline sets the read deadline and notes it.
func (c *routedConn) SetReadDeadline(t time.Time) error {
	c.deadline.Store(!t.IsZero())
	return c.Conn.SetReadDeadline(t)
}
