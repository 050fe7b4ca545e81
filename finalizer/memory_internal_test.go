package finalizer

import (
	"context"
	"fmt"
	"io"
	"runtime"
	"testing"
	"time"
	"unsafe"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/finalizer-dev/finalizer/internal/heaptest"
)

// TestTrackerHeldMemory bounds what a tracker holds on the heap with the
// service's JSON logger, as the registry makes it (the shared settings
// made once): a logger made with the run's fields per tracker held an
// encoder and its buffer (more than a kilobyte) for every tracked run
// (issue 12): 2,413 bytes per tracker then, 1,117 without it, 896 with
// the shared settings behind one pointer and the done channel made on
// demand (a latch).
func TestTrackerHeldMemory(t *testing.T) {
	enc := zapcore.NewJSONEncoder(zap.NewProductionEncoderConfig())
	log := zap.New(zapcore.NewCore(enc, zapcore.AddSync(io.Discard), zap.InfoLevel))
	m := NewMetrics(nil, nil)
	sh := sharedOf(TrackerConfig{Logger: log, Metrics: m})
	const n = 2000
	keep := make([]*Tracker, n)
	per := heaptest.PerItem(n, func() {
		for i := range keep {
			keep[i] = newTrackerShared(TrackerConfig{QueryID: "q", RunID: "r", Table: "t"}, sh)
		}
	})
	t.Logf("%.0f bytes of heap per tracker", per)
	if per > 920 {
		t.Errorf("a tracker holds %.0f bytes of heap: want at most 920 (the 896-byte size class)", per)
	}
	runtime.KeepAlive(keep)
}

// TestPerTableMetricsMemory bounds what the per-table figures hold (the
// verdict and the rows dropped by the watermark, a table each run): a
// labelled counter per table cost about 450 bytes of heap (issue 12).
func TestPerTableMetricsMemory(t *testing.T) {
	m := NewMetrics(nil, nil)
	const n = 5000
	tables := make([]string, n)
	for i := range tables {
		tables[i] = fmt.Sprintf("bronze.table_%06d", i)
	}
	at := time.Unix(1_700_000_000, 0)
	per := heaptest.PerItem(n, func() {
		for _, table := range tables {
			m.ObserveVerdict(table, at)
			m.AddRowsDropped(table, 3)
		}
	})
	t.Logf("%.0f bytes of heap per table", per)
	if per > 200 {
		t.Errorf("the per-table metrics hold %.0f bytes per table: want at most 200", per)
	}
	if got := m.RowsDropped(tables[7]); got != 3 {
		t.Errorf("RowsDropped = %d, want 3", got)
	}
	runtime.KeepAlive(m)
}

// TestTrackerSize keeps the tracker, allocated once per tracked run and
// table, within the allocator's 896-byte size class: at 1,040 bytes it
// took 1,152, and it took 1,024 until the settings every tracker shares
// went behind one pointer (issue 12). Group new small fields with the
// others of their kind (the bools sit together), or put a setting common
// to every tracker in trackerShared, before raising this.
func TestTrackerSize(t *testing.T) {
	if n := unsafe.Sizeof(Tracker{}); n > 896 {
		t.Errorf("Tracker is %d bytes: above the 896-byte size class (128 bytes more per tracked run)", n)
	}
}

// TestEntrySize keeps a registry entry (one per tracked run) within the
// allocator's 288-byte size class, and its signals without channels
// until someone waits (issue 12: two channels of 96 bytes each before).
func TestEntrySize(t *testing.T) {
	if n := unsafe.Sizeof(entry{}); n > 288 {
		t.Errorf("entry is %d bytes: above the 288-byte size class", n)
	}
}

// The trackers a registry starts share one copy of the settings.
func TestTrackersShareTheirSettings(t *testing.T) {
	r := NewRegistry(RegistryConfig{})
	defer func() { _ = r.Close(context.Background()) }()
	if a, b := r.trackerShared(), r.trackerShared(); a != b || a == nil {
		t.Fatalf("the registry's shared settings are %p and %p", a, b)
	}
}
