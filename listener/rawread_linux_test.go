package listener

import (
	"bytes"
	"errors"
	"io"
	"net"
	"os"
	"testing"
	"time"
)

// quietReadPair returns a connection dialed through quietReadDialer and
// the server's end of it.
func quietReadPair(t *testing.T, inner *countingDialer) (net.Conn, net.Conn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	accepted := make(chan net.Conn, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			accepted <- nil
			return
		}
		accepted <- c
	}()
	d := quietReadDialer{}
	if inner != nil {
		d.inner = inner
	}
	c, err := d.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	srv := <-accepted
	if srv == nil {
		t.Fatal("accept failed")
	}
	t.Cleanup(func() { c.Close(); srv.Close() })
	return c, srv
}

type countingDialer struct{ n int }

func (d *countingDialer) Dial(network, address string) (net.Conn, error) {
	d.n++
	return net.Dial(network, address)
}

// The raw read reads what a net.Conn reads: the bytes in order, the read
// deadline as a timeout, io.EOF at the peer's close, an error once closed;
// a custom dialer still dials.
func TestQuietReadConnReadsAsNetConn(t *testing.T) {
	inner := &countingDialer{}
	c, srv := quietReadPair(t, inner)
	if inner.n != 1 {
		t.Fatalf("the inner dialer dialed %d times, want 1", inner.n)
	}
	rc, isRouted := c.(*routedConn)
	if !isRouted {
		t.Fatalf("dialed %T, want *routedConn", c)
	}
	if _, isQuiet := rc.Conn.(*quietReadConn); !isQuiet {
		t.Fatalf("dialed %T inside, want *quietReadConn", rc.Conn)
	}

	// A read waits for the data (the socket is empty when it starts).
	want := bytes.Repeat([]byte("MSG finalizer.x 1 5\r\nhello\r\n"), 5000) // 140 KB: several reads
	go func() {
		time.Sleep(20 * time.Millisecond)
		_, _ = srv.Write(want)
	}()
	got := make([]byte, len(want))
	if _, err := io.ReadFull(c, got); err != nil {
		t.Fatalf("read: %v", err)
	}
	if !bytes.Equal(got, want) {
		t.Fatal("read other bytes than written")
	}
	if n, err := c.Read(nil); n != 0 || err != nil {
		t.Fatalf("empty read: %d, %v", n, err)
	}

	// The read deadline.
	if err := c.SetReadDeadline(time.Now().Add(30 * time.Millisecond)); err != nil {
		t.Fatal(err)
	}
	_, err := c.Read(got)
	var ne net.Error
	if !errors.As(err, &ne) || !ne.Timeout() || !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("read past the deadline: %v, want a timeout", err)
	}
	if err := c.SetReadDeadline(time.Time{}); err != nil {
		t.Fatal(err)
	}

	// Writes are the connection's own.
	if _, err := c.Write([]byte("PING\r\n")); err != nil {
		t.Fatal(err)
	}
	ping := make([]byte, 6)
	if _, err := io.ReadFull(srv, ping); err != nil || string(ping) != "PING\r\n" {
		t.Fatalf("the server read %q, %v", ping, err)
	}

	// The peer's close is io.EOF, after what it wrote.
	_, _ = srv.Write([]byte("+OK\r\n"))
	srv.Close()
	ok := make([]byte, 5)
	if _, err := io.ReadFull(c, ok); err != nil || string(ok) != "+OK\r\n" {
		t.Fatalf("read %q, %v before the end", ok, err)
	}
	if n, err := c.Read(got); n != 0 || err != io.EOF {
		t.Fatalf("read at the peer's close: %d, %v, want io.EOF", n, err)
	}

	// Closed by this side: an error, net.ErrClosed as net.Conn says.
	c.Close()
	if _, err := c.Read(got); !errors.Is(err, net.ErrClosed) {
		t.Fatalf("read after Close: %v, want net.ErrClosed", err)
	}
}

// A read blocked on an empty socket returns when the connection is closed
// (nats.go closes it under its read loop on a reconnect and on Close).
func TestQuietReadConnCloseUnblocksRead(t *testing.T) {
	c, _ := quietReadPair(t, nil)
	done := make(chan error, 1)
	go func() {
		_, err := c.Read(make([]byte, 64))
		done <- err
	}()
	time.Sleep(20 * time.Millisecond)
	c.Close()
	select {
	case err := <-done:
		if !errors.Is(err, net.ErrClosed) {
			t.Fatalf("read: %v, want net.ErrClosed", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the read did not return after Close")
	}
}
