package control

import (
	"context"
	"fmt"
	"testing"
	"time"
)

// TestBoundaryUpdatesStayOnTheirPage: tables crossing boundaries together
// (groups of every table, as at the top of a period) rewrite their rows on
// the page they are on (HOT updates: no new primary-key entry), because
// migration 6 leaves half of each page free. With pages packed full (the
// fillfactor before it) about 3% of such updates stayed on their page.
func TestBoundaryUpdatesStayOnTheirPage(t *testing.T) {
	s, url := newStore(t, Options{})
	ctx := context.Background()
	conn := connect(t, url)
	var opts []string
	if err := conn.QueryRow(ctx, `SELECT coalesce(reloptions, '{}') FROM pg_class WHERE oid = $1::regclass`, s.n.table).Scan(&opts); err != nil {
		t.Fatal(err)
	}
	if len(opts) != 1 || opts[0] != "fillfactor=50" {
		t.Fatalf("control table's options %q, want [fillfactor=50]", opts)
	}
	const tables, group = 2000, 500
	round := func(i int) {
		until := at(0, 0).Add(time.Duration(i) * time.Minute)
		for g := 0; g < tables; g += group {
			as := make([]Advance, group)
			for k := range as {
				n := g + k
				as[k] = Advance{Table: fmt.Sprintf("hot.t%05d", n), QueryID: fmt.Sprintf("q%05d", n), RunID: fmt.Sprintf("r%05d", n),
					FinalizedUntil: until, EndTime: until.Add(time.Second), BatchID: int64(i),
					EndOffset: []byte(`{"lsn":"0x00000027000000020007"}`), Sources: []string{fmt.Sprintf("SqlServerCdc[dbo.orders_%d]", n)}}
			}
			res, err := s.AdvanceBatch(ctx, as)
			if err != nil {
				t.Fatal(err)
			}
			for k, r := range res {
				if r.Err != nil || !r.Moved || !r.Verdict.FinalizedUntil.Equal(until) {
					t.Fatalf("round %d, %s: %+v", i, as[k].Table, r)
				}
			}
		}
	}
	pages := func() map[string]string {
		rows, err := conn.Query(ctx, `SELECT table_name, (ctid::text::point)[0]::text FROM `+s.n.table)
		if err != nil {
			t.Fatal(err)
		}
		defer rows.Close()
		m := make(map[string]string, tables)
		for rows.Next() {
			var name, page string
			if err := rows.Scan(&name, &page); err != nil {
				t.Fatal(err)
			}
			m[name] = page
		}
		if err := rows.Err(); err != nil {
			t.Fatal(err)
		}
		return m
	}
	round(0) // the first verdicts: inserts
	before := pages()
	stayed, updated := 0, 0
	for i := 1; i <= 4; i++ {
		round(i)
		after := pages()
		for name, p := range after {
			updated++
			if before[name] == p {
				stayed++
			}
		}
		before = after
	}
	share := float64(stayed) / float64(updated)
	t.Logf("%d of %d updates stayed on their page (%.3f)", stayed, updated, share)
	if updated != 4*tables || share < 0.9 {
		t.Fatalf("%d of %d updates stayed on their page, want at least 0.9 of %d", stayed, updated, 4*tables)
	}
}
