//go:build unix

package listener_test

import (
	"syscall"
	"time"
)

// cpuTime is the CPU time the test process used so far (user and system):
// what the work costs on a machine other processes share, where the wall
// time mostly measures them.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
