package listener

import (
	"net"

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
type quietReadDialer struct {
	inner nats.CustomDialer
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
	return quietRead(c), nil
}

// SkipTLSHandshake forwards inner's answer (nats.go asks a custom dialer
// whether it wraps TLS itself).
func (d quietReadDialer) SkipTLSHandshake() bool {
	sd, ok := d.inner.(interface{ SkipTLSHandshake() bool })
	return ok && sd.SkipTLSHandshake()
}
