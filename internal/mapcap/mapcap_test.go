package mapcap

import "testing"

// TestReservedKeepsEntries: a map too small for n is copied with every
// entry; one that holds n or more is returned as it is.
func TestReservedKeepsEntries(t *testing.T) {
	m := map[string]int{"a": 1, "b": 2}
	g := Reserved(m, 10)
	if len(g) != 2 || g["a"] != 1 || g["b"] != 2 {
		t.Fatalf("reserved map = %v, want the entries of %v", g, m)
	}
	g["c"] = 3
	if _, ok := m["c"]; ok {
		t.Fatal("the reserved map is the same map as the small one")
	}
	big := map[int]bool{1: true, 2: true, 3: true}
	if g := Reserved(big, 2); len(g) != 3 {
		t.Fatalf("a map holding more than n came back with %d entries", len(g))
	} else {
		g[4] = true
		if !big[4] {
			t.Fatal("a map holding more than n was copied")
		}
	}
	var nilMap map[string]int
	if g := Reserved(nilMap, 4); g == nil {
		t.Fatal("a nil map reserved for 4 entries is still nil")
	}
}
