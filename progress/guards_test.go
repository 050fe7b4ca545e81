package progress

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math/bits"
	"strings"
	"testing"
	"time"
)

// The findings of issue 16, one test each, on progress documents shaped
// like the ones Spark's own suites print (StreamingQueryStatusAndProgressSuite,
// StreamingQueryListenerSuite): every field Spark writes, in its order.
// Each of them gave a candidate before the guards of ADR 0012.

// sparkProgress is a listener-form progress as Spark 3.5 writes it.
// durationMs, eventTime, stateOperators and sources are JSON fragments.
func sparkProgress(batch int, durationMs, eventTime, stateOperators, sources string) []byte {
	return fmt.Appendf(nil, `{
  "id" : %q,
  "runId" : %q,
  "name" : "events",
  "timestamp" : "2026-09-28T14:38:05.120Z",
  "batchId" : %d,
  "batchDuration" : 1183,
  "numInputRows" : 678,
  "inputRowsPerSecond" : 10.0,
  "processedRowsPerSecond" : 573.1,
  "durationMs" : %s,
  "eventTime" : %s,
  "stateOperators" : %s,
  "sources" : %s,
  "sink" : { "description" : "DeltaSink[s3://lake/gold/events]", "numOutputRows" : -1 }
}`, fixtureQueryID, fixtureRunID, batch, durationMs, eventTime, stateOperators, sources)
}

const (
	ranBatch    = `{ "addBatch" : 843, "commitOffsets" : 52, "getBatch" : 0, "latestOffset" : 31, "queryPlanning" : 98, "triggerExecution" : 1183, "walCommit" : 45 }`
	ranNoBatch  = `{ "latestOffset" : 2, "triggerExecution" : 3 }`
	watermark14 = `{ "avg" : "2026-09-28T14:37:00.000Z", "max" : "2026-09-28T14:40:00.000Z", "min" : "2026-09-28T14:30:00.000Z", "watermark" : "2026-09-28T14:30:00.000Z" }`
	kafkaCaught = `[ { "description" : "KafkaV2[Subscribe[events]]", "startOffset" : { "events" : { "0" : 4377 } }, "endOffset" : { "events" : { "0" : 4466 } }, "latestOffset" : { "events" : { "0" : 4466 } }, "numInputRows" : 89, "inputRowsPerSecond" : 10.0, "processedRowsPerSecond" : 229.9 } ]`
)

func stateOp(name string, dropped int) string {
	return fmt.Sprintf(`{ "operatorName" : %q, "numRowsTotal" : 4, "numRowsUpdated" : 1, "allUpdatesTimeMs" : 1, "numRowsRemoved" : 2, "allRemovalsTimeMs" : 34, "commitTimeMs" : 23, "memoryUsedBytes" : 3, "numRowsDroppedByWatermark" : %d, "numShufflePartitions" : 200, "numStateStoreInstances" : 200 }`, name, dropped)
}

func evaluate(t *testing.T, o SpecOptions, doc []byte) (Candidate, Outcome, string) {
	t.Helper()
	ev, err := Parse(doc, KindProgress)
	if err != nil {
		t.Fatalf("parse: %v\n%s", err, doc)
	}
	return mustSpec(t, o).Evaluate(ev)
}

func wantOutcome(t *testing.T, name string, o SpecOptions, doc []byte, want Outcome, until string) {
	t.Helper()
	t.Run(name, func(t *testing.T) {
		c, got, why := evaluate(t, o, doc)
		if got != want {
			t.Fatalf("outcome %s (%s), want %s", got, why, want)
		}
		if want != OK {
			if why == "" {
				t.Errorf("outcome %s without a reason", got)
			}
			return
		}
		if u := utc(t, until); !c.Until.Equal(u) {
			t.Errorf("Until %v, want %v", c.Until, u)
		}
	})
}

// Finding 1: Spark applies the watermark only in stateful operators; a
// query with withWatermark and no stateful operator writes late rows.
func TestFinding1WatermarkWithoutStatefulOperator(t *testing.T) {
	wm := SpecOptions{Time: "watermark"}
	doc := sparkProgress(7, ranBatch, watermark14, `[ ]`, kafkaCaught)
	wantOutcome(t, "stateOperators empty: refused", wm, doc, WatermarkUnbounded, "")
	wantOutcome(t, "opted in by name", SpecOptions{Time: "watermark", LateRowsFiltered: true}, doc, OK, "2026-09-28T14:00:00Z")
	// A document without stateOperators at all is no shape Spark writes:
	// nothing says the query has an operator that drops late rows.
	noOps := strings.Replace(string(doc), `"stateOperators" : [ ],`, "", 1)
	wantOutcome(t, "stateOperators absent: refused", wm, []byte(noOps), WatermarkUnbounded, "")
}

// Finding 2: a join's output watermark can be below the global one, and
// flatMapGroupsWithState's output is bound to no watermark; a streaming
// aggregation's is (StateStoreWriter.produceOutputWatermark).
func TestFinding2WatermarkOperators(t *testing.T) {
	wm := SpecOptions{Time: "watermark"}
	for _, tc := range []struct {
		ops  string
		want Outcome
	}{
		{`[ ` + stateOp("symmetricHashJoin", 0) + ` ]`, WatermarkUnbounded},
		{`[ ` + stateOp("flatMapGroupsWithState", 0) + ` ]`, WatermarkUnbounded},
		{`[ ` + stateOp("applyInPandasWithState", 0) + ` ]`, WatermarkUnbounded},
		{`[ ` + stateOp("transformWithStateExec", 0) + ` ]`, WatermarkUnbounded},
		{`[ ` + stateOp("symmetricHashJoin", 0) + `, ` + stateOp("stateStoreSave", 0) + ` ]`, WatermarkUnbounded},
		{`[ { "numRowsTotal" : 1, "numRowsUpdated" : 1, "memoryUsedBytes" : 776, "numLateInputs" : 0 } ]`, WatermarkUnbounded}, // Spark 3.0: no operatorName
		{`[ ` + stateOp("stateStoreSave", 0) + ` ]`, OK},
		{`[ ` + stateOp("dedupe", 0) + ` ]`, OK},
		{`[ ` + stateOp("stateStoreSave", 0) + `, ` + stateOp("stateStoreSave", 0) + ` ]`, OK},
	} {
		doc := sparkProgress(7, ranBatch, watermark14, tc.ops, kafkaCaught)
		name := tc.ops
		if len(name) > 60 {
			name = name[:60]
		}
		wantOutcome(t, name, wm, doc, tc.want, "2026-09-28T14:00:00Z")
		wantOutcome(t, name+" opted in", SpecOptions{Time: "watermark", LateRowsFiltered: true}, doc, OK, "2026-09-28T14:00:00Z")
	}
	// The rows dropped by the watermark are read, for the run's status.
	ev, err := Parse(sparkProgress(7, ranBatch, watermark14, `[ `+stateOp("stateStoreSave", 12)+`, `+stateOp("dedupe", 30)+` ]`, kafkaCaught), KindProgress)
	if err != nil {
		t.Fatal(err)
	}
	if n := ev.RowsDroppedByWatermark(); n != 42 {
		t.Errorf("RowsDroppedByWatermark %d, want 42", n)
	}
}

// Finding 3: Spark 3.0-3.4 post a progress for a trigger that ran no batch
// (finishTrigger(hasNewData = false, hasExecuted = false) every
// noDataProgressEventInterval); its watermark is the next batch's
// (constructNextBatch updates batchWatermarkMs before deciding not to
// run), and no window up to it has been emitted.
func TestFinding3NoDataProgressWatermark(t *testing.T) {
	wm := SpecOptions{Time: "watermark"}
	ops := `[ ` + stateOp("stateStoreSave", 0) + ` ]`
	// Batch 7 ran with the watermark at 13:50; the trigger after it ran
	// nothing and already reports batch 8's watermark, 14:30.
	ran := sparkProgress(7, ranBatch, `{ "max" : "2026-09-28T14:40:00.000Z", "watermark" : "2026-09-28T13:50:00.000Z" }`, ops, kafkaCaught)
	idleSources := `[ { "description" : "KafkaV2[Subscribe[events]]", "startOffset" : { "events" : { "0" : 4466 } }, "endOffset" : { "events" : { "0" : 4466 } }, "latestOffset" : { "events" : { "0" : 4466 } }, "numInputRows" : 0, "inputRowsPerSecond" : 0.0, "processedRowsPerSecond" : 0.0 } ]`
	noData := sparkProgress(8, ranNoBatch, `{ "watermark" : "2026-09-28T14:30:00.000Z" }`, ops, idleSources)
	wantOutcome(t, "batch that ran", wm, ran, OK, "2026-09-28T13:00:00Z")
	wantOutcome(t, "trigger that ran nothing", wm, noData, NotExecuted, "")
	wantOutcome(t, "not even with the opt-in", SpecOptions{Time: "watermark", LateRowsFiltered: true}, noData, NotExecuted, "")
	// The offset and trigger kinds read nothing that runs ahead there.
	wantOutcome(t, "trigger kind", SpecOptions{Time: "trigger"}, noData, OK, "2026-09-28T14:00:00Z")
}

// Finding 4: the trigger time bounds a column of Spark's processing time
// (current_timestamp() is the batch's timestamp), not one of the source's
// ingestion time while the source is behind (maxOffsetsPerTrigger,
// maxFilesPerTrigger) or does not say (no latestOffset).
func TestFinding4TriggerNeedsCaughtUpSources(t *testing.T) {
	tr := SpecOptions{Time: "trigger"}
	ops := `[ ]`
	behind := `[ { "description" : "KafkaV2[Subscribe[events]]", "startOffset" : { "events" : { "0" : 4377, "1" : 10 } }, "endOffset" : { "events" : { "0" : 4466, "1" : 20 } }, "latestOffset" : { "events" : { "0" : 9120, "1" : 20 } }, "numInputRows" : 99, "inputRowsPerSecond" : 10.0, "processedRowsPerSecond" : 229.9 } ]`
	reordered := `[ { "description" : "KafkaV2[Subscribe[events]]", "startOffset" : { "events" : { "0" : 4377, "1" : 10 } }, "endOffset" : { "events" : { "0" : 4466, "1" : 20 } }, "latestOffset" : { "events" : { "1" : 20, "0" : 4466 } }, "numInputRows" : 99, "inputRowsPerSecond" : 10.0, "processedRowsPerSecond" : 229.9 } ]`
	noLatest := `[ { "description" : "KafkaV2[Subscribe[events]]", "startOffset" : { "events" : { "0" : 4377 } }, "endOffset" : { "events" : { "0" : 4466 } }, "numInputRows" : 89, "inputRowsPerSecond" : 10.0, "processedRowsPerSecond" : 229.9 } ]`
	twoSources := `[ ` + kafkaCaught[2:len(kafkaCaught)-2] + `, { "description" : "DeltaSource[s3://lake/bronze/clicks]", "startOffset" : { "sourceVersion" : 1, "reservoirVersion" : 10, "index" : 999, "isStartingVersion" : false }, "endOffset" : { "sourceVersion" : 1, "reservoirVersion" : 11, "index" : 998, "isStartingVersion" : false }, "latestOffset" : null, "numInputRows" : 1000 } ]`
	wantOutcome(t, "caught up", tr, sparkProgress(3, ranBatch, `{ }`, ops, kafkaCaught), OK, "2026-09-28T14:00:00Z")
	wantOutcome(t, "caught up, keys in another order", tr, sparkProgress(3, ranBatch, `{ }`, ops, reordered), OK, "2026-09-28T14:00:00Z")
	wantOutcome(t, "behind (maxOffsetsPerTrigger)", tr, sparkProgress(3, ranBatch, `{ }`, ops, behind), NotCaughtUp, "")
	wantOutcome(t, "no latestOffset (Spark before 3.2)", tr, sparkProgress(3, ranBatch, `{ }`, ops, noLatest), NotCaughtUp, "")
	wantOutcome(t, "source 0 caught up, source 1 not tracked", tr, sparkProgress(3, ranBatch, `{ }`, ops, twoSources), OK, "2026-09-28T14:00:00Z")
	wantOutcome(t, "all: a Delta source without latestOffset", SpecOptions{Time: "trigger", Source: "all"}, sparkProgress(3, ranBatch, `{ }`, ops, twoSources), NotCaughtUp, "")
	pt := SpecOptions{Time: "trigger", ProcessingTime: true}
	wantOutcome(t, "processing time, behind", pt, sparkProgress(3, ranBatch, `{ }`, ops, behind), OK, "2026-09-28T14:00:00Z")
	wantOutcome(t, "processing time, no latestOffset", pt, sparkProgress(3, ranBatch, `{ }`, ops, noLatest), OK, "2026-09-28T14:00:00Z")

	// The real Spark 3.1 event log: Kafka reported no latestOffset then.
	for _, line := range readLines(t, "testdata/local-1596020211915.streaming.jsonl") {
		ev, err := Parse(line, KindUnknown)
		if err != nil || ev.Kind != KindProgress {
			continue
		}
		if _, o, _ := mustSpec(t, tr).Evaluate(ev); o != NotCaughtUp {
			t.Errorf("real log batch %d: outcome %s, want not_caught_up", ev.BatchID, o)
		}
	}
}

// Finding 6: zone-less times are read in the rule's zone, and the text form
// of a datetimeoffset is a time.
func TestFinding6ZonesOfNaiveTimes(t *testing.T) {
	// SQL Server CDC: tran_end_time in the server's local time (Berlin,
	// CEST = UTC+2 on 2026-09-28).
	cdc := func(ts string) []byte {
		return sparkProgress(17, ranBatch, `{ }`, `[ ]`, fmt.Sprintf(`[ { "description" : "SqlServerCdc[dbo.orders]", "startOffset" : { "lsn" : "0x2A" }, "endOffset" : { "lsn" : "0x2B", "commit_ts" : %q }, "numInputRows" : 10 } ]`, ts))
	}
	utcRule := SpecOptions{Granularity: "hour"}
	berlin := SpecOptions{Granularity: "hour", NaiveTimezone: "Europe/Berlin"}
	wantOutcome(t, "naive read as UTC by default", utcRule, cdc("2026-09-28 14:37:12.345"), OK, "2026-09-28T14:00:00Z")
	wantOutcome(t, "naive in the server's zone", berlin, cdc("2026-09-28 14:37:12.345"), OK, "2026-09-28T12:00:00Z")
	wantOutcome(t, "datetimeoffset text", utcRule, cdc("2026-09-28 14:37:12.3450000 +02:00"), OK, "2026-09-28T12:00:00Z")
	wantOutcome(t, "an offset wins over naive_timezone", berlin, cdc("2026-09-28 14:37:12.3450000 +00:00"), OK, "2026-09-28T14:00:00Z")
	// 02:30 happens twice in Berlin on 2026-10-25 (CEST, then CET): the
	// earlier instant, 00:30Z, is the side of "not yet".
	wantOutcome(t, "repeated hour: the earlier instant", berlin, cdc("2026-10-25 02:30:00"), OK, "2026-10-25T00:00:00Z")
	// 02:30 does not exist on 2026-03-29: the earliest offset around it.
	wantOutcome(t, "skipped hour: the earliest reading", berlin, cdc("2026-03-29 02:30:00"), OK, "2026-03-29T00:00:00Z")
}

// Finding 7: any JSON number was taken as epoch milliseconds.
func TestFinding7NumericTimes(t *testing.T) {
	num := func(v string) []byte {
		return sparkProgress(3, ranBatch, `{ }`, `[ ]`, fmt.Sprintf(`[ { "description" : "src", "startOffset" : null, "endOffset" : { "orders" : { "0" : 48917 }, "ts" : %s }, "numInputRows" : 10 } ]`, v))
	}
	// The README's old example: a Kafka partition offset read as a time.
	wantOutcome(t, "a partition offset", SpecOptions{Time: "offset:/orders/0"}, num("0"), Implausible, "")
	wantOutcome(t, "epoch seconds as ms", SpecOptions{Time: "offset:/ts"}, num("1790606232"), Implausible, "")
	wantOutcome(t, "epoch seconds with unit s", SpecOptions{Time: "offset:/ts", Unit: "s"}, num("1790606232"), OK, "2026-09-28T14:00:00Z")
	wantOutcome(t, "epoch microseconds with unit us", SpecOptions{Time: "offset:/ts", Unit: "us"}, num("1790606232345678"), OK, "2026-09-28T14:00:00Z")
	wantOutcome(t, "epoch ms", SpecOptions{Time: "offset:/ts"}, num("1790606232345"), OK, "2026-09-28T14:00:00Z")
	wantOutcome(t, "a large counter", SpecOptions{Time: "offset:/ts"}, num("9007199254741093"), Implausible, "")
	wantOutcome(t, "ms read as seconds", SpecOptions{Time: "offset:/ts", Unit: "s"}, num("1790606232345"), Implausible, "")
	// Under all, one implausible source holds the whole progress.
	two := sparkProgress(3, ranBatch, `{ }`, `[ ]`, `[ { "description" : "a", "endOffset" : { "ts" : 1790606232345 } }, { "description" : "b", "endOffset" : { "ts" : 48917 } } ]`)
	wantOutcome(t, "all with one implausible source", SpecOptions{Time: "offset:/ts", Source: "all"}, two, Implausible, "")
}

// The guards' options are refused where they mean nothing, with an error
// that names the field.
func TestGuardOptionsRefusedElsewhere(t *testing.T) {
	for _, tc := range []struct {
		in   SpecOptions
		want string
	}{
		{SpecOptions{Time: "watermark", Unit: "s"}, `unit "s": only for time: offset:`},
		{SpecOptions{Unit: "ns"}, `unit "ns": want ms, s or us`},
		{SpecOptions{Time: "trigger", NaiveTimezone: "Europe/Berlin"}, `naive_timezone "Europe/Berlin": only for time: offset:`},
		{SpecOptions{NaiveTimezone: "Mars/Olympus"}, `naive_timezone "Mars/Olympus": want an IANA zone name`},
		{SpecOptions{NaiveTimezone: "Local"}, `naive_timezone "Local"`},
		{SpecOptions{LateRowsFiltered: true}, `late_rows_filtered: only for time: watermark`},
		{SpecOptions{Time: "watermark", ProcessingTime: true}, `processing_time: only for time: trigger`},
	} {
		_, err := ParseSpec(tc.in)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("ParseSpec(%+v) = %v, want an error containing %q", tc.in, err, tc.want)
		}
	}
	// And round-trip through Options when set.
	for _, o := range []SpecOptions{
		{Time: "offset:/ts", Unit: "us", NaiveTimezone: "Europe/Berlin"},
		{Time: "watermark", LateRowsFiltered: true},
		{Time: "trigger", ProcessingTime: true},
	} {
		s := mustSpec(t, o)
		again := mustSpec(t, s.Options())
		if again.String() != s.String() {
			t.Errorf("%s round-trips to %s", s, again)
		}
	}
	if got := mustSpec(t, SpecOptions{Time: "offset:/ts", Unit: "s", NaiveTimezone: "Europe/Berlin"}).String(); !strings.HasSuffix(got, " unit=s naive_timezone=Europe/Berlin") {
		t.Errorf("String() = %q", got)
	}
}

// Outcome names are the metric labels.
func TestOutcomeNames(t *testing.T) {
	for o, want := range map[Outcome]string{OK: "ok", NoTime: "no_time", Implausible: "implausible", NotExecuted: "not_executed", WatermarkUnbounded: "watermark_unbounded", NotCaughtUp: "not_caught_up"} {
		if o.String() != want {
			t.Errorf("%d: %q, want %q", o, o.String(), want)
		}
	}
}

// A number with a fraction or an exponent is read exactly: as a float64,
// 1764550799999.9999999 ms (100 ns before 01:00) rounds up to 01:00 and
// the hour that holds the batch's end would be declared final. Huge
// exponents are refused without being expanded.
func TestNumericTimesReadExactly(t *testing.T) {
	hour := time.Date(2025, 12, 1, 1, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		in   string
		unit TimeUnit
	}{
		{"1764550799999.9999999", Millis},
		{"1764550799.9999999999", Seconds},
		{"1764550799999999.9999", Micros},
		{"1.7645507999999999999e12", Millis},
		{"17645507999999999999e-10", Seconds},
	} {
		got, err := ParseTimeIn([]byte(tc.in), tc.unit, nil)
		if err != nil || !got.Before(hour) || got.Before(hour.Add(-time.Microsecond)) {
			t.Errorf("%s %s = %v, %v; want just before %v", tc.in, tc.unit, got, err, hour)
		}
	}
	for _, in := range []string{"1e999999999", "1e-999999999", "-1764550799999.5", "1764550799999.5e+99"} {
		if got, err := ParseTimeIn([]byte(in), Millis, nil); !errors.Is(err, ErrImplausible) {
			t.Errorf("%s = %v, %v; want implausible", in, got, err)
		}
	}
	if got, err := ParseTimeIn([]byte("1.76455e12"), Millis, nil); err != nil || !got.Equal(time.UnixMilli(1764550000000).UTC()) {
		t.Errorf("1.76455e12 ms = %v, %v", got, err)
	}
}

// A UTC offset beyond ±14:00 is no clock's: Go's parser takes any two-digit
// hour, and "-23:59" read a commit time almost a day later than written.
func TestOffsetsBeyondFourteenHours(t *testing.T) {
	for _, in := range []string{`"2026-09-28 14:37:12.3450000 -23:59"`, `"2026-09-28T14:37:12-14:01"`, `"2026-09-28T14:37:12+24:00"`, `"2026-09-28T14:37:12-1500"`} {
		if got, err := ParseTimeIn([]byte(in), Millis, nil); err == nil {
			t.Errorf("%s = %v, want an error", in, got)
		}
	}
	for in, want := range map[string]string{
		`"2026-09-28 14:37:12.3450000 +14:00"`: "2026-09-28T00:37:12.345Z",
		`"2026-09-28T14:37:12-12:00"`:          "2026-09-29T02:37:12Z",
		`"2026-09-28T14:37:12+0545"`:           "2026-09-28T08:52:12Z",
	} {
		if got, err := ParseTimeIn([]byte(in), Millis, nil); err != nil || got.Format(time.RFC3339Nano) != want {
			t.Errorf("%s = %v, %v; want %s", in, got, err, want)
		}
	}
}

// specials must mark the first quote, backslash or control byte among
// eight bytes, wherever it is and whatever the others are, and find none
// when there is none.
func TestSpecials(t *testing.T) {
	stop := func(c byte) bool { return c == '"' || c == '\\' || c < 0x20 }
	fillers := []byte{'a', 0x7f, 0x80, 0xff, '!', '#', '[', ']', 0x21, 0x5d, 0xa2, 0xdc, 0, '"', '\\', 0x1f}
	for _, fill := range fillers {
		for _, fill2 := range fillers {
			for pos := range 8 {
				for v := range 256 {
					var b [8]byte
					for i := range b {
						b[i] = fill
						if i > pos {
							b[i] = fill2
						}
					}
					b[pos] = byte(v)
					first := -1
					for i, c := range b {
						if stop(c) {
							first = i
							break
						}
					}
					m := specials(binary.LittleEndian.Uint64(b[:]))
					got := -1
					if m != 0 {
						got = bits.TrailingZeros64(m) >> 3
					}
					if got != first {
						t.Fatalf("specials(% x): first at %d, want %d", b, got, first)
					}
				}
			}
		}
	}
}
