package pgcluster

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"time"
)

// searchGlobs are the places, after PATH, where FindBinDir looks for an
// installation. The first holds Debian and Ubuntu packages, the second the
// PGDG packages of RHEL-like systems. Tests replace it.
var searchGlobs = []string{
	"/usr/lib/postgresql/*/bin",
	"/usr/pgsql-*/bin",
}

// installation is one directory holding initdb and pg_ctl, with the major
// version of PostgreSQL it belongs to (0 when unknown).
type installation struct {
	dir   string
	major int
}

// FindBinDir returns the directory of the local PostgreSQL installation's
// programs: the one holding initdb and pg_ctl on PATH, else the newest
// /usr/lib/postgresql/*/bin (or /usr/pgsql-*/bin). It returns an error
// wrapping ErrNoInstallation when none is found.
func FindBinDir() (string, error) {
	found := installations()
	if len(found) == 0 {
		return "", errNoInstallation()
	}
	return found[0].dir, nil
}

// errNoInstallation says where FindBinDir looked and what to do instead.
func errNoInstallation() error {
	return fmt.Errorf("%w: initdb and pg_ctl are neither on PATH nor under %s; install PostgreSQL or pass --postgres-url",
		ErrNoInstallation, strings.Join(searchGlobs, " or "))
}

// installations lists every installation found, PATH first, then the
// globbed ones newest first.
func installations() []installation {
	var found []installation
	if dir, ok := onPath(); ok {
		found = append(found, installation{dir: dir, major: versionOf(dir)})
	}
	var globbed []installation
	for _, pattern := range searchGlobs {
		dirs, _ := filepath.Glob(pattern)
		for _, dir := range dirs {
			if !isInstallation(dir) {
				continue
			}
			globbed = append(globbed, installation{dir: dir, major: majorFromPath(dir)})
		}
	}
	sort.SliceStable(globbed, func(i, j int) bool { return globbed[i].major > globbed[j].major })
	return append(found, globbed...)
}

// binDirFor returns the installation that can run a cluster made by the
// given major version: the first one of that major version, else an error
// that names what is installed.
func binDirFor(major int) (string, error) {
	found := installations()
	if len(found) == 0 {
		return "", errNoInstallation()
	}
	for _, in := range found {
		if in.major == major {
			return in.dir, nil
		}
	}
	var have []string
	for _, in := range found {
		have = append(have, fmt.Sprintf("%s (%d)", in.dir, in.major))
	}
	return "", fmt.Errorf("%w: the cluster was initialised by PostgreSQL %d, but only %s is installed; install PostgreSQL %d or upgrade the cluster with pg_upgrade",
		ErrNoInstallation, major, strings.Join(have, ", "), major)
}

// onPath returns the installation whose initdb is on PATH. A symlink (as
// in /usr/local/bin -> /usr/lib/postgresql/15/bin) is followed, so that the
// directory found also holds the installation's other programs.
func onPath() (string, bool) {
	initdb, err := exec.LookPath("initdb")
	if err != nil {
		return "", false
	}
	if real, err := filepath.EvalSymlinks(initdb); err == nil && isInstallation(filepath.Dir(real)) {
		return filepath.Dir(real), true
	}
	if isInstallation(filepath.Dir(initdb)) {
		return filepath.Dir(initdb), true
	}
	return "", false
}

// isInstallation reports whether dir holds initdb, pg_ctl and postgres.
func isInstallation(dir string) bool {
	for _, name := range []string{"initdb", "pg_ctl", "postgres"} {
		fi, err := os.Stat(filepath.Join(dir, name))
		if err != nil || fi.IsDir() || fi.Mode().Perm()&0o111 == 0 {
			return false
		}
	}
	return true
}

var majorInPath = regexp.MustCompile(`(?:postgresql/|pgsql-)(\d+)`)

// majorFromPath reads the major version from a globbed directory's path,
// falling back to asking pg_ctl.
func majorFromPath(dir string) int {
	if m := majorInPath.FindStringSubmatch(dir); m != nil {
		if n, err := strconv.Atoi(m[1]); err == nil {
			return n
		}
	}
	return versionOf(dir)
}

var versionOutput = regexp.MustCompile(`\(PostgreSQL\)\s+(\d+)`)

// versionOf runs pg_ctl --version in dir and returns the major version, or
// 0 when it cannot tell.
func versionOf(dir string) int {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, filepath.Join(dir, "pg_ctl"), "--version").Output()
	if err != nil {
		return 0
	}
	return parseMajor(string(out))
}

// parseMajor reads the major version from "pg_ctl (PostgreSQL) 15.10 ...".
func parseMajor(s string) int {
	m := versionOutput.FindStringSubmatch(s)
	if m == nil {
		return 0
	}
	n, _ := strconv.Atoi(m[1])
	return n
}
