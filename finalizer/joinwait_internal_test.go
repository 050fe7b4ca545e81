package finalizer

import (
	"cmp"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"
)

// waitingRegistry is a registry holding only join waits: tables waits
// tables, each with per waits, the first of each failed.
func waitingRegistry(tables, per int) *Registry {
	r := &Registry{joining: map[string][]*joinWait{}}
	at := time.Date(2026, 9, 28, 14, 30, 0, 0, time.UTC)
	for i := range tables {
		table := fmt.Sprintf("silver.t%05d", tables-i) // made in reverse order
		for j := range per {
			w := &joinWait{req: Request{Table: table, QueryID: fmt.Sprintf("q%d", j), RunID: fmt.Sprintf("run-%d-%d", i, j)},
				since: at.Add(time.Duration(j) * time.Second)}
			if j == 0 {
				w.err = errors.New("join feeder: postgresql unavailable")
			}
			r.joining[table] = append(r.joining[table], w)
		}
	}
	r.waitingJoins.Store(int32(len(r.joining)))
	return r
}

// The listing is ordered by table, then in the order the waits began;
// by table and of one table, each table's waits keep that order, unsorted.
func TestJoinWaitsByTableAndOfOneTable(t *testing.T) {
	r := waitingRegistry(3, 2)
	all := r.JoinWaits()
	if len(all) != 6 || !slices.IsSortedFunc(all, func(a, b JoinWait) int {
		return cmp.Or(cmp.Compare(a.Table, b.Table), a.Since.Compare(b.Since))
	}) {
		t.Fatalf("JoinWaits = %+v, want 6 by table then since", all)
	}
	by := r.JoinWaitsByTable()
	if len(by) != 3 {
		t.Fatalf("JoinWaitsByTable has %d tables, want 3", len(by))
	}
	for table, ws := range by {
		if len(ws) != 2 || ws[0].QueryID != "q0" || ws[1].QueryID != "q1" || ws[0].LastError == "" || ws[1].LastError != "" {
			t.Errorf("%s waits %+v, want q0 (failed) then q1", table, ws)
		}
		if got := r.JoinWaitsOf(table); !slices.Equal(got, ws) {
			t.Errorf("JoinWaitsOf(%s) = %+v, want %+v", table, got, ws)
		}
	}
	if ws := r.JoinWaitsOf("silver.none"); ws != nil {
		t.Errorf("JoinWaitsOf a table waiting for none = %+v", ws)
	}
	empty := &Registry{joining: map[string][]*joinWait{}}
	if empty.JoinWaits() != nil || empty.JoinWaitsByTable() != nil || empty.JoinWaitsOf("t") != nil {
		t.Error("a registry where no join waits lists some")
	}
}

// HeldBy is the one wording of a join wait the CLI, the HTTP API and the
// status page show: a UUID query id shortened, a name-like one whole.
func TestJoinWaitHeldBy(t *testing.T) {
	at := time.Date(2026, 9, 28, 14, 30, 0, 0, time.UTC)
	for _, c := range []struct {
		w    JoinWait
		want string
	}{
		{JoinWait{QueryID: "0b0b0b0b-bc9c-4be8-97a9-b135d2943028", QueryName: "region-eu", RunID: "0b7e5a52-9c1d-4e2f-a3b4-c5d6e7f8a9b0",
			Since: at, LastError: "join feeder: postgresql unavailable"},
			"held until query region-eu (run 0b7e5a52) joins its feeders (waiting since 2026-09-28T14:30:00Z; retried: join feeder: postgresql unavailable)"},
		{JoinWait{QueryID: "0b0b0b0b-bc9c-4be8-97a9-b135d2943028", Since: at},
			"held until query 0b0b0b0b joins its feeders (waiting since 2026-09-28T14:30:00Z; retried)"},
		{JoinWait{QueryID: "nightly-backfill-query", Since: at.In(time.FixedZone("x", 3600))},
			"held until query nightly-backfill-query joins its feeders (waiting since 2026-09-28T14:30:00Z; retried)"},
	} {
		if got := c.w.HeldBy(); got != c.want {
			t.Errorf("HeldBy = %q, want %q", got, c.want)
		}
	}
}

// BenchmarkJoinWaits: what a listing of tables pays for the join waits
// (1,000 tables waiting, one wait each: the database down while runs
// start): the sorted listing (/v1/runs; before, every caller), by table
// (/v1/tables, the status page's refresh), of one table (/v1/tables/{t}).
func BenchmarkJoinWaits(b *testing.B) {
	r := waitingRegistry(1000, 1)
	b.Run("sorted", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			_ = r.JoinWaits()
		}
	})
	b.Run("by_table", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			_ = r.JoinWaitsByTable()
		}
	})
	b.Run("of_one", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			_ = r.JoinWaitsOf("silver.t00500")
		}
	})
}

// A tracker holding its advance for its table's joins (errJoinPending)
// went on only at its retry's next delay, up to 2 s after the lock that
// held the join went. afterJoins calls it back when the table's last
// wait ends, at once when the table waits for none, and not for another
// table's; its stop forgets it.
func TestAfterJoinsCallsBackWhenTheTablesJoinsEnd(t *testing.T) {
	r := waitingRegistry(2, 1)
	r.cfg.Metrics = NewMetrics(nil, time.Now)
	woke := make(chan string, 4)
	r.afterJoins("silver.none", func() { woke <- "none" })
	if got := <-woke; got != "none" {
		t.Fatalf("woke %s", got)
	}
	r.afterJoins("silver.t00001", func() { woke <- "t00001" })
	stop := r.afterJoins("silver.t00002", func() { woke <- "t00002" })
	r.mu.Lock()
	r.endJoinWait(r.joining["silver.t00001"][0])
	r.mu.Unlock()
	select {
	case got := <-woke:
		if got != "t00001" {
			t.Fatalf("woke %s when silver.t00001's joins ended", got)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("not called back when the table's joins ended")
	}
	if !stop() {
		t.Error("stop of a callback still waiting reported false")
	}
	r.wg.Wait()
	select {
	case got := <-woke:
		t.Fatalf("woke %s as well", got)
	default:
	}
}
