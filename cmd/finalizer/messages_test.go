package main

import (
	"strings"
	"testing"
)

// TestMessagesSayTheCommandsOwnWords: status --table of a typo suggested
// --allow-missing, which status has not; acknowledge --reason "   " said
// "invalid rewind"; audit --help named rewinds and acknowledgements only,
// though it lists unretires too; audit --limit 0 and -1 were taken without
// a word.
func TestMessagesSayTheCommandsOwnWords(t *testing.T) {
	url, s := controlDB(t)
	advanceTo(t, s, "bronze.orders", "q1", "orders", "r1", statusAt)
	code, _, errOut := runCLI(t, "status", "--table", "bronze.order", "--http-url", "", "--postgres-url", url)
	if code != exitMissing || strings.Contains(errOut, "--allow-missing") || !strings.Contains(errOut, `did you mean "bronze.orders"?`) {
		t.Errorf("status --table of a typo: exit %d, stderr %q", code, errOut)
	}
	for _, cmd := range []string{"is-final", "wait"} {
		args := []string{cmd, "--table", "bronze.order", "--http-url", "", "--postgres-url", url}
		if cmd == "is-final" {
			args = append(args, "--period-end", "2026-09-28T00:00:00Z")
		} else {
			args = append(args, "--until", "2026-09-28T00:00:00Z")
		}
		if code, _, errOut := runCLI(t, args...); code != exitMissing || !strings.Contains(errOut, "--allow-missing") {
			t.Errorf("%s of a typo: exit %d, stderr %q; want --allow-missing offered", cmd, code, errOut)
		}
	}
	code, _, errOut = runCLI(t, "acknowledge", "--table", "bronze.orders", "--reason", "   ", "--postgres-url", url)
	if code != exitUsage || strings.Contains(errOut, "rewind") || !strings.Contains(errOut, "acknowledge: --reason is blank") {
		t.Errorf("acknowledge --reason blank: exit %d, stderr %q", code, errOut)
	}
	code, _, errOut = runCLI(t, "rewind", "--table", "bronze.orders", "--to", "2026-09-28T00:00:00Z", "--reason", "r", "--by", "  ", "--postgres-url", url)
	if code != exitUsage || !strings.Contains(errOut, "rewind: --by is blank") {
		t.Errorf("rewind --by blank: exit %d, stderr %q", code, errOut)
	}
	if _, out, _ := runCLI(t, "audit", "--help"); !strings.Contains(out, "unretire") || !strings.Contains(out, "at least 1") {
		t.Errorf("audit --help does not name unretire and the limit's bound:\n%s", out)
	}
	for _, n := range []string{"0", "-1"} {
		if code, _, errOut := runCLI(t, "audit", "--limit", n, "--postgres-url", url); code != exitUsage || !strings.Contains(errOut, "at least 1") {
			t.Errorf("audit --limit %s: exit %d, stderr %q", n, code, errOut)
		}
	}
}
