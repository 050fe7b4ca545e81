//go:build !unix

package control

import "time"

// processCPU is unknown off Unix: the benchmark reports 0 CPU per row.
func processCPU() time.Duration { return 0 }
