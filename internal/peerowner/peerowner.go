// Package peerowner tells which local user owns the other end of a TCP
// connection to this machine, so that a client sends a secret only to a
// server run by the user it expects. A password sent in the clear (NATS's
// CONNECT) goes to whoever listens on the port: any local user can listen
// on a loopback port while the real server is stopped.
package peerowner

import (
	"errors"
	"fmt"
	"net"
	"time"
)

// ErrUnknown is returned where the owner of a peer cannot be told (not
// Linux, or the peer's socket is not on this machine).
var ErrUnknown = errors.New("the owner of the server's socket cannot be told")

// Dialer dials TCP and keeps a connection only when the server's end of it
// belongs to the user UID; otherwise it closes it before a byte is sent.
// It implements nats.CustomDialer, so reconnects are checked too.
type Dialer struct {
	UID     uint32
	Timeout time.Duration
	// What names the secret in the refusal ("the login of nats-login.json").
	What string
}

// Dial connects and checks the owner of the server's socket.
func (d Dialer) Dial(network, address string) (net.Conn, error) {
	nd := net.Dialer{Timeout: d.Timeout}
	c, err := nd.Dial(network, address)
	if err != nil {
		return nil, err
	}
	if !supported {
		return c, nil // no way to tell: as before (SECURITY.md says so)
	}
	uid, err := PeerUID(c)
	if err == nil && uid == d.UID {
		return c, nil
	}
	_ = c.Close()
	if err != nil {
		return nil, &RefusedError{Address: address, What: d.What, Err: err}
	}
	return nil, &RefusedError{Address: address, What: d.What, Err: fmt.Errorf("the server's socket belongs to uid %d, not to uid %d", uid, d.UID)}
}

// RefusedError says that a connection was closed unused because its
// server is not run by the expected user.
type RefusedError struct {
	Address, What string
	Err           error
}

func (e *RefusedError) Error() string {
	what := e.What
	if what == "" {
		what = "the credentials"
	}
	return fmt.Sprintf("%s: %v; %s not sent (another local user may be listening on the port while the service is stopped)", e.Address, e.Err, what)
}

func (e *RefusedError) Unwrap() error { return e.Err }
