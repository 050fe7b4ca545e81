package actions

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
)

// TestMarkerAtomic writes a marker over and over (256 KiB bodies, each
// different) while readers read it in a loop: a reader sees no file or a
// whole body of one write, never a partial or mixed file; no temporary
// file is left.
func TestMarkerAtomic(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "bronze.orders", "2026-09-28T14", "_SUCCESS")
	const size = 256 << 10
	body := func(i int) []byte {
		b := bytes.Repeat([]byte{byte('a' + i%26)}, size)
		copy(b, fmt.Sprintf("%08d", i))
		return b
	}
	var stop atomic.Bool
	var reads, missing atomic.Int64
	var wg sync.WaitGroup
	for range 3 {
		wg.Go(func() {
			for !stop.Load() {
				raw, err := os.ReadFile(path)
				if errors.Is(err, fs.ErrNotExist) {
					missing.Add(1)
					continue
				}
				if err != nil {
					t.Error(err)
					return
				}
				reads.Add(1)
				if len(raw) != size {
					t.Errorf("a reader saw %d bytes, want %d: a partial marker", len(raw), size)
					return
				}
				var i int
				if _, err := fmt.Sscanf(string(raw[:8]), "%08d", &i); err != nil || !bytes.Equal(raw, body(i)) {
					t.Errorf("a reader saw a mixed marker (%q...)", raw[:8])
					return
				}
			}
		})
	}
	for i := range 60 {
		if err := (FileMarkers{}).WriteMarker(context.Background(), path, body(i)); err != nil {
			t.Fatal(err)
		}
	}
	stop.Store(true)
	wg.Wait()
	if reads.Load() == 0 {
		t.Error("the readers never read the marker")
	}
	entries, err := os.ReadDir(filepath.Dir(path))
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != 1 {
		t.Errorf("%d entries beside the marker, want the marker alone: %v", len(entries), entries)
	}
	t.Logf("%d whole reads, %d before the first write", reads.Load(), missing.Load())
}
