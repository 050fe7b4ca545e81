//go:build linux

package tests

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/finalizer-dev/finalizer/internal/pgcluster/pgtest"
)

// TestLoneRefusalBurstCountIsLogged (ADR 0022, addendum 12): the outside
// review's repro, scaled down, through the real service: a lone burst of
// runs refused for their names (too long; a control character) logs one
// WARN line per reason, and once the 10 s interval has ended a
// "log lines held back" WARN line per reason says how many more were
// refused; so does the listener of a burst of events it dropped (a raw
// control character is no JSON). Before, nothing ever said it.
func TestLoneRefusalBurstCountIsLogged(t *testing.T) {
	pgURL := pgtest.URL(t)
	config := `
tracking:
  stale_after: 2s   # the janitor, which says the held counts, sweeps every 1 s
tables:
  - table: "bad.{name}"
    query: "*"
`
	s := startServe(t, serveOpts{pgURL: pgURL, config: config})
	pub := connect(t, s.natsURL)
	long := strings.Repeat("q", 2048)
	for i := range 200 {
		pub.publish("started", id(0x1000+2*i), id(0x1001+2*i), startedJSON(id(0x1000+2*i), id(0x1001+2*i), long))
	}
	for i := range 20 {
		q, r := id(0x2000+2*i), id(0x2001+2*i)
		pub.publish("started", q, r, fmt.Sprintf(`{"id":%q,"runId":%q,"name":"bad\u0001name","timestamp":"2026-09-28T13:00:00.000Z"}`, q, r))
	}
	// A raw control character is no JSON: the listener drops the event.
	for i := range 20 {
		pub.publish("started", id(0x3000+2*i), id(0x3001+2*i), startedJSON(id(0x3000+2*i), id(0x3001+2*i), "raw\x01name"))
	}
	held := func() map[string]float64 {
		out := map[string]float64{}
		for _, line := range strings.Split(s.stderr.String(), "\n") {
			var m map[string]any
			if json.Unmarshal([]byte(line), &m) != nil || m["msg"] != "log lines held back" {
				continue
			}
			if m["level"] != "warn" {
				t.Errorf("held line at %v: %s", m["level"], line)
			}
			class := fmt.Sprint(m["kind"], "/", m["class"])
			n, _ := m["suppressed"].(float64)
			out[class] += n
		}
		return out
	}
	s.logged(t, "the first refusal", "run refused; its events are dropped")
	want := map[string]float64{"registry/query_name": 199, "registry/table_name": 19, "listener/malformed/started": 19}
	eventually(t, "the held lines said", func() bool { return len(held()) == len(want) })
	if got := held(); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("held counts %v, want %v", got, want)
	}
	if n := strings.Count(s.stderr.String(), "run refused; its events are dropped"); n != 2 {
		t.Errorf("%d refusal lines, want one per reason", n)
	}
	if n := strings.Count(s.stderr.String(), `"msg":"event dropped"`); n != 1 {
		t.Errorf("%d drop lines, want 1", n)
	}
}
