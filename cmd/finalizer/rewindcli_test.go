package main

import (
	"strings"
	"testing"
)

// TestRewindRefusesATimeBefore1970 checks that rewind refuses a target the
// service would never write (its trackers hold times before 1970), before
// it connects to anything.
func TestRewindRefusesATimeBefore1970(t *testing.T) {
	for _, to := range []string{"1969-12-31T00:00:00Z", "1969-12-31T23:59:59.999999999Z", "0001-01-02T00:00:00Z"} {
		code, _, errOut := runCLI(t, "rewind", "--table", "t", "--to", to, "--reason", "r",
			"--postgres-url", "postgres://127.0.0.1:1/x")
		if code != 2 || !strings.Contains(errOut, "before 1970-01-01T00:00:00Z") {
			t.Errorf("rewind --to %s: exit %d, stderr %q; want 2 and the 1970 bound", to, code, errOut)
		}
	}
}
