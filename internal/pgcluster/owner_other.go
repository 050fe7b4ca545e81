//go:build !unix

package pgcluster

import (
	"errors"
	"os"
	"syscall"
)

// errNotUnix: the cluster runs PostgreSQL's programs as a Unix user and
// locks its directory with flock; elsewhere the service is given a
// PostgreSQL URL instead.
var errNotUnix = errors.New("the embedded PostgreSQL cluster needs a Unix system; give the service a PostgreSQL URL")

// owner is the OS identity initdb, pg_ctl and the server run as; off
// Unix there is none to take.
type owner struct {
	name string
}

func lookupOwner() (*owner, error) { return nil, errNotUnix }

func (o *owner) sysProcAttr() *syscall.SysProcAttr { return nil }

func (o *owner) chown(string) error { return nil }

func (o *owner) checkReachable(string) error { return nil }

// lockFile is the cluster directory's lock; off Unix none is taken
// (lookupOwner fails first).
type lockFile struct {
	f *os.File
}

var errLocked = errors.New("locked")

func lock(string) (*lockFile, int, error) { return nil, 0, errNotUnix }

func (l *lockFile) unlock() {}

func runningPostmaster(string) int { return 0 }
