//go:build unix

// Package cputime reads the CPU time the process has used: what a piece of
// work costs on a machine other processes share, where the wall time
// mostly measures them. The bench's idle phase and the tests that bound a
// cost in CPU read it.
package cputime

import (
	"syscall"
	"time"
)

// Process returns the user and system CPU time of the whole process so
// far, or 0 when the system does not say.
func Process() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// Switches returns the context switches of all the process's threads so
// far, voluntary (a thread that waited: a futex sleep, the network
// poller) and involuntary, or 0 when the system does not say.
func Switches() int64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return int64(ru.Nvcsw + ru.Nivcsw)
}
