//go:build linux

package bench

import (
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// childProcAttr makes the kernel kill the service process when the
// bench's thread that started it dies (a bench killed with SIGKILL):
// the bench's own paths kill it themselves (childService.kill).
func childProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}

// procRSS returns pid's VmRSS from /proc/<pid>/status, 0 when unknown.
func procRSS(pid int) uint64 {
	b, _ := procKiB("/proc/"+strconv.Itoa(pid)+"/status", "VmRSS:")
	return b
}

// procKiB returns, in bytes, the value of the line of the /proc file path
// that begins with key ("VmRSS:", "Dirty:"; the line says "123456 kB");
// ok is false when the file or the line cannot be read.
func procKiB(path, key string) (bytes uint64, ok bool) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, false
	}
	for line := range strings.SplitSeq(string(b), "\n") {
		if rest, found := strings.CutPrefix(line, key); found {
			f := strings.Fields(rest)
			if len(f) == 0 {
				return 0, false
			}
			kb, err := strconv.ParseUint(f[0], 10, 64)
			if err != nil {
				return 0, false
			}
			return kb << 10, true
		}
	}
	return 0, false
}

// clockTicks is the unit of /proc/<pid>/stat's times (USER_HZ, 100 on
// Linux whatever the kernel's HZ).
const clockTicks = 100

// procCPU returns pid's user and system CPU time from /proc/<pid>/stat
// (utime and stime, fields 14 and 15), 0 when unknown.
func procCPU(pid int) time.Duration {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0
	}
	// The command name (field 2) is in parentheses and may hold spaces:
	// count the fields after its closing one (field 3 on).
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0
	}
	f := strings.Fields(s[i+1:])
	if len(f) < 13 {
		return 0
	}
	utime, _ := strconv.ParseUint(f[11], 10, 64)
	stime, _ := strconv.ParseUint(f[12], 10, 64)
	return time.Duration(utime+stime) * time.Second / clockTicks
}

const childSupported = true

// procSwitches returns the context switches of every thread of process
// pid so far (the sum of /proc/<pid>/task/*/status), 0 when unreadable.
func procSwitches(pid int) int64 {
	dir := "/proc/" + strconv.Itoa(pid) + "/task"
	tasks, err := os.ReadDir(dir)
	if err != nil {
		return 0
	}
	var n int64
	for _, t := range tasks {
		b, err := os.ReadFile(dir + "/" + t.Name() + "/status")
		if err != nil {
			continue
		}
		for _, line := range strings.Split(string(b), "\n") {
			if v, ok := strings.CutPrefix(line, "voluntary_ctxt_switches:"); ok {
				x, _ := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
				n += x
			} else if v, ok := strings.CutPrefix(line, "nonvoluntary_ctxt_switches:"); ok {
				x, _ := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
				n += x
			}
		}
	}
	return n
}
