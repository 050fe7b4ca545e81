package main

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

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

// TestHelpFlags: publish has no --api-prefix (it calls no API), and every
// help default is quoted the way cobra quotes string defaults.
func TestHelpFlags(t *testing.T) {
	_, out, _ := runCLI(t, "publish", "--help")
	if strings.Contains(out, "api-prefix") {
		t.Errorf("publish --help offers --api-prefix:\n%s", out)
	}
	for _, name := range []string{"serve", "track", "join", "status", "is-final", "wait", "publish", "bench"} {
		_, out, _ := runCLI(t, name, "--help")
		for _, line := range strings.Split(out, "\n") {
			if i := strings.Index(line, "(default"); i >= 0 && !strings.HasPrefix(line[i:], `(default "`) && !strings.HasPrefix(line[i:], "(default 0") &&
				!isNumericDefault(line[i:]) {
				t.Errorf("%s --help: unquoted default: %s", name, strings.TrimSpace(line))
			}
		}
	}
}

// isNumericDefault reports whether s starts with "(default " and a value
// cobra prints unquoted: a number or duration, a bool, a list or map.
func isNumericDefault(s string) bool {
	rest := strings.TrimPrefix(s, "(default ")
	return rest != "" && (rest[0] >= '0' && rest[0] <= '9' || rest[0] == '[' || strings.HasPrefix(rest, "true") || strings.HasPrefix(rest, "false"))
}

// TestParseURLTime: a "+" offset that arrived as a space in a URL query is
// read as "+"; other bad times name the %2B fix when they hold a space.
func TestParseURLTime(t *testing.T) {
	want := time.Date(2026, 9, 28, 13, 0, 0, 0, time.UTC)
	for _, s := range []string{"2026-09-28T15:00:00+02:00", "2026-09-28T15:00:00 02:00", "2026-09-28T15:00:00.000 02:00", "2026-09-28T13:00:00Z"} {
		got, err := parseURLTime(s)
		if err != nil || !got.Equal(want) {
			t.Errorf("parseURLTime(%q) = %v, %v; want %v", s, got, err, want)
		}
	}
	if got, err := parseURLTime("2026-09-28 13:00:00"); err != nil || !got.Equal(want) {
		t.Errorf("a naive time with a space: %v, %v", got, err)
	}
	if _, err := parseURLTime("2026-09-28T15:00:00 2:00"); err == nil || !strings.Contains(err.Error(), "%2B") {
		t.Errorf("err = %v, want it to name %%2B", err)
	}
}

// TestWaitTimeoutWhileConnecting: --timeout bounds the whole of `wait`. A
// PostgreSQL that accepts the connection and never answers used to turn the
// deadline into a connection error (exit 2), which a gating job reads as a
// broken setup rather than "not final yet, try later".
func TestWaitTimeoutWhileConnecting(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	var held []net.Conn
	var mu sync.Mutex
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			held = append(held, c) // accept, never answer
			mu.Unlock()
		}
	}()
	defer func() {
		mu.Lock()
		defer mu.Unlock()
		for _, c := range held {
			c.Close()
		}
	}()
	url := "postgres://u:secret@" + ln.Addr().String() + "/db?sslmode=disable&connect_timeout=30"
	start := time.Now()
	code, _, errOut := runCLI(t, "wait", "--table", "t", "--until", "2026-09-28T15:00:00Z", "--timeout", "500ms", "--postgres-url", url, "--http-url", "")
	if code != exitNegative || !strings.Contains(errOut, "within 500ms") {
		t.Fatalf("wait against a silent PostgreSQL: exit %d, stderr %q; want %d (timed out)", code, errOut, exitNegative)
	}
	if strings.Contains(errOut, "secret") {
		t.Fatalf("stderr shows the password: %q", errOut)
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Fatalf("wait took %s with --timeout 500ms", d)
	}
}
