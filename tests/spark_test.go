//go:build linux

package tests

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/finalizer-dev/finalizer/internal/pgcluster/pgtest"
)

// The real Spark event log (Apache Spark's own test resource, a Spark
// 3.1.0-SNAPSHOT StructuredKafkaWordCount run) through `finalizer publish`
// into a running service.
const sparkLog = "../progress/testdata/local-1596020211915.streaming.jsonl"

const (
	sparkQuery = "8d268dc2-bc9c-4be8-97a9-b135d2943028"
	sparkRun   = "e225d92f-2545-48f8-87a2-9c0309580f8a"
)

// The query's name is null, so the rule matches its id. Kafka in Spark 3.1
// reports no latestOffset, so time: trigger is used only with
// processing_time: true (the word that the column is Spark's processing
// time; ADR 0012). With granularity: minute the verdict follows from the progress timestamps,
// by hand: the eight batches end at 10:56:56.015Z (batch 0) and
// 10:57:03.168Z ... 10:57:05.916Z (batches 1-7), so the newest period that
// holds an end is 10:57-10:58 and every minute before 10:57 is final:
// finalized_until = 2020-07-29T10:57:00Z, reached from batch 1 on.
const sparkConfig = `
tables:
  - table: spark.wordcount
    query: 8d268dc2-bc9c-4be8-97a9-b135d2943028
    time: trigger
    processing_time: true
    granularity: minute
`

func TestSparkEventLogThroughPublish(t *testing.T) {
	pgURL := pgtest.URL(t)
	s := startServe(t, serveOpts{pgURL: pgURL, config: sparkConfig})
	code, out, errOut := cli(t, nil, "publish", "--nats-url", s.natsURL, sparkLog)
	if code != 0 {
		t.Fatalf("publish exit %d: %s %s", code, out, errOut)
	}
	if !strings.Contains(out, "published 1 started, 8 progress, 0 idle, 0 terminated; skipped 3 other events, 0 lines that are not JSON, 0 malformed") {
		t.Fatalf("publish summary: %s", out)
	}
	r := waitVerdict(t, pgURL, "spark.wordcount", "2020-07-29T10:57:00Z")
	if r.RunID != sparkRun || r.BatchID < 1 {
		t.Fatalf("provenance: run %s batch %d, want run %s and batch >= 1", r.RunID, r.BatchID, sparkRun)
	}
	// One write per period at most: 10:56 (if batch 0 was taken alone) and 10:57.
	if w := metric(t, s.httpURL, "finalizer_control_writes_total"); w < 1 || w > 2 {
		t.Fatalf("%v writes, want 1 or 2 (one per minute crossed)", w)
	}
}

// A listener-form document (what PySpark's event.progress.json returns,
// pretty-printed as Spark does) and its event-log twin give the same
// verdict, and the one computed by hand.
func TestListenerAndEventLogTwinsAgree(t *testing.T) {
	type pair struct {
		name, spec, table, want string
	}
	pairs := []pair{
		// eventTime.watermark 2016-12-05T20:44:20.000Z, hourly.
		{"kafka_watermark", "time: watermark\n    granularity: hour", "twin.watermark", "2016-12-05T20:00:00Z"},
		// endOffset.commit_ts 2026-09-28T14:37:12.345 (naive UTC), hourly.
		{"cdc_commit_ts", "time: offset:/commit_ts\n    granularity: hour", "twin.commit_ts", "2026-09-28T14:00:00Z"},
		// progress timestamp 2016-12-05T20:54:20.827Z, by the minute; offsets are numbers above 2^53
		// and latestOffset is ahead of endOffset, so only a processing-time column fits.
		{"numeric_offsets", "time: trigger\n    processing_time: true\n    granularity: minute", "twin.trigger", "2016-12-05T20:54:00Z"},
	}
	const origQuery, origRun = "8c57e1ec-94b5-4c99-b100-f694162df0b9", "5b5c1f2e-1a7d-4e4b-9f0c-2d6d3e1c7a10"
	ids := func(i int) (string, string) {
		return fmt.Sprintf("00000000-0000-4000-8000-%012d", i+1), fmt.Sprintf("11111111-0000-4000-8000-%012d", i+1)
	}
	var config strings.Builder
	config.WriteString("tables:\n")
	for i, p := range pairs {
		q, _ := ids(i)
		fmt.Fprintf(&config, "  - table: %s\n    query: %s\n    %s\n", p.table, q, p.spec)
	}
	verdicts := map[string]map[string]string{}
	for _, form := range []string{"listener", "eventlog"} {
		pgURL := pgtest.URL(t)
		s := startServe(t, serveOpts{pgURL: pgURL, config: config.String()})
		pub := connect(t, s.natsURL)
		verdicts[form] = map[string]string{}
		for i, p := range pairs {
			raw, err := os.ReadFile(filepath.Join("../progress/testdata/twins", p.name+"."+form+".json"))
			if err != nil {
				t.Fatal(err)
			}
			q, r := ids(i)
			doc := strings.ReplaceAll(strings.ReplaceAll(string(raw), origQuery, q), origRun, r)
			pub.publish("progress", q, r, doc)
			row := waitVerdict(t, pgURL, p.table, p.want)
			verdicts[form][p.table] = row.FinalizedUntil.String()
		}
		s.stop()
	}
	for table, v := range verdicts["listener"] {
		if verdicts["eventlog"][table] != v {
			t.Errorf("%s: listener form %s, event-log form %s", table, v, verdicts["eventlog"][table])
		}
	}
}

// The PySpark listener (clients/pyspark, stdlib only) moves a verdict: the
// real Spark log is replayed through its callbacks by the stand-in pyspark
// (tests/drive.py), and the service tracks the query by its id.
func TestPySparkListenerMovesVerdict(t *testing.T) {
	python := os.Getenv("FINALIZER_PYTHON")
	if python == "" {
		python = "python3"
	}
	if _, err := exec.LookPath(python); err != nil {
		if os.Getenv("FINALIZER_REQUIRE_PYTHON") == "1" {
			t.Fatalf("python3 is required (FINALIZER_REQUIRE_PYTHON=1): %v", err)
		}
		t.Skipf("no python3: %v", err)
	}
	pgURL := pgtest.URL(t)
	s := startServe(t, serveOpts{pgURL: pgURL, config: sparkConfig})
	cmd := exec.Command(python, "../clients/pyspark/tests/drive.py", "--url", s.natsURL, "--events", sparkLog)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("drive.py: %v\n%s", err, out)
	}
	waitVerdict(t, pgURL, "spark.wordcount", "2020-07-29T10:57:00Z")
	var accepted float64
	eventually(t, "events counted", func() bool {
		accepted = metric(t, s.httpURL, `finalizer_events_total{kind="progress",outcome="accepted"}`)
		return accepted >= 1
	})
}
