//go:build unix

package pgtest

import (
	"errors"
	"syscall"
)

// alive reports whether a process with that pid exists.
func alive(pid int) bool {
	err := syscall.Kill(pid, 0)
	return err == nil || errors.Is(err, syscall.EPERM)
}
