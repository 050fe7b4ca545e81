//go:build linux

package tests

import (
	"fmt"
	"strings"
	"testing"

	"github.com/finalizer-dev/finalizer/internal/pgcluster/pgtest"
)

// Quiet sources (issue 15, ADR 0013) through the real binary: a CDC run
// whose last change is at 13:40, then Spark 3.5's idle events at 15:30 and
// 16:10. With quiet: {after: 5m} the verdict reaches 16:00 with one write
// per period crossed, and says why; without it, it stays at 13:00.
func TestQuietSourceThroughTheService(t *testing.T) {
	pgURL := pgtest.URL(t)
	s := startServe(t, serveOpts{pgURL: pgURL, config: `
tables:
  - {table: q.on, query: quiet-on, quiet: {after: 5m}}
  - {table: q.off, query: quiet-off}
`})
	pub := connect(t, s.natsURL)
	idle := func(q, r, at string) string {
		return fmt.Sprintf(`{"id":%q,"runId":%q,"timestamp":%q}`, q, r, at)
	}
	for i, name := range []string{"quiet-on", "quiet-off"} {
		q, r := id(0x1700+2*i), id(0x1701+2*i)
		table := "q." + strings.TrimPrefix(name, "quiet-")
		pub.publish("progress", q, r, cdcProgressJSON(q, r, name, "2026-09-28T13:40:00"))
		waitVerdict(t, pgURL, table, "2026-09-28T13:00:00Z")
		pub.publish("idle", q, r, idle(q, r, "2026-09-28T15:30:00.000Z"))
		if name == "quiet-on" {
			waitVerdict(t, pgURL, table, "2026-09-28T15:00:00Z")
		}
		pub.publish("idle", q, r, idle(q, r, "2026-09-28T16:10:00.000Z"))
	}
	waitVerdict(t, pgURL, "q.on", "2026-09-28T16:00:00Z")
	eventually(t, "two quiet moves counted", func() bool {
		return sample(t, s.httpURL, `finalizer_quiet_advances_total{signal="idle_event"}`) == 2
	})
	if w := metric(t, s.httpURL, "finalizer_control_writes_total"); w != 4 {
		t.Errorf("%v control-table writes, want 4 (q.on: 13:00, 15:00, 16:00; q.off: 13:00)", w)
	}
	if row, _ := readRow(t, pgURL, "q.off"); !row.FinalizedUntil.Equal(utc("2026-09-28T13:00:00Z")) {
		t.Errorf("q.off verdict %v, want 13:00 (quiet is off)", row.FinalizedUntil)
	}
	var table struct {
		Runs []struct {
			Quiet *struct {
				Signal string `json:"signal"`
				At     string `json:"at"`
				Until  string `json:"until"`
			} `json:"quiet"`
		} `json:"runs"`
	}
	getJSON(t, s.httpURL+"/v1/tables/q.on", &table)
	if len(table.Runs) != 1 || table.Runs[0].Quiet == nil || table.Runs[0].Quiet.Signal != "idle_event" ||
		table.Runs[0].Quiet.At != "2026-09-28T16:10:00Z" || table.Runs[0].Quiet.Until != "2026-09-28T16:00:00Z" {
		t.Errorf("/v1/tables/q.on runs = %+v, want the quiet move from the idle event at 16:10", table.Runs)
	}
	code, out, errOut := cli(t, nil, "status", "--postgres-url", pgURL, "--http-url", s.httpURL)
	if code != 0 || !strings.Contains(out, "running, quiet (idle_event)") {
		t.Errorf("status: exit %d\n%s%s", code, out, errOut)
	}
}
