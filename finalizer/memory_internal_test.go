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
// demand (a latch). The registry's trackers live inside their entries
// (TestEntrySize); this is a tracker made on its own.
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
//
// Objects above 512 bytes that hold pointers carry an 8-byte header in
// their allocation (Go 1.22 on), so 888 bytes is the most that fits the
// class: at 896 a tracker made on its own took 1,024 (TestTrackerHeldMemory).
// The entry that holds the registry's trackers has the same header.
func TestTrackerSize(t *testing.T) {
	if n := unsafe.Sizeof(Tracker{}); n+8 > 896 {
		t.Errorf("Tracker is %d bytes: with its 8-byte header above the 896-byte size class (128 bytes more per tracked run)", n)
	}
}

// TestEntrySize keeps a registry entry (one per tracked run; since the
// fifth pass of issue 12 its tracker, mailbox and listener subscription
// inside it) within the allocator's 1,536-byte size class: 1,472 bytes
// and the 8-byte header, where the four apart took 896 + 288 + 160 + 112,
// with five closures, a pointer and three slices of one of their own
// (TestHeapObjectsPerRun).
func TestEntrySize(t *testing.T) {
	if n := unsafe.Sizeof(entry{}); n+8 > 1536 {
		t.Errorf("entry is %d bytes: with its 8-byte header above the 1,536-byte size class", n)
	}
}

// The registry's runs and queries lists of one entry are the entry's
// own self array; adding a second tracker of the run or the query and
// removing either leaves every list right and never writes into another
// entry's array.
func TestEntryListsShareNothingTheyChange(t *testing.T) {
	r := &Registry{trackers: map[trackKey]*entry{}, runs: map[string][]*entry{}, queries: map[string][]*entry{}}
	a := &entry{req: Request{QueryID: "q", RunID: "r", Table: "t1"}}
	b := &entry{req: Request{QueryID: "q", RunID: "r", Table: "t2"}}
	c := &entry{req: Request{QueryID: "q2", RunID: "r2", Table: "t3"}}
	r.add(a)
	if got := r.runs["r"]; len(got) != 1 || &got[0] != &a.self[0] {
		t.Fatalf("a run of one tracker is listed in %p, not its entry's self", got)
	}
	if allocs := testing.AllocsPerRun(10, func() { r.add(c); r.remove(c) }); allocs != 0 {
		t.Errorf("adding and removing a run's only tracker allocated %v times", allocs)
	}
	r.add(b)
	r.add(c)
	if got := r.runs["r"]; len(got) != 2 || got[0] != a || got[1] != b || a.self[0] != a || b.self[0] != b {
		t.Fatalf("runs[r] = %v, selves %v %v", got, a.self, b.self)
	}
	r.remove(a)
	if got := r.runs["r"]; len(got) != 1 || got[0] != b || a.self[0] != a {
		t.Fatalf("after removing a: runs[r] = %v, a.self = %v", got, a.self)
	}
	if got := r.queries["q"]; len(got) != 1 || got[0] != b {
		t.Fatalf("after removing a: queries[q] = %v", got)
	}
	r.remove(b)
	if _, ok := r.runs["r"]; ok || len(r.queries["q"]) != 0 || len(r.runs["r2"]) != 1 {
		t.Fatalf("runs %v queries %v", r.runs, r.queries)
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
