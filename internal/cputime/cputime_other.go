//go:build !unix

// Package cputime reads the CPU time the process has used (see
// cputime_unix.go); elsewhere it is unknown.
package cputime

import "time"

// Process is unknown here: it returns 0 (the bench's idle phase reports
// 0, and the tests that bound a cost in CPU skip where it matters).
func Process() time.Duration { return 0 }

// Switches returns 0: no getrusage.
func Switches() int64 { return 0 }
