package main

import (
	"bytes"
	"context"
	"fmt"
	"runtime"
	"strings"
	"testing"

	"github.com/finalizer-dev/finalizer/control"
)

// runCLI runs the program with args and returns its exit code, stdout and
// stderr.
func runCLI(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	var out, errOut bytes.Buffer
	code := run(context.Background(), args, strings.NewReader(""), &out, &errOut)
	return code, out.String(), errOut.String()
}

func TestVersion(t *testing.T) {
	schema := fmt.Sprintf("control schema:  %d", control.SchemaVersion)
	code, out, _ := runCLI(t, "version")
	if code != 0 || !strings.HasPrefix(out, "finalizer ") || !strings.Contains(out, "commit:") ||
		!strings.Contains(out, runtime.Version()) || !strings.Contains(out, schema) {
		t.Fatalf("version: exit %d\n%s", code, out)
	}
	code, out, _ = runCLI(t, "--version")
	want := fmt.Sprintf("control-table schema %d)", control.SchemaVersion)
	if code != 0 || strings.Count(out, "\n") != 1 || !strings.Contains(out, runtime.Version()) || !strings.Contains(out, want) {
		t.Fatalf("--version: exit %d\n%s", code, out)
	}
}
