package peerowner

import (
	"errors"
	"io"
	"net"
	"os"
	"runtime"
	"testing"
	"time"
)

// TestDialerSendsNothingToAnotherUsersServer: the dialer keeps a
// connection to a server of the expected user and closes, before a byte
// is sent, one to a server of another user (a squatter on the port of a
// stopped service), for IPv4, IPv6 and a dual-stack listener alike.
func TestDialerSendsNothingToAnotherUsersServer(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("the owner of a peer is told on Linux only")
	}
	me := uint32(os.Getuid())
	for _, c := range []struct{ listen, dial string }{
		{"127.0.0.1:0", "127.0.0.1"},
		{"[::1]:0", "::1"},
		{":0", "127.0.0.1"}, // dual stack: the server's end is in /proc/net/tcp6 as ::ffff:127.0.0.1
	} {
		ln, err := net.Listen("tcp", c.listen)
		if err != nil {
			t.Logf("%s: %v (skipped)", c.listen, err)
			continue
		}
		got := make(chan int, 4)
		go func() {
			for {
				s, err := ln.Accept()
				if err != nil {
					return
				}
				_ = s.SetReadDeadline(time.Now().Add(5 * time.Second))
				n, _ := io.Copy(io.Discard, s)
				_ = s.Close()
				got <- int(n)
			}
		}()
		addr := net.JoinHostPort(c.dial, portOf(ln))

		conn, err := Dialer{UID: me, Timeout: time.Second}.Dial("tcp", addr)
		if err != nil {
			t.Fatalf("%s: the owner's own server refused: %v", c.listen, err)
		}
		_, _ = conn.Write([]byte("CONNECT"))
		_ = conn.Close()
		if n := <-got; n != len("CONNECT") {
			t.Errorf("%s: the server got %d bytes, want 7", c.listen, n)
		}

		_, err = Dialer{UID: me + 1, Timeout: time.Second, What: "the login"}.Dial("tcp", addr)
		var re *RefusedError
		if !errors.As(err, &re) {
			t.Fatalf("%s: another user's server: %v, want a refusal", c.listen, err)
		}
		if n := <-got; n != 0 {
			t.Errorf("%s: the other user's server got %d bytes", c.listen, n)
		}
		t.Logf("%s: %v", c.listen, err)
		_ = ln.Close()
	}
}

func portOf(ln net.Listener) string {
	_, p, _ := net.SplitHostPort(ln.Addr().String())
	return p
}
