package main

import (
	"bytes"
	"strings"
	"testing"
)

// TestVersionSaysWhyTheCommitIsUnknown: a test binary records no commit,
// as a build with -buildvcs=false does not; `version` says why instead of
// a bare "unknown".
func TestVersionSaysWhyTheCommitIsUnknown(t *testing.T) {
	var out bytes.Buffer
	cmd := newVersionCmd(&out)
	cmd.SetArgs([]string{})
	if err := cmd.Execute(); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "commit:          unknown (not recorded: ") || !strings.Contains(out.String(), "-buildvcs=true") {
		t.Errorf("version of a binary without a recorded commit:\n%s\nwant the commit line to say why it is unknown", out.String())
	}
}
