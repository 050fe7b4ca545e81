package main

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/finalizer-dev/finalizer/control"
)

// TestATableWithFeedersAndNoVerdictIsKnown: a configured table with
// expected feeders and no verdict row was "unknown" (exit 3, with a "did
// you mean" pointing at another table) to is-final and wait, while status
// --table knew what held it. Every gating command now counts a table with
// feeder rows as known: not final (exit 1), saying what holds it.
func TestATableWithFeedersAndNoVerdictIsKnown(t *testing.T) {
	url, s := controlDB(t)
	ctx := context.Background()
	advanceTo(t, s, "silver.exq", "q1", "other", "r1", statusAt) // a near name with a verdict
	if _, err := s.ExpectFeeders(ctx, "silver.exp", []string{"e-one", "e-two"}); err != nil {
		t.Fatal(err)
	}
	base := []string{"--table", "silver.exp", "--postgres-url", url, "--http-url", ""}
	code, out, errOut := runCLI(t, append([]string{"is-final", "--period-end", "2000-01-01T00:00:00Z"}, base...)...)
	if code != exitNegative || !strings.Contains(out, "no verdict yet (held by e-one: expected, never reported)") || strings.Contains(errOut, "did you mean") {
		t.Errorf("is-final: exit %d, stdout %q, stderr %q; want 1, held by e-one", code, out, errOut)
	}
	code, _, errOut = runCLI(t, append([]string{"wait", "--until", "2000-01-01T00:00:00Z", "--timeout", "300ms"}, base...)...)
	if code != exitNegative || strings.Contains(errOut, "unknown table") {
		t.Errorf("wait: exit %d, stderr %q; want 1 (timed out)", code, errOut)
	}
	code, out, errOut = runCLI(t, append([]string{"status"}, base...)...)
	if code != exitOK || !strings.Contains(out, "held by e-one: expected, never reported") {
		t.Errorf("status --table: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
}

// TestNoVerdictIsNeverTheZeroTime: a row with a NULL finalized_until (and
// a table with no row) has no verdict; is-final printed "final until
// 0001-01-01T00:00:00Z", rewind "the verdict is 0001-01-01...", the HTTP
// answer "finalized_until":"0001-01-01T00:00:00Z" and status --json
// "batch_id": 0. They say "no verdict yet", or null.
func TestNoVerdictIsNeverTheZeroTime(t *testing.T) {
	url, s := controlDB(t)
	execSQL(t, url, `INSERT INTO `+control.DefaultTable+` (table_name) VALUES ('silver.null')`)
	code, out, errOut := runCLI(t, "is-final", "--table", "silver.null", "--period-end", "2000-01-01T00:00:00Z", "--postgres-url", url, "--http-url", "")
	if code != exitNegative || strings.Contains(out+errOut, "0001-01-01") || !strings.Contains(out, "no verdict yet") {
		t.Errorf("is-final: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
	code, out, errOut = runCLI(t, "rewind", "--table", "silver.null", "--to", "2000-01-01T00:00:00Z", "--reason", "r", "--postgres-url", url, "--http-url", "")
	if code != exitUsage || strings.Contains(out+errOut, "0001-01-01") || !strings.Contains(errOut, "no verdict yet") {
		t.Errorf("rewind: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
	code, out, errOut = runCLI(t, "status", "--json", "--postgres-url", url, "--http-url", "")
	if code != exitOK || strings.Contains(out, "0001-01-01") || !strings.Contains(out, `"batch_id": null`) {
		t.Errorf("status --json: exit %d, stdout %s, stderr %q", code, out, errOut)
	}
	_ = s

	resp := map[string]any{}
	setFinal(resp, control.Verdict{Table: "silver.null"}, time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC))
	raw, _ := json.Marshal(resp)
	if !strings.Contains(string(raw), `"finalized_until":null`) || !strings.Contains(string(raw), `"final":false`) {
		t.Errorf("/v1/tables/{t}/final of a row without a verdict: %s", raw)
	}
}
