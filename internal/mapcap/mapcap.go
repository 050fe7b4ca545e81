// Package mapcap sizes maps ahead of the entries a caller is about to put
// in them, so that a restart's recovery (100,000 runs) does not rehash the
// registry's and the listener's maps all the way up.
package mapcap

// Reserved returns m, or a copy of it made to hold n more entries when m
// holds fewer than n (a map that held as many has grown to about that
// size already).
func Reserved[K comparable, V any](m map[K]V, n int) map[K]V {
	if len(m) >= n {
		return m
	}
	g := make(map[K]V, len(m)+n)
	for k, v := range m {
		g[k] = v
	}
	return g
}
