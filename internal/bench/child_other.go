//go:build !linux

package bench

import (
	"syscall"
	"time"
)

func childProcAttr() *syscall.SysProcAttr { return nil }

func procRSS(int) uint64 { return 0 }

func procCPU(int) time.Duration { return 0 }

func procSwitches(int) int64 { return 0 }

const childSupported = false
