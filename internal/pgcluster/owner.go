//go:build unix

package pgcluster

import (
	"errors"
	"fmt"
	"os"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

// serverUser is the OS user the server runs as when this process is root.
const serverUser = "postgres"

// owner is the OS identity initdb, pg_ctl and the server run as. A nil
// *owner means "this process's own user".
type owner struct {
	name   string
	uid    int
	gid    int
	groups []uint32
}

// lookupOwner returns the postgres OS user when this process runs as root,
// and nil otherwise: PostgreSQL refuses to run as root.
func lookupOwner() (*owner, error) {
	if os.Geteuid() != 0 {
		return nil, nil
	}
	u, err := user.Lookup(serverUser)
	if err != nil {
		return nil, fmt.Errorf("running as root needs the %q OS user to run PostgreSQL: %w", serverUser, err)
	}
	uid, err := strconv.Atoi(u.Uid)
	if err != nil {
		return nil, fmt.Errorf("uid of %s: %w", serverUser, err)
	}
	gid, err := strconv.Atoi(u.Gid)
	if err != nil {
		return nil, fmt.Errorf("gid of %s: %w", serverUser, err)
	}
	o := &owner{name: u.Username, uid: uid, gid: gid}
	if ids, err := u.GroupIds(); err == nil {
		for _, id := range ids {
			if n, err := strconv.Atoi(id); err == nil {
				o.groups = append(o.groups, uint32(n))
			}
		}
	}
	return o, nil
}

// sysProcAttr makes a child process run as the owner.
func (o *owner) sysProcAttr() *syscall.SysProcAttr {
	if o == nil {
		return nil
	}
	return &syscall.SysProcAttr{Credential: &syscall.Credential{
		Uid:    uint32(o.uid),
		Gid:    uint32(o.gid),
		Groups: o.groups,
	}}
}

// chown gives path to the owner; a no-op for a nil owner.
func (o *owner) chown(path string) error {
	if o == nil {
		return nil
	}
	if err := os.Lchown(path, o.uid, o.gid); err != nil {
		return fmt.Errorf("chown %s to %s: %w", path, o.name, err)
	}
	return nil
}

// checkReachable returns an error naming the first ancestor of dir that
// the owner cannot traverse. PostgreSQL, running as the owner, must reach
// its data directory by path; a 0700 directory of root's (a home directory,
// os.MkdirTemp, t.TempDir) on the way makes it fail with a less clear
// message. A nil owner is this process's own user, which created dir.
func (o *owner) checkReachable(dir string) error {
	if o == nil {
		return nil
	}
	for p := filepath.Dir(dir); ; p = filepath.Dir(p) {
		fi, err := os.Stat(p)
		if err != nil {
			return fmt.Errorf("stat %s: %w", p, err)
		}
		if !o.canTraverse(fi) {
			return fmt.Errorf("%w: the %s OS user, which runs PostgreSQL, cannot reach %s: %s is mode %04o owned by uid %d; make it traversable (chmod o+x) or choose another directory",
				ErrUnreachable, o.name, dir, p, fi.Mode().Perm(), statUID(fi))
		}
		if p == filepath.Dir(p) {
			return nil
		}
	}
}

// canTraverse reports whether the owner may search the directory fi.
func (o *owner) canTraverse(fi os.FileInfo) bool {
	perm := fi.Mode().Perm()
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return perm&0o001 != 0
	}
	switch {
	case int(st.Uid) == o.uid:
		return perm&0o100 != 0
	case o.inGroup(st.Gid):
		return perm&0o010 != 0
	default:
		return perm&0o001 != 0
	}
}

// inGroup reports whether gid is the owner's primary or a supplementary group.
func (o *owner) inGroup(gid uint32) bool {
	if int(gid) == o.gid {
		return true
	}
	for _, g := range o.groups {
		if g == gid {
			return true
		}
	}
	return false
}

// statUID returns the owner uid of fi, or -1.
func statUID(fi os.FileInfo) int {
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		return int(st.Uid)
	}
	return -1
}

// lockFile is an exclusive advisory lock (flock) on a file in the cluster
// directory, held by the Cluster from Start to Stop. The kernel releases it
// when the process dies, so a crash never leaves it stale.
type lockFile struct {
	f *os.File
}

// errLocked is returned by lock when another holder has the lock.
var errLocked = errors.New("locked")

// lock takes the lock on path without waiting, and writes this process's
// pid into the file for the message another process will print. It returns
// errLocked and the holder's pid when someone else has it.
func lock(path string) (*lockFile, int, error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, 0, fmt.Errorf("open lock file: %w", err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		b, _ := os.ReadFile(path)
		_ = f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			pid, _ := strconv.Atoi(strings.TrimSpace(string(b)))
			return nil, pid, errLocked
		}
		return nil, 0, fmt.Errorf("lock %s: %w", path, err)
	}
	if err := f.Truncate(0); err == nil {
		_, _ = f.WriteAt([]byte(strconv.Itoa(os.Getpid())+"\n"), 0)
	}
	return &lockFile{f: f}, 0, nil
}

// unlock releases the lock; safe on nil and twice.
func (l *lockFile) unlock() {
	if l == nil || l.f == nil {
		return
	}
	_ = l.f.Truncate(0)
	_ = syscall.Flock(int(l.f.Fd()), syscall.LOCK_UN)
	_ = l.f.Close()
	l.f = nil
}

// runningPostmaster reads dataDir/postmaster.pid and returns the pid of a
// live postmaster, or 0 when there is none (no file, or a stale file whose
// process is gone or is no longer PostgreSQL after a reboot reused its pid).
func runningPostmaster(dataDir string) int {
	b, err := os.ReadFile(filepath.Join(dataDir, "postmaster.pid"))
	if err != nil {
		return 0
	}
	line, _, _ := strings.Cut(string(b), "\n")
	pid, err := strconv.Atoi(strings.TrimSpace(line))
	if err != nil || pid <= 0 {
		return 0
	}
	if err := syscall.Kill(pid, 0); err != nil && !errors.Is(err, syscall.EPERM) {
		return 0
	}
	if comm, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "comm")); err == nil {
		if !strings.HasPrefix(strings.TrimSpace(string(comm)), "postgres") {
			return 0
		}
	}
	return pid
}
