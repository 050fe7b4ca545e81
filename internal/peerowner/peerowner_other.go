//go:build !linux

package peerowner

import "net"

// supported says whether PeerUID can tell the owner of a peer here.
const supported = false

// PeerUID cannot tell the owner of a peer outside Linux.
func PeerUID(net.Conn) (uint32, error) { return 0, ErrUnknown }

// FileUID cannot tell the owner of a file outside Linux.
func FileUID(string) (uint32, error) { return 0, ErrUnknown }
