//go:build !unix

package listener_test

import "time"

// cpuTime is 0 off Unix (no getrusage): TestRecoveryScale reports no CPU
// time there.
func cpuTime() time.Duration { return 0 }
