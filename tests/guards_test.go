//go:build linux

package tests

import (
	"fmt"
	"strings"
	"testing"

	"github.com/finalizer-dev/finalizer/internal/pgcluster/pgtest"
)

// The findings of issue 16 through the real binary, on progress documents
// shaped like Spark's (ADR 0012). Before the guards, every table below got
// a verdict ahead of its data (or, for the zone and datetimeoffset cases, a
// wrong one or none). Finding 5 (future times) is in badinput_test.go and
// finalizer/guards_test.go.
const guardsConfig = `
tables:
  - {table: g.stateless, query: wm-stateless, time: watermark}
  - {table: g.join, query: wm-join, time: watermark}
  - {table: g.join_optin, query: wm-join-optin, time: watermark, late_rows_filtered: true}
  - {table: g.nodata, query: wm-nodata, time: watermark}
  - {table: g.kafka, query: kafka-ingest, time: trigger}
  - {table: g.kafka_pt, query: kafka-pt, time: trigger, processing_time: true}
  - {table: g.local, query: cdc-local, naive_timezone: Europe/Berlin}
  - {table: g.dto, query: cdc-dto}
  - {table: g.partition, query: kafka-offset, time: "offset:/orders/0"}
  - {table: g.seconds, query: epoch-seconds, time: "offset:/ts"}
  - {table: g.seconds_s, query: epoch-seconds-s, time: "offset:/ts", unit: s}
`

// guardProgress is a listener-form progress as Spark 3.5 writes it.
func guardProgress(q, r, name string, batch int, durationMs, eventTime, ops, sources string) string {
	return fmt.Sprintf(`{"id":%q,"runId":%q,"name":%q,"timestamp":"2026-09-28T14:38:05.120Z","batchId":%d,"batchDuration":1183,"numInputRows":89,"inputRowsPerSecond":10.0,"processedRowsPerSecond":229.9,"durationMs":%s,"eventTime":%s,"stateOperators":%s,"sources":%s,"sink":{"description":"DeltaSink[s3://lake/t]","numOutputRows":-1}}`,
		q, r, name, batch, durationMs, eventTime, ops, sources)
}

const (
	gRan     = `{"addBatch":843,"getBatch":0,"latestOffset":31,"queryPlanning":98,"triggerExecution":1183,"walCommit":45}`
	gNoBatch = `{"latestOffset":2,"triggerExecution":3}`
	gWM1430  = `{"avg":"2026-09-28T14:37:00.000Z","max":"2026-09-28T14:40:00.000Z","min":"2026-09-28T14:30:00.000Z","watermark":"2026-09-28T14:30:00.000Z"}`
	gKafka   = `[{"description":"KafkaV2[Subscribe[events]]","startOffset":{"events":{"0":4377}},"endOffset":{"events":{"0":4466}},"latestOffset":{"events":{"0":4466}},"numInputRows":89}]`
	gBehind  = `[{"description":"KafkaV2[Subscribe[events]]","startOffset":{"events":{"0":4377}},"endOffset":{"events":{"0":4466}},"latestOffset":{"events":{"0":91200}},"numInputRows":89}]`
)

func gOp(name string) string {
	return fmt.Sprintf(`{"operatorName":%q,"numRowsTotal":4,"numRowsUpdated":1,"allUpdatesTimeMs":1,"numRowsRemoved":2,"allRemovalsTimeMs":34,"commitTimeMs":23,"memoryUsedBytes":3,"numRowsDroppedByWatermark":5,"numShufflePartitions":200,"numStateStoreInstances":200}`, name)
}

func gOffset(end string) string {
	return fmt.Sprintf(`[{"description":"src","startOffset":null,"endOffset":%s,"numInputRows":10}]`, end)
}

func TestGuardsThroughTheService(t *testing.T) {
	pgURL := pgtest.URL(t)
	s := startServe(t, serveOpts{pgURL: pgURL, config: guardsConfig})
	pub := connect(t, s.natsURL)
	n := 0x1600
	send := func(name string, docs ...func(q, r string) string) (string, string) {
		n += 2
		q, r := id(n), id(n+1)
		for _, d := range docs {
			pub.publish("progress", q, r, d(q, r))
		}
		return q, r
	}
	doc := func(name string, batch int, durationMs, eventTime, ops, sources string) func(q, r string) string {
		return func(q, r string) string { return guardProgress(q, r, name, batch, durationMs, eventTime, ops, sources) }
	}

	// Finding 1: a watermark on a stateless query.
	send("wm-stateless", doc("wm-stateless", 7, gRan, gWM1430, `[]`, gKafka))
	// Finding 2: a stream-stream join; and the same with the opt-in.
	send("wm-join", doc("wm-join", 7, gRan, gWM1430, `[`+gOp("symmetricHashJoin")+`]`, gKafka))
	send("wm-join-optin", doc("wm-join-optin", 7, gRan, gWM1430, `[`+gOp("symmetricHashJoin")+`]`, gKafka))
	// Finding 3: batch 7 ran at a 13:50 watermark; the trigger after it
	// ran nothing and reports batch 8's, 14:30.
	// (The run's slot keeps only the newest progress: batch 7 is applied
	// before the no-data one is sent.)
	qN, rN := send("wm-nodata", doc("wm-nodata", 7, gRan, `{"watermark":"2026-09-28T13:50:00.000Z"}`, `[`+gOp("stateStoreSave")+`]`, gKafka))
	waitVerdict(t, pgURL, "g.nodata", "2026-09-28T13:00:00Z")
	pub.publish("progress", qN, rN, doc("wm-nodata", 8, gNoBatch, `{"watermark":"2026-09-28T14:30:00.000Z"}`, `[`+gOp("stateStoreSave")+`]`, strings.ReplaceAll(gKafka, `"numInputRows":89`, `"numInputRows":0`))(qN, rN))
	// Finding 4: a Kafka source behind its latestOffset, with and without
	// processing_time.
	send("kafka-ingest", doc("kafka-ingest", 3, gRan, `{}`, `[]`, gBehind))
	send("kafka-pt", doc("kafka-pt", 3, gRan, `{}`, `[]`, gBehind))
	// Finding 6: SQL Server's local tran_end_time, and a datetimeoffset.
	send("cdc-local", doc("cdc-local", 3, gRan, `{}`, `[]`, gOffset(`{"lsn":"0x2B","commit_ts":"2026-09-28 14:37:12.345"}`)))
	send("cdc-dto", doc("cdc-dto", 3, gRan, `{}`, `[]`, gOffset(`{"lsn":"0x2B","commit_ts":"2026-09-28 14:37:12.3450000 +02:00"}`)))
	// Finding 7: a partition offset and epoch seconds read as times.
	send("kafka-offset", doc("kafka-offset", 3, gRan, `{}`, `[]`, gOffset(`{"orders":{"0":48917}}`)))
	send("epoch-seconds", doc("epoch-seconds", 3, gRan, `{}`, `[]`, gOffset(`{"ts":1790606232}`)))
	send("epoch-seconds-s", doc("epoch-seconds-s", 3, gRan, `{}`, `[]`, gOffset(`{"ts":1790606232}`)))

	// What the guards allow: the opt-ins, the batch that ran, the zones.
	waitVerdict(t, pgURL, "g.join_optin", "2026-09-28T14:00:00Z")
	waitVerdict(t, pgURL, "g.kafka_pt", "2026-09-28T14:00:00Z")
	waitVerdict(t, pgURL, "g.local", "2026-09-28T12:00:00Z")
	waitVerdict(t, pgURL, "g.dto", "2026-09-28T12:00:00Z")
	waitVerdict(t, pgURL, "g.seconds_s", "2026-09-28T14:00:00Z")

	// What they hold, counted and shown.
	want := map[string]string{
		"g.stateless": "watermark_unbounded",
		"g.join":      "watermark_unbounded",
		"g.nodata":    "not_executed",
		"g.kafka":     "not_caught_up",
		"g.partition": "implausible",
		"g.seconds":   "implausible",
	}
	eventually(t, "every guard holds its run", func() bool {
		held := 0
		for _, r := range guardRuns(t, s.httpURL) {
			if g, ok := want[r.Table]; ok && strings.HasPrefix(r.Held, g+": ") && r.Guards[g] == 1 {
				held++
			}
		}
		return held == len(want)
	})
	for table, guard := range want {
		if table == "g.nodata" {
			if row, _ := readRow(t, pgURL, table); !row.FinalizedUntil.Equal(utc("2026-09-28T13:00:00Z")) {
				t.Errorf("%s: verdict %v, want 13:00 (the no-data watermark is not used)", table, row.FinalizedUntil)
			}
			continue
		}
		if row, ok := readRow(t, pgURL, table); ok {
			t.Errorf("%s: verdict %v, want none (%s)", table, row.FinalizedUntil, guard)
		}
	}
	for guard, count := range map[string]float64{"watermark_unbounded": 2, "not_executed": 1, "not_caught_up": 1, "implausible": 2} {
		if v := sample(t, s.httpURL, `finalizer_held_runs{guard="`+guard+`"}`); v != count {
			t.Errorf("finalizer_held_runs{guard=%q} = %v, want %v", guard, v, count)
		}
		if v := sample(t, s.httpURL, `finalizer_candidates_total{outcome="`+guard+`"}`); v != count {
			t.Errorf("finalizer_candidates_total{outcome=%q} = %v, want %v", guard, v, count)
		}
	}
	if v := sample(t, s.httpURL, `finalizer_rows_dropped_by_watermark_total{table="g.join_optin"}`); v != 5 {
		t.Errorf("rows dropped by the watermark for g.join_optin = %v, want 5", v)
	}
	// status says HELD, with the reason.
	code, out, errOut := cli(t, nil, "status", "--postgres-url", pgURL, "--http-url", s.httpURL)
	if code != 0 || !strings.Contains(out, "HELD") || !strings.Contains(out, "held by not_caught_up: source 0 is behind") {
		t.Errorf("status: exit %d\n%s%s", code, out, errOut)
	}
	// One WARN per run and guard.
	s.stop()
	for _, g := range []string{"watermark_unbounded", "not_caught_up", "implausible"} {
		lines := 0
		for _, l := range strings.Split(s.stderr.String(), "\n") {
			if strings.Contains(l, `"level":"warn"`) && strings.Contains(l, `"guard":"`+g+`"`) {
				lines++
			}
		}
		if want := map[string]int{"watermark_unbounded": 2, "not_caught_up": 1, "implausible": 2}[g]; lines != want {
			t.Errorf("%d WARN lines for guard %s, want %d (one per run)", lines, g, want)
		}
	}
}

type guardRun struct {
	Table  string           `json:"table"`
	Held   string           `json:"held"`
	Guards map[string]int64 `json:"guards"`
}

func guardRuns(t *testing.T, httpURL string) []guardRun {
	t.Helper()
	var doc struct {
		Runs []guardRun `json:"runs"`
	}
	getJSON(t, httpURL+"/v1/runs", &doc)
	return doc.Runs
}
