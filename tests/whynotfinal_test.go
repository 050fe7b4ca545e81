//go:build linux

package tests

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/finalizer-dev/finalizer/internal/pgcluster/pgtest"
)

// TestGatesSayWhyATableIsNotFinal (outside review): is-final printed
// "no verdict yet (held by load-notime-1: no verdict of its own yet
// (reporting))" and wait "not final ... within 2s" while the service held
// every progress of that run (no time where the rule reads it, or a time an
// hour ahead); the reason was only in status's runs. Every gating answer —
// is-final's line, wait's time-out, GET /v1/tables/{t}/final — carries the
// service's own held reason now, before the first verdict and after it, and
// the exit codes stay 1. wait says it on stderr while it waits too.
func TestGatesSayWhyATableIsNotFinal(t *testing.T) {
	pgURL := pgtest.URL(t)
	s := startServe(t, serveOpts{pgURL: pgURL, config: `
tracking:
  future_skew: 1m
tables:
  - {table: "load.{name}", query: "load-*", time: "offset:/commit_ts", granularity: minute}
`})
	pub := connect(t, s.natsURL)
	const naive = "2006-01-02T15:04:05"
	now := time.Now().UTC()
	qN, rN := id(0x4600), id(0x4601) // its endOffset has no commit_ts
	qF, rF := id(0x4602), id(0x4603) // its time is an hour ahead
	qL, rL := id(0x4604), id(0x4605) // a verdict, then a time an hour ahead
	pub.publish("progress", qN, rN, fmt.Sprintf(`{"id":%q,"runId":%q,"name":"load-notime-1","timestamp":"2026-09-28T15:00:00.000Z","batchId":1,"numInputRows":10,"sources":[{"description":"x","startOffset":null,"endOffset":{"lsn":"0x27"},"latestOffset":null,"numInputRows":10}]}`, qN, rN))
	pub.publish("progress", qF, rF, progressAt(qF, rF, "load-future-1", 1, now.Add(time.Hour).Format(naive)))
	pub.publish("progress", qL, rL, progressAt(qL, rL, "load-late-1", 1, now.Add(-10*time.Minute).Format(naive)))
	eventually(t, "load-late-1's first verdict", func() bool { _, ok := readRow(t, pgURL, "load.load-late-1"); return ok })
	pub.publish("progress", qL, rL, progressAt(qL, rL, "load-late-1", 2, now.Add(time.Hour).Format(naive)))

	noTime := `held by no_time: source 0: pointer "/commit_ts" finds nothing in endOffset`
	future := "held by future: the time "
	held := map[string]string{rN: noTime, rF: future, rL: future}
	eventually(t, "the three runs held", func() bool {
		code, body := httpGet(t, s.httpURL+"/v1/runs", "")
		if code != http.StatusOK {
			return false
		}
		var doc struct {
			Runs []struct {
				RunID string `json:"run_id"`
				Held  string `json:"held"`
			} `json:"runs"`
		}
		_ = json.Unmarshal([]byte(body), &doc)
		n := 0
		for _, r := range doc.Runs {
			if want, ok := held[r.RunID]; ok && strings.HasPrefix("held by "+r.Held, want) {
				n++
			}
		}
		return n == len(held)
	})

	end := now.Add(time.Minute).Format(time.RFC3339)
	flags := []string{"--postgres-url", pgURL, "--http-url", s.httpURL}
	for _, c := range []struct{ table, run, want, line string }{
		{"load.load-notime-1", rN, noTime, "no verdict yet (held by load-notime-1: no verdict of its own yet (reporting); run " + rN[:8] + " (load-notime-1): "},
		{"load.load-future-1", rF, future, "no verdict yet (held by load-future-1: no verdict of its own yet (reporting); run " + rF[:8] + " (load-future-1): "},
		{"load.load-late-1", rL, future, "is not final (final until "},
	} {
		code, out, errOut := cli(t, nil, append([]string{"is-final", "--table", c.table, "--period-end", end}, flags...)...)
		if code != 1 || !strings.Contains(out, c.line) || !strings.Contains(out, c.want) {
			t.Errorf("is-final %s: exit %d, stdout %q, stderr %q; want 1 with %q and %q", c.table, code, out, errOut, c.line, c.want)
		}
		t.Logf("is-final: %s", out)
		code, out, errOut = cli(t, nil, append([]string{"wait", "--table", c.table, "--until", end, "--timeout", "2s"}, flags...)...)
		if code != 1 || !strings.Contains(errOut, "within 2s (") || !strings.Contains(errOut, c.want) || !strings.Contains(errOut, c.run[:8]) ||
			!strings.Contains(errOut, "finalizer: still waiting for "+c.table+" to reach "+end+": ") {
			t.Errorf("wait %s: exit %d, stdout %q, stderr %q; want 1 with %q, noted while waiting and at the time-out", c.table, code, out, errOut, c.want)
		}
		t.Logf("wait: %s", errOut)
		for _, q := range []string{"", "&wait=100ms"} {
			var fin struct {
				Final bool   `json:"final"`
				Why   string `json:"why"`
			}
			u := s.httpURL + "/v1/tables/" + url.PathEscape(c.table) + "/final?period_end=" + url.QueryEscape(end) + q
			if code := getJSON(t, u, &fin); code != http.StatusOK || fin.Final || !strings.Contains(fin.Why, c.want) {
				t.Errorf("GET /final%s of %s: %d %+v; want not final, why with %q", q, c.table, code, fin, c.want)
			}
		}
	}
	// Without the service's runs nothing is claimed of them, and the
	// answer is still "not final" (1).
	code, out, _ := cli(t, nil, "is-final", "--table", "load.load-notime-1", "--period-end", end, "--postgres-url", pgURL, "--http-url", "")
	if code != 1 || strings.Contains(out, "no_time") || !strings.Contains(out, "no verdict yet (held by load-notime-1: no verdict of its own yet (unknown))") {
		t.Errorf("is-final without the service: exit %d, stdout %q", code, out)
	}
	// The service not answering: the why says so (the URL redacted),
	// and the answer is still "not final" (1); an --http-url no request
	// can be made to is a usage error (2).
	code, out, errOut := cli(t, nil, "is-final", "--table", "load.load-notime-1", "--period-end", end, "--postgres-url", pgURL, "--http-url", "http://u:Hunter2SecretPw@127.0.0.1:1")
	if code != 1 || strings.Contains(out+errOut, "Hunter2SecretPw") ||
		!strings.Contains(out, "(held by load-notime-1: no verdict of its own yet (unknown); the runs' reasons are not known: the service at http://u:xxxxx@127.0.0.1:1 did not answer (connection refused))") {
		t.Errorf("is-final with the service unreachable: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
	code, out, errOut = cli(t, nil, "is-final", "--table", "load.load-notime-1", "--period-end", end, "--postgres-url", pgURL, "--http-url", "not a url")
	if code != 2 || out != "" || !strings.Contains(errOut, "is not an http:// or https:// URL") {
		t.Errorf("is-final --http-url 'not a url': exit %d, stdout %q, stderr %q; want 2", code, out, errOut)
	}
}
