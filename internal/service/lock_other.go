//go:build !unix

package service

import "errors"

// lockFile is the data dir's lock, holding the pid of the serve that has it.
const lockFile = "finalizer.lock"

// lockDataDir fails off Unix: the data dir's lock is an flock, and the
// embedded PostgreSQL cluster it guards needs a Unix system too.
func lockDataDir(string) (func(), error) {
	return nil, errors.New("the data dir's lock (and the embedded PostgreSQL cluster) needs a Unix system")
}

// RunningServe finds no serve off Unix: there is no data dir's lock.
func RunningServe(string) (int, bool) { return 0, false }
