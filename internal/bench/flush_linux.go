package bench

import (
	"bufio"
	"os"
	"strconv"
	"strings"
	"syscall"
)

// syncDisks is sync(2): every dirty page of the page cache written to
// its disk. Linux's waits for the writes.
func syncDisks() { syscall.Sync() }

// dirtyBytes is the page cache's dirty bytes (/proc/meminfo's Dirty), or
// -1 when it cannot be read.
func dirtyBytes() int64 {
	f, err := os.Open("/proc/meminfo")
	if err != nil {
		return -1
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		rest, ok := strings.CutPrefix(sc.Text(), "Dirty:")
		if !ok {
			continue
		}
		kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
		if err != nil {
			return -1
		}
		return kb << 10
	}
	return -1
}
