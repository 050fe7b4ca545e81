package control

import (
	"context"
	"strings"
	"testing"
)

// TestTablesPage: the pages of /v1/tables come from PostgreSQL one at a
// time (keyset on the name), and a table held by an expected feeder before
// its first verdict is listed, once, in name order with the others.
func TestTablesPage(t *testing.T) {
	ctx := context.Background()
	s, _ := newStore(t, Options{})
	for _, table := range []string{"a.t1", "a.t3", "a.t4", "a.t5"} {
		advance(t, s, table, at(14, 0))
	}
	if _, err := s.ExpectFeeders(ctx, "a.t2", []string{"region-eu"}); err != nil { // no verdict yet
		t.Fatal(err)
	}
	if _, err := s.ExpectFeeders(ctx, "a.t3", []string{"region-us"}); err != nil { // verdict and feeders
		t.Fatal(err)
	}
	var got []string
	after, pages := "", 0
	for {
		vs, fs, next, err := s.TablesPage(ctx, after, 2)
		if err != nil {
			t.Fatal(err)
		}
		pages++
		names := map[string]bool{}
		for _, v := range vs {
			names[v.Table] = true
		}
		for _, f := range fs {
			names[f.Table] = true
		}
		if len(names) > 2 {
			t.Fatalf("page after %q: %d tables on a page of 2", after, len(names))
		}
		for _, v := range vs {
			got = append(got, v.Table)
		}
		for n := range names {
			if n == "a.t2" {
				got = append(got, n+"(held)")
			}
		}
		if next == "" {
			break
		}
		after = next
		if pages > 10 {
			t.Fatal("no end")
		}
	}
	if want := "a.t1 a.t2(held) a.t3 a.t4 a.t5"; strings.Join(got, " ") != want || pages != 3 {
		t.Errorf("pages: %q in %d pages, want %q in 3", strings.Join(got, " "), pages, want)
	}
	if _, _, _, err := s.TablesPage(ctx, "", 0); err == nil {
		t.Error("limit 0: no error")
	}
	vs, fs, next, err := s.TablesPage(ctx, "z", 10)
	if err != nil || len(vs) != 0 || len(fs) != 0 || next != "" {
		t.Errorf("past the end: %v %v %q %v", vs, fs, next, err)
	}
}
