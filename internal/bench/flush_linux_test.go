package bench

import "testing"

// TestDirtyBytes reads the page cache's dirty bytes from /proc/meminfo.
func TestDirtyBytes(t *testing.T) {
	if d := dirtyBytes(); d < 0 {
		t.Errorf("dirtyBytes() = %d, want /proc/meminfo's Dirty", d)
	}
}
