//go:build !unix

package pgtest

// alive reports a process as alive off Unix (no signal 0 to ask with):
// its leftover directory is kept, never removed under a live test.
func alive(int) bool { return true }
