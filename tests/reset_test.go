//go:build linux

package tests

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/finalizer-dev/finalizer/internal/pgcluster/pgtest"
)

// progressPosted is a listener-form progress of one CDC source ending at
// commitTS (naive UTC), of the given batch, posted at posted.
func progressPosted(queryID, runID, name string, batch int64, posted time.Time, commitTS string) string {
	return fmt.Sprintf(`{"id":%q,"runId":%q,"name":%q,"timestamp":%q,"batchId":%d,"numInputRows":10,"inputRowsPerSecond":1.0,"processedRowsPerSecond":2.0,"durationMs":{"triggerExecution":120},"stateOperators":[],"sources":[{"description":"SqlServerCdc[dbo.orders]","startOffset":null,"endOffset":{"commit_ts":%q},"latestOffset":null,"numInputRows":10,"inputRowsPerSecond":1.0,"processedRowsPerSecond":2.0,"metrics":{}}],"sink":{"description":"DeltaSink[bronze.orders]","numOutputRows":10,"metrics":{}},"observedMetrics":{}}`,
		queryID, runID, name, posted.UTC().Format("2006-01-02T15:04:05.000Z"), batch, commitTS)
}

// TestCheckpointResetIsSaidAndRewound: the query restarts from a new
// checkpoint (a new query id at batch 0) on a table with a verdict. The
// service says it loudly (a WARN, finalizer_history_signs_total, the table
// marked in status and GET /v1/tables/{t}) and moves nothing back; the
// operator rewinds and retires the old query's feeder, the mark is cleared,
// and the reset run's next progress moves the verdict forward from the
// rewound point.
func TestCheckpointResetIsSaidAndRewound(t *testing.T) {
	pgURL := pgtest.URL(t)
	s := startServe(t, serveOpts{pgURL: pgURL, config: `
tables:
  - table: bronze.orders
    query: orders-v1
`})
	pub := connect(t, s.natsURL)
	pg := []string{"--postgres-url", pgURL}
	now := time.Now().UTC()
	pub.publish("started", queryA, runA, startedJSON(queryA, runA, "orders-v1"))
	pub.publish("progress", queryA, runA, progressPosted(queryA, runA, "orders-v1", 811, now, "2026-09-28T15:07:00"))
	waitVerdict(t, pgURL, "bronze.orders", "2026-09-28T15:00:00Z")

	// The full refresh: a new checkpoint, so a new query id, at batch 0.
	pub.publish("started", queryC, runC, startedJSON(queryC, runC, "orders-v1"))
	pub.publish("progress", queryC, runC, progressPosted(queryC, runC, "orders-v1", 0, time.Now().UTC().Add(time.Second), "2026-09-28T09:10:00"))
	eventually(t, "the reset metric", func() bool {
		return sample(t, s.httpURL, `finalizer_history_signs_total{kind="reset"}`) == 1
	})
	eventually(t, "the WARN", func() bool {
		return strings.Contains(s.stderr.String(), "a new query id started at batch 0 on a table with a verdict")
	})
	var tbl struct {
		FinalizedUntil time.Time `json:"finalized_until"`
		Mark           string    `json:"mark"`
		Marks          int64     `json:"marks"`
		Runs           []struct {
			RunID  string `json:"run_id"`
			Behind int64  `json:"behind"`
			Sign   string `json:"sign"`
		} `json:"runs"`
	}
	eventually(t, "the table marked", func() bool {
		getJSON(t, s.httpURL+"/v1/tables/bronze.orders", &tbl)
		return strings.HasPrefix(tbl.Mark, "reset: query "+queryC+" started at batch 0")
	})
	if !tbl.FinalizedUntil.Equal(utc("2026-09-28T15:00:00Z")) {
		t.Errorf("a reset moved the verdict: %v", tbl.FinalizedUntil)
	}
	eventually(t, "the sign shown on the run", func() bool {
		getJSON(t, s.httpURL+"/v1/tables/bronze.orders", &tbl)
		for _, r := range tbl.Runs {
			if r.RunID == runC && strings.HasPrefix(r.Sign, "reset:") {
				return true
			}
		}
		return false
	})
	code, out, _ := cli(t, nil, append([]string{"status", "--table", "bronze.orders", "--http-url", s.httpURL}, pg...)...)
	if code != 0 || !strings.Contains(out, "MARKED bronze.orders") || !strings.Contains(out, "finalizer rewind --table bronze.orders") {
		t.Errorf("status: exit %d\n%s", code, out)
	}
	if code := finalExit(t, pg, "bronze.orders", "2026-09-28T15:00:00Z"); code != 0 {
		t.Errorf("is-final 15:00: exit %d; only a rewind moves the verdict back", code)
	}

	// The operator rewinds to where the reprocessing stands, and retires
	// the old query id: it will never report again (ADR 0019).
	if code, out, e := cli(t, nil, append([]string{"rewind", "--table", "bronze.orders", "--to", "2026-09-28T09:00:00Z",
		"--reason", "orders-v1 full refresh", "--retire-feeder", queryA}, pg...)...); code != 0 || !strings.Contains(out, "retired feeder "+queryA) {
		t.Fatalf("rewind: %d %s %s", code, out, e)
	}
	eventually(t, "the service heard the rewind", func() bool { return sample(t, s.httpURL, "finalizer_rewinds_seen_total") == 1 })
	tbl.Mark, tbl.Marks = "", 0 // omitted when cleared
	getJSON(t, s.httpURL+"/v1/tables/bronze.orders", &tbl)
	if tbl.Mark != "" || !tbl.FinalizedUntil.Equal(utc("2026-09-28T09:00:00Z")) {
		t.Errorf("after the rewind: %+v", tbl)
	}
	// The reset run's next progress moves the verdict from 09:00, though
	// its tracker had seen the verdict at 15:00.
	pub.publish("progress", queryC, runC, progressPosted(queryC, runC, "orders-v1", 2, time.Now().UTC().Add(3*time.Second), "2026-09-28T11:10:00"))
	waitVerdict(t, pgURL, "bronze.orders", "2026-09-28T11:00:00Z")
	if code := finalExit(t, pg, "bronze.orders", "2026-09-28T12:00:00Z"); code != 1 {
		t.Errorf("is-final 12:00 while the refresh is at 11:10: exit %d, want 1", code)
	}
}

// TestRollbackBehindIsCountedAndShown: the same query restarts from a
// checkpoint rolled back (a new run, batches and times going back): each
// candidate below the stored end is counted (the metric, the run's behind
// in /v1/runs) and the table is marked; the verdict stays.
func TestRollbackBehindIsCountedAndShown(t *testing.T) {
	pgURL := pgtest.URL(t)
	s := startServe(t, serveOpts{pgURL: pgURL, config: `
tables:
  - table: bronze.orders
    query: orders-v1
`})
	pub := connect(t, s.natsURL)
	now := time.Now().UTC()
	pub.publish("started", queryA, runA, startedJSON(queryA, runA, "orders-v1"))
	pub.publish("progress", queryA, runA, progressPosted(queryA, runA, "orders-v1", 811, now, "2026-09-28T15:07:00"))
	waitVerdict(t, pgURL, "bronze.orders", "2026-09-28T15:00:00Z")
	pub.publish("started", queryA, runB, startedJSON(queryA, runB, "orders-v1"))
	pub.publish("progress", queryA, runB, progressPosted(queryA, runB, "orders-v1", 700, now.Add(time.Second), "2026-09-28T12:10:00"))
	eventually(t, "the first behind", func() bool {
		return sample(t, s.httpURL, `finalizer_history_signs_total{kind="behind"}`) == 1
	})
	pub.publish("progress", queryA, runB, progressPosted(queryA, runB, "orders-v1", 701, now.Add(2*time.Second), "2026-09-28T12:40:00"))
	eventually(t, "the second behind", func() bool {
		return sample(t, s.httpURL, `finalizer_history_signs_total{kind="behind"}`) == 2
	})
	var doc struct {
		Runs []struct {
			RunID  string `json:"run_id"`
			Behind int64  `json:"behind"`
			Sign   string `json:"sign"`
		} `json:"runs"`
	}
	getJSON(t, s.httpURL+"/v1/runs", &doc)
	found := false
	for _, r := range doc.Runs {
		if r.RunID == runB {
			found = true
			if r.Behind != 2 || !strings.HasPrefix(r.Sign, "behind:") {
				t.Errorf("run B: %+v", r)
			}
		}
	}
	if !found {
		t.Errorf("run B not in /v1/runs: %+v", doc)
	}
	var tbl struct {
		FinalizedUntil time.Time `json:"finalized_until"`
		Mark           string    `json:"mark"`
	}
	getJSON(t, s.httpURL+"/v1/tables/bronze.orders", &tbl)
	if !strings.HasPrefix(tbl.Mark, "behind: run "+runB) || !tbl.FinalizedUntil.Equal(utc("2026-09-28T15:00:00Z")) {
		t.Errorf("table: %+v", tbl)
	}
	s.logged(t, "the WARN of a candidate below the stored end", "a candidate is below the verdict's stored end")
}
