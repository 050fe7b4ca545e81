//go:build unix

package bench

import "syscall"

// alive reports whether pid names a process (a zombie included: a child
// the bench did not reap is a fault too).
func alive(pid int) bool {
	return syscall.Kill(pid, 0) == nil
}
