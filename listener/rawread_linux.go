package listener

import (
	"errors"
	"io"
	"net"
	"os"
	"syscall"
	"unsafe"
)

// quietRead returns c with reads issued as raw system calls when c is a
// *net.TCPConn, c itself otherwise.
func quietRead(c net.Conn) net.Conn {
	tc, ok := c.(*net.TCPConn)
	if !ok {
		return c
	}
	rc, err := tc.SyscallConn()
	if err != nil {
		return c
	}
	return &quietReadConn{TCPConn: tc, rc: rc}
}

// quietReadConn is a TCP connection whose Read does not go through
// entersyscall (see quietReadDialer).
type quietReadConn struct {
	*net.TCPConn
	rc syscall.RawConn
}

// Read reads as net.Conn.Read does: what is there, at least one byte, or
// waits for the socket to be readable on the network poller (the read
// deadline applies), io.EOF at the peer's end.
func (c *quietReadConn) Read(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	var n int
	var errno syscall.Errno
	err := c.rc.Read(func(fd uintptr) bool {
		for {
			// The socket is non-blocking (the network poller's): the
			// call returns at once, so it needs no P handed off.
			r, _, e := syscall.RawSyscall(syscall.SYS_READ, fd, uintptr(unsafe.Pointer(&p[0])), uintptr(len(p)))
			switch e {
			case syscall.EINTR:
				continue
			case syscall.EAGAIN:
				return false // wait until readable
			}
			n, errno = int(r), e
			return true
		}
	})
	var oe *net.OpError
	if errors.As(err, &oe) {
		err = oe.Err // the RawConn's "raw-read" wrapping
	}
	if err == nil && errno != 0 {
		err = os.NewSyscallError("read", errno)
	}
	if err != nil {
		return 0, &net.OpError{Op: "read", Net: "tcp", Source: c.LocalAddr(), Addr: c.RemoteAddr(), Err: err}
	}
	if n == 0 {
		return 0, io.EOF
	}
	return n, nil
}
