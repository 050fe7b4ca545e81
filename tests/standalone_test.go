//go:build linux

package tests

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestRepositoryStandsAlone fails when a tracked file points outside the
// repository, at the material the project started from: a reader of a
// clone finds nothing there (docs/contract.md is the contract). .ci/run
// runs the same check with git grep.
func TestRepositoryStandsAlone(t *testing.T) {
	out, err := exec.Command("git", "-C", "..", "ls-files", "-z").Output()
	if err != nil {
		t.Skipf("not a git checkout: %v", err)
	}
	forbidden := []string{"../" + "shared", "CONTRACT" + ".md", "STYLE" + ".md"}
	for _, name := range strings.Split(strings.TrimRight(string(out), "\x00"), "\x00") {
		raw, err := os.ReadFile(filepath.Join("..", name))
		if err != nil {
			continue // deleted in the work tree
		}
		for i, line := range strings.Split(string(raw), "\n") {
			for _, f := range forbidden {
				if strings.Contains(line, f) {
					t.Errorf("%s:%d mentions %s: point at docs/contract.md or describe it in the repository's own words", name, i+1, f)
				}
			}
		}
	}
}

// TestNoConflictMarkers fails when a tracked file still holds a merge
// conflict's markers: a rebase resolved in a hurry once landed the README
// with both sides of a hunk and the markers between them.
func TestNoConflictMarkers(t *testing.T) {
	out, err := exec.Command("git", "-C", "..", "ls-files", "-z").Output()
	if err != nil {
		t.Skipf("not a git checkout: %v", err)
	}
	for _, name := range strings.Split(strings.TrimRight(string(out), "\x00"), "\x00") {
		raw, err := os.ReadFile(filepath.Join("..", name))
		if err != nil || strings.IndexByte(string(raw), 0) >= 0 {
			continue // deleted in the work tree, or binary
		}
		for i, line := range strings.Split(string(raw), "\n") {
			if strings.HasPrefix(line, "<<<<<<< ") || strings.HasPrefix(line, ">>>>>>> ") {
				t.Errorf("%s:%d: a merge conflict marker: resolve the conflict", name, i+1)
			}
		}
	}
}
