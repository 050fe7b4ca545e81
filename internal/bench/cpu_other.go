//go:build !unix

package bench

import "time"

// processCPU is unknown here: the idle phase reports 0.
func processCPU() time.Duration { return 0 }
