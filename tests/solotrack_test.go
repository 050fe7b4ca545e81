//go:build linux

package tests

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/finalizer-dev/finalizer/control"
	"github.com/finalizer-dev/finalizer/internal/pgcluster/pgtest/pgcontrol"
)

// TestASoloTablesTrackedFeederShowsItsQueryName: an explicit track names
// no query; its tracker learns the name from the run's progress and its
// advances carry it, but a solo table's advance writes only the table's
// row, so the feeder's row, joined by the track without a name, showed
// none in feeders list and status until another query shared the table.
// Here the table is solo already, its feeder's row without a name (as a
// first verdict from an event without a name, an idle event, or an
// earlier release's explicit track left it): a track of a new run of that
// query and its progress give the row the name.
func TestASoloTablesTrackedFeederShowsItsQueryName(t *testing.T) {
	store, pgURL := pgcontrol.Store(t)
	if _, _, err := store.Advance(context.Background(), control.Advance{Table: "bronze.solo", QueryID: queryA, RunID: runB,
		BatchID: 1, FinalizedUntil: utc("2026-09-28T17:00:00Z"), EndTime: utc("2026-09-28T17:10:00Z")}); err != nil {
		t.Fatal(err)
	}
	pg := []string{"--postgres-url", pgURL}
	s := startServe(t, serveOpts{pgURL: pgURL, dataDir: t.TempDir()})
	if code, out, e := cli(t, nil, "track", "--nats-url", s.natsURL, "--query-id", queryA, "--run-id", runA, "--table", "bronze.solo"); code != 0 {
		t.Fatalf("track: exit %d\n%s%s", code, out, e)
	}
	pub := connect(t, s.natsURL)
	pub.publish("started", queryA, runA, startedJSON(queryA, runA, "orders-v1"))
	pub.publish("progress", queryA, runA, cdcProgressJSON(queryA, runA, "orders-v1", "2026-09-28T18:10:00"))
	waitVerdict(t, pgURL, "bronze.solo", "2026-09-28T18:00:00Z")

	var list string
	eventually(t, "feeders list to name the query", func() bool {
		code, out, e := cli(t, nil, append([]string{"feeders", "list"}, pg...)...)
		if code != 0 {
			t.Fatalf("feeders list: exit %d\n%s%s", code, out, e)
		}
		list = out
		return strings.Contains(out, "orders-v1")
	})
	if !strings.Contains(list, "bronze.solo") {
		t.Fatalf("feeders list:\n%s", list)
	}
	code, out, e := cli(t, nil, append([]string{"status", "--json"}, pg...)...)
	if code != 0 && code != 1 {
		t.Fatalf("status --json: exit %d\n%s%s", code, out, e)
	}
	var doc struct {
		Tables []struct {
			Table   string `json:"table"`
			Feeders []struct {
				Feeder    string `json:"feeder"`
				QueryName string `json:"query_name"`
			} `json:"feeders"`
		} `json:"tables"`
	}
	if err := json.Unmarshal([]byte(out), &doc); err != nil {
		t.Fatalf("status --json: %v\n%s", err, out)
	}
	if len(doc.Tables) != 1 || len(doc.Tables[0].Feeders) != 1 || doc.Tables[0].Feeders[0].QueryName != "orders-v1" {
		t.Fatalf("status --json shows %+v, want bronze.solo's one feeder named orders-v1", doc.Tables)
	}
}
