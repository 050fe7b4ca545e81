// Package heaptest measures what a piece of code keeps on the heap, for
// the tests that bound what the service holds per tracked run or table
// (issue 12).
package heaptest

import "runtime"

// PerItem returns the growth of the live heap across fill, divided by n:
// the bytes each of the n items fill makes still holds after a collection.
// The caller keeps what fill made reachable until PerItem returns (and
// beyond, with runtime.KeepAlive), or it is collected and not counted.
func PerItem(n int, fill func()) float64 {
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	fill()
	runtime.GC()
	runtime.ReadMemStats(&after)
	return (float64(after.HeapAlloc) - float64(before.HeapAlloc)) / float64(n)
}
