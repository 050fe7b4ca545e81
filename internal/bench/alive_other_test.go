//go:build !unix

package bench

// alive reports every pid as alive off Unix (no signal 0 to ask with).
func alive(int) bool { return true }
