//go:build linux

package peerowner

import (
	"bufio"
	"encoding/binary"
	"fmt"
	"net"
	"net/netip"
	"os"
	"strconv"
	"strings"
	"syscall"
)

// supported says whether PeerUID can tell the owner of a peer here.
const supported = true

// PeerUID returns the uid owning the server's end of c, a TCP connection
// to a socket of this machine: the row of /proc/net/tcp (or tcp6) whose
// local address is c's remote address and whose remote address is c's
// local one. An accepted socket carries the uid of the listening one.
func PeerUID(c net.Conn) (uint32, error) {
	la, lok := c.LocalAddr().(*net.TCPAddr)
	ra, rok := c.RemoteAddr().(*net.TCPAddr)
	if !lok || !rok {
		return 0, ErrUnknown
	}
	local, remote := ra.AddrPort(), la.AddrPort() // the server's view
	for _, table := range []string{"/proc/net/tcp", "/proc/net/tcp6"} {
		uid, found, err := scan(table, local, remote)
		if err != nil {
			return 0, err
		}
		if found {
			return uid, nil
		}
	}
	return 0, ErrUnknown
}

// scan looks for the connection local->remote in one /proc/net table.
// Rows in TIME_WAIT (06) are left out: the kernel shows them with uid 0,
// and on loopback a new connection may reuse the ports of one. Of the
// others, the server's end is ESTABLISHED (01) or, before the client's
// ACK is in, SYN_RECV (03, shown with the listener's uid).
func scan(table string, local, remote netip.AddrPort) (uint32, bool, error) {
	f, err := os.Open(table)
	if os.IsNotExist(err) {
		return 0, false, nil
	}
	if err != nil {
		return 0, false, err
	}
	defer f.Close()
	six := strings.HasSuffix(table, "6")
	wantL, wantR := encode(local, six), encode(remote, six)
	sc := bufio.NewScanner(f)
	sc.Scan() // the header
	for sc.Scan() {
		fs := strings.Fields(sc.Text())
		if len(fs) < 8 || fs[1] != wantL || fs[2] != wantR || (fs[3] != "01" && fs[3] != "03") {
			continue
		}
		uid, err := strconv.ParseUint(fs[7], 10, 32)
		if err != nil {
			return 0, false, fmt.Errorf("%s: %w", table, err)
		}
		return uint32(uid), true, nil
	}
	return 0, false, sc.Err()
}

// encode writes an address as the kernel prints it in /proc/net/tcp*:
// the address's 32-bit words in host byte order as %08X, then :%04X.
func encode(ap netip.AddrPort, six bool) string {
	a := ap.Addr().Unmap()
	var raw []byte
	switch {
	case six:
		b := netip.AddrFrom16(a.As16()).As16() // an IPv4 address as ::ffff:a.b.c.d
		raw = b[:]
	case a.Is4():
		b := a.As4()
		raw = b[:]
	default:
		return ""
	}
	var sb strings.Builder
	for i := 0; i < len(raw); i += 4 {
		fmt.Fprintf(&sb, "%08X", binary.NativeEndian.Uint32(raw[i:i+4]))
	}
	fmt.Fprintf(&sb, ":%04X", ap.Port())
	return sb.String()
}

// FileUID returns the uid owning a file.
func FileUID(path string) (uint32, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return 0, err
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return 0, ErrUnknown
	}
	return st.Uid, nil
}
