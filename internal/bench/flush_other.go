//go:build !linux

package bench

// syncDisks does nothing here: the bench's flush before the latency
// phase is Linux's (its CHECKPOINT still runs).
func syncDisks() {}

// dirtyBytes is not known here.
func dirtyBytes() int64 { return -1 }
