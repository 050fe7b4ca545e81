package finalizer_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/finalizer-dev/finalizer/finalizer"
	"github.com/finalizer-dev/finalizer/listener"
)

// downMarker is a fakeBus whose stream's state cannot be read while down
// (NATS down), counting the reads.
type downMarker struct {
	*fakeBus
	mu    sync.Mutex
	down  bool
	asked int
}

func (b *downMarker) StreamPosition(context.Context) (listener.StreamPosition, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.asked++
	if b.down {
		return listener.StreamPosition{}, errDown
	}
	return listener.StreamPosition{Created: streamCreated}, nil
}

// setDown puts NATS down or back up.
func (b *downMarker) setDown(down bool) {
	b.mu.Lock()
	b.down = down
	b.mu.Unlock()
}

// reads is how many times the stream's state was asked for.
func (b *downMarker) reads() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.asked
}

// rewoundInAnOutage is a rig whose stream's state cannot be read (NATS
// down) and whose tables t_00, t_01, ... (n of them) were rewound to
// until at at, heard live, once each table's first read of the stream's
// state was tried.
func rewoundInAnOutage(t *testing.T, n int) (r *rig, dm *downMarker, until, at time.Time) {
	t.Helper()
	dm = &downMarker{fakeBus: newFakeBus(), down: true}
	r = newRigOver(t, dm, &batchFake{fakeStore: newFakeStore()}, rigOptions{})
	until, at = utc("2026-09-28T14:00:00Z"), utc("2026-09-29T00:00:00Z")
	for i := range n {
		table := fmt.Sprintf("t_%02d", i)
		r.store.rewind(table, until, at)
		r.reg.Rewound(table, until, at)
	}
	eventually(t, "every table's first read", func() bool { return dm.reads() >= n })
	return r, dm, until, at
}

// TestAnOutageWarnsOncePerRewoundTableThenCounts: with NATS down, every
// rewound table's read of the event stream's state failed and warned
// again at every retry (every 30 s once backed off): 1,000 rewound tables
// wrote 1,000 lines each 30 s. Each table's first failure warns, naming
// it; the retries after it are at debug level, and one warning every 30 s
// at most says how many tables wait. A table whose read answered warns
// again at its next rewind's first failure.
func TestAnOutageWarnsOncePerRewoundTableThenCounts(t *testing.T) {
	const tables = 50
	r, dm, until, at := rewoundInAnOutage(t, tables)
	// Five minutes of the outage, a second at a time: each table's read
	// is tried again after 1, 2, 4, 8, 16 and then every 30 s.
	const outage = 5 * time.Minute
	for range int(outage / time.Second) {
		r.clock.Advance(time.Second)
		time.Sleep(time.Millisecond)
	}
	if n := dm.reads(); n < 4*tables {
		t.Fatalf("%d reads in the outage, want every table's tried again several times (%d at least)", n, 4*tables)
	}
	warns := r.logs.FilterLevelExact(zapcore.WarnLevel)
	perTable := warns.FilterMessageSnippet("after hearing a rewind, retrying").Len()
	if perTable != tables {
		t.Errorf("%d warnings naming a table, want %d: one per table, its first failure", perTable, tables)
	}
	counts := warns.FilterMessageSnippet("after hearing rewinds, still retrying").All()
	if max := int(outage/(30*time.Second)) + 1; len(counts) == 0 || len(counts) > max {
		t.Fatalf("%d warnings counting the tables that wait, want 1 to %d", len(counts), max)
	}
	if n := counts[len(counts)-1].ContextMap()["tables_waiting"]; n != int64(tables) {
		t.Errorf("the last count says %v tables wait, want %d", n, tables)
	}
	if n := warns.Len(); n > tables+len(counts) {
		t.Errorf("%d warnings in the outage, want at most %d", n, tables+len(counts))
	}

	// NATS back: every read answers. A later rewind's first failure warns
	// again.
	dm.setDown(false)
	eventually(t, "every table's read answered", func() bool {
		r.clock.Advance(30 * time.Second)
		return r.logs.FilterMessageSnippet("the event stream's state when the rewind was heard").Len() == tables
	})
	dm.setDown(true)
	at2 := at.Add(time.Hour)
	r.store.rewind("t_00", until, at2)
	r.reg.Rewound("t_00", until, at2)
	eventually(t, "the later rewind's first failure warned", func() bool {
		return r.logs.FilterLevelExact(zapcore.WarnLevel).FilterMessageSnippet("after hearing a rewind, retrying").Len() == tables+1
	})
}

// The fakes' stream markers are StreamMarkers: one that is not (its
// method renamed) would be silently not asked.
var (
	_ finalizer.StreamMarker = (*downMarker)(nil)
	_ finalizer.StreamMarker = (*markingBus)(nil)
	_ finalizer.StreamMarker = (*scriptedMarker)(nil)
)

// TestNATSBackWarnsOfLateReadsForAFewTablesThenCounts: when NATS came
// back after an outage, every rewound table's read of the event stream's
// state answered late, and each warned "could be read only late": 1,000
// lines for 1,000 tables rewound. The first few warn, naming their
// table; the others are at debug level, and one warning counts them once
// no table waits. The next outage names its first tables again.
func TestNATSBackWarnsOfLateReadsForAFewTablesThenCounts(t *testing.T) {
	const tables, named = 50, 3
	r, dm, until, at := rewoundInAnOutage(t, tables)
	dm.setDown(false)
	late := func() *observer.ObservedLogs { return r.logs.FilterMessageSnippet("could be read only late") }
	eventually(t, "every table's late read answered", func() bool {
		r.clock.Advance(time.Second)
		return late().FilterLevelExact(zapcore.DebugLevel).Len()+late().FilterLevelExact(zapcore.WarnLevel).Len() >= tables
	})
	eventually(t, "the late reads counted", func() bool { return late().FilterMessageSnippet("for more tables").Len() == 1 })
	warns := late().FilterLevelExact(zapcore.WarnLevel)
	if n := warns.Len() - 1; n != named {
		t.Errorf("%d warnings of a late read naming a table, want %d (then one counting the others)", n, named)
	}
	if n := late().FilterLevelExact(zapcore.DebugLevel).Len(); n != tables-named {
		t.Errorf("%d late reads at debug level, want %d", n, tables-named)
	}
	count := late().FilterMessageSnippet("for more tables").All()[0]
	if n := count.ContextMap()["tables"]; n != int64(tables-named) {
		t.Errorf("the count says %v tables, want %d", n, tables-named)
	}

	// The next outage's first late reads are named again.
	dm.setDown(true)
	t00 := func() int {
		return late().FilterLevelExact(zapcore.WarnLevel).FilterField(zap.String("table", "t_00")).Len()
	}
	before, namedBefore := dm.reads(), t00()
	at2 := at.Add(time.Hour)
	r.store.rewind("t_00", until, at2)
	r.reg.Rewound("t_00", until, at2)
	eventually(t, "the later rewind's read failed", func() bool { return dm.reads() > before })
	dm.setDown(false)
	eventually(t, "the later rewind's late read named", func() bool {
		r.clock.Advance(time.Second)
		return t00() == namedBefore+1
	})
}
