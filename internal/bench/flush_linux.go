package bench

import "syscall"

// syncDisks is sync(2): every dirty page of the page cache written to
// its disk. Linux's waits for the writes.
func syncDisks() { syscall.Sync() }

// dirtyBytes is the page cache's dirty bytes (/proc/meminfo's Dirty), or
// -1 when it cannot be read.
func dirtyBytes() int64 {
	b, ok := procKiB("/proc/meminfo", "Dirty:")
	if !ok {
		return -1
	}
	return int64(b)
}
