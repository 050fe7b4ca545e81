package control

import (
	"fmt"
	"testing"
)

// TestMovesScanAndIndex: moves and rowIndex answer the same whether they
// scan (a few rows) or go through the index made past movesScan, a row
// set again replaces the one set before, and a table never set is not
// found.
func TestMovesScanAndIndex(t *testing.T) {
	for _, n := range []int{1, movesScan, movesScan + 1, 100} {
		var m moves
		var x rowIndex
		for i := range n {
			m.set(Verdict{Table: fmt.Sprintf("t%d", i), BatchID: 1}, i%2 == 0, i%3 == 0)
			x.put(feederKey{fmt.Sprintf("t%d", i), "q"}, &batchRow{i: i})
		}
		// Set again: replaces, does not add.
		m.set(Verdict{Table: "t0", BatchID: 2}, false, true)
		x.put(feederKey{"t0", "q"}, &batchRow{i: -1})
		if len(m.rows) != n || len(x.rows) != n {
			t.Fatalf("n=%d: %d moves, %d rows after setting t0 again; want %d", n, len(m.rows), len(x.rows), n)
		}
		for i := range n {
			table := fmt.Sprintf("t%d", i)
			r := m.get(table)
			wantBatch, wantMoved, wantSolo, wantRow := int64(1), i%2 == 0, i%3 == 0, i
			if i == 0 {
				wantBatch, wantMoved, wantSolo, wantRow = 2, false, true, -1
			}
			if r == nil || r.v.Table != table || r.v.BatchID != wantBatch || r.moved != wantMoved || r.solo != wantSolo {
				t.Errorf("n=%d: get(%s) = %+v; want batch %d, moved %v, solo %v", n, table, r, wantBatch, wantMoved, wantSolo)
			}
			if v, moved, ok := m.verdict(table); !ok || v.Table != table || moved != wantMoved {
				t.Errorf("n=%d: verdict(%s) = %v, %v, %v", n, table, v.Table, moved, ok)
			}
			if br := x.get(feederKey{table, "q"}); br == nil || br.i != wantRow {
				t.Errorf("n=%d: row of %s = %+v; want i %d", n, table, br, wantRow)
			}
			if br := x.get(feederKey{table, "other"}); br != nil {
				t.Errorf("n=%d: another feeder of %s found: %+v", n, table, br)
			}
		}
		if r := m.get("absent"); r != nil {
			t.Errorf("n=%d: get(absent) = %+v", n, r)
		}
		if _, _, ok := m.verdict("absent"); ok {
			t.Errorf("n=%d: verdict(absent) found", n)
		}
		if (m.index != nil) != (n > movesScan) || (x.index != nil) != (n > movesScan) {
			t.Errorf("n=%d: index made %v, %v; want %v", n, m.index != nil, x.index != nil, n > movesScan)
		}
	}
}

// TestMovesOfOneRowAllocateOnlyTheRow: a statement's one row (a
// crossing's group commit) costs moves the slice of its row alone, and
// its lookups nothing (three maps took about 1 KiB before, issue 12,
// third session).
func TestMovesOfOneRowAllocateOnlyTheRow(t *testing.T) {
	v := Verdict{Table: "s.t"}
	n := testing.AllocsPerRun(100, func() {
		var m moves
		m.set(v, true, true)
		if r := m.get("s.t"); r == nil || !r.moved {
			t.Fatal("row not found")
		}
		if _, _, ok := m.verdict("s.t"); !ok {
			t.Fatal("verdict not found")
		}
	})
	if n > 1 {
		t.Errorf("one row: %v allocations; want at most 1", n)
	}
}
