package progress

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"
)

const (
	fixtureQueryID = "8c57e1ec-94b5-4c99-b100-f694162df0b9"
	fixtureRunID   = "5b5c1f2e-1a7d-4e4b-9f0c-2d6d3e1c7a10"
	sparkQueryID   = "8d268dc2-bc9c-4be8-97a9-b135d2943028"
	sparkRunID     = "e225d92f-2545-48f8-87a2-9c0309580f8a"
	sparkLog       = "testdata/local-1596020211915.streaming.jsonl"
)

// utc parses an RFC 3339 time for a test table.
func utc(t testing.TB, s string) time.Time {
	t.Helper()
	v, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		t.Fatalf("bad test time %q: %v", s, err)
	}
	return v.UTC()
}

func readFile(t testing.TB, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// readLines returns the lines of a JSON-lines file.
func readLines(t testing.TB, path string) [][]byte {
	t.Helper()
	var lines [][]byte
	sc := bufio.NewScanner(bytes.NewReader(readFile(t, path)))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		lines = append(lines, append([]byte(nil), sc.Bytes()...))
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return lines
}

// parseBoth parses data with Parse and with the encoding/json reference
// and fails unless they agree.
func parseBoth(t *testing.T, data []byte, kind Kind) (*Event, error) {
	t.Helper()
	ev, err := Parse(data, kind)
	ref, refErr := refParse(data, kind)
	if errClass(err) != errClass(refErr) {
		t.Fatalf("Parse error %v, reference error %v", err, refErr)
	}
	if err == nil && !reflect.DeepEqual(ev, ref) {
		t.Fatalf("Parse and reference differ:\n got %+v\n ref %+v", ev, ref)
	}
	return ev, err
}

func TestParseSparkEventLog(t *testing.T) {
	lines := readLines(t, sparkLog)
	if len(lines) != 12 {
		t.Fatalf("%s has %d lines, want 12", sparkLog, len(lines))
	}
	wantTimes := []string{
		"2020-07-29T10:56:56.015Z", "2020-07-29T10:57:03.168Z", "2020-07-29T10:57:03.793Z",
		"2020-07-29T10:57:04.317Z", "2020-07-29T10:57:04.734Z", "2020-07-29T10:57:05.123Z",
		"2020-07-29T10:57:05.562Z", "2020-07-29T10:57:05.916Z",
	}
	wantEnds := []string{"48279", "48642", "48705", "48757", "48799", "48837", "48881", "48917"}
	var started int
	var progress []*Event
	for i, line := range lines {
		ev, err := parseBoth(t, line, KindUnknown)
		switch i {
		case 0, 1, 11:
			if !errors.Is(err, ErrIgnored) {
				t.Errorf("line %d: error %v, want ErrIgnored", i+1, err)
			}
			continue
		}
		if err != nil {
			t.Fatalf("line %d: %v", i+1, err)
		}
		if ev.QueryID != sparkQueryID || ev.RunID != sparkRunID || ev.Name != "" {
			t.Errorf("line %d: ids %q %q name %q", i+1, ev.QueryID, ev.RunID, ev.Name)
		}
		switch ev.Kind {
		case KindStarted:
			started++
			if want := utc(t, "2020-07-29T10:56:55.947Z"); !ev.Timestamp.Equal(want) || ev.BatchID != -1 {
				t.Errorf("started: timestamp %v batch %d", ev.Timestamp, ev.BatchID)
			}
		case KindProgress:
			progress = append(progress, ev)
			// The subject's kind agrees; another kind does not.
			if _, err := Parse(line, KindProgress); err != nil {
				t.Errorf("line %d with KindProgress: %v", i+1, err)
			}
			if _, err := Parse(line, KindStarted); !errors.Is(err, ErrKindMismatch) {
				t.Errorf("line %d with KindStarted: error %v, want ErrKindMismatch", i+1, err)
			}
		default:
			t.Errorf("line %d: kind %v", i+1, ev.Kind)
		}
	}
	if started != 1 || len(progress) != 8 {
		t.Fatalf("got %d started and %d progress events, want 1 and 8", started, len(progress))
	}
	for b, ev := range progress {
		if ev.BatchID != int64(b) {
			t.Errorf("progress %d: batchId %d", b, ev.BatchID)
		}
		if want := utc(t, wantTimes[b]); !ev.Timestamp.Equal(want) || ev.Timestamp.Location() != time.UTC {
			t.Errorf("batch %d: timestamp %v, want %v", b, ev.Timestamp, want)
		}
		if len(ev.Sources) != 1 || ev.Sources[0].Description != "KafkaV2[Subscribe[test5]]" || ev.Watermark != "" {
			t.Fatalf("batch %d: sources %+v watermark %q", b, ev.Sources, ev.Watermark)
		}
		if got, want := string(ev.Sources[0].EndOffset), `{"test5":{"0":`+wantEnds[b]+`}}`; got != want {
			t.Errorf("batch %d: endOffset %s, want %s", b, got, want)
		}
		if b == 0 {
			if ev.Sources[0].StartOffset != nil {
				t.Errorf("batch 0: startOffset %s, want nil", ev.Sources[0].StartOffset)
			}
			continue
		}
		if got, want := string(ev.Sources[0].StartOffset), string(progress[b-1].Sources[0].EndOffset); got != want {
			t.Errorf("batch %d: startOffset %s, want the previous endOffset %s", b, got, want)
		}
		if !ev.Newer(progress[b-1]) || progress[b-1].Newer(ev) {
			t.Errorf("batch %d is not newer than batch %d", b, b-1)
		}
	}
}

// twin is a fixture in both JSON forms, with what it must parse to.
type twin struct {
	name      string
	kind      Kind
	eventName string
	batch     int64
	timestamp string // "" = zero
	watermark string
	ends      []string // each source's endOffset, "" = nil
	starts    []string
	exception string // prefix
	errClass  string
}

var twins = []twin{
	{name: "kafka_watermark", kind: KindProgress, eventName: "myName", batch: 2, timestamp: "2016-12-05T20:54:20.827Z",
		watermark: "2016-12-05T20:44:20.000Z",
		starts:    []string{`{"orders":{"2":4211,"1":4398,"0":4377}}`},
		ends:      []string{`{"orders":{"2":4302,"1":4490,"0":4466}}`}},
	{name: "numeric_offsets", kind: KindProgress, batch: 4294967298, timestamp: "2016-12-05T20:54:20.827Z",
		starts: []string{"9007199254740993"}, ends: []string{"9007199254741093"}},
	{name: "first_batch", kind: KindProgress, eventName: "myName", batch: 0, timestamp: "2026-09-28T14:38:00.001Z",
		starts: []string{""}, ends: []string{`{"test5":{"0":48279}}`}},
	{name: "cdc_commit_ts", kind: KindProgress, eventName: "cdc_orders", batch: 17, timestamp: "2026-09-28T14:38:05.120Z",
		starts: []string{`{"lsn":"0x0000002A000001E80001","commit_ts":"2026-09-28T14:31:02.007"}`},
		ends:   []string{`{"lsn":"0x0000002A000001F00003","commit_ts":"2026-09-28T14:37:12.345"}`}},
	{name: "cdc_two_sources", kind: KindProgress, eventName: "cdc_orders", batch: 18, timestamp: "2026-09-28T15:02:41.500Z",
		starts: []string{
			`{"lsn":"0x0000002A000001F00003","commit_ts":"2026-09-28T14:37:12.345"}`,
			`{"lsn":"0x0000002A000001C00001","commit_ts":"2026-09-28T12:50:00.000"}`,
		},
		ends: []string{
			`{"lsn":"0x0000002A000002100007","commit_ts":"2026-09-28T15:01:59.998"}`,
			`{"lsn":"0x0000002A000001D00002","commit_ts":"2026-09-28T13:05:30.250"}`,
		}},
	{name: "kafka_12_partitions", kind: KindProgress, eventName: "events-v3", batch: 90210, timestamp: "2026-09-28T14:38:05.120Z",
		watermark: "2026-09-28T14:27:01.016Z",
		starts:    []string{`{"events":{"0":7340000,"1":7341000,"2":7342000,"3":7343000,"4":7344000,"5":7345000,"6":7346000,"7":7347000,"8":7348000,"9":7349000,"10":7350000,"11":7351000}}`},
		ends:      []string{`{"events":{"0":7340612,"1":7341612,"2":7342612,"3":7343612,"4":7344612,"5":7345612,"6":7346612,"7":7347612,"8":7348612,"9":7349612,"10":7350612,"11":7351612}}`}},
	{name: "started", kind: KindStarted, eventName: "cdc_orders", batch: -1, timestamp: "2026-09-28T14:30:00.002Z"},
	{name: "started_name_null", kind: KindStarted, batch: -1, timestamp: "2020-07-29T10:56:55.947Z"},
	{name: "idle", kind: KindIdle, batch: -1, timestamp: "2026-09-28T14:40:10.000Z"},
	{name: "terminated_clean", kind: KindTerminated, batch: -1},
	{name: "terminated_failed", kind: KindTerminated, batch: -1,
		exception: "org.apache.spark.SparkException: [STREAM_FAILED] Query [id = " + fixtureQueryID, errClass: "STREAM_FAILED"},
}

func twinPaths(name string) (listener, eventlog string) {
	base := filepath.Join("testdata", "twins", name)
	return base + ".listener.json", base + ".eventlog.json"
}

// twinSpecs are the specs twins must give equal candidates under.
var twinSpecs = []SpecOptions{
	{},
	{Granularity: "minute"},
	{Granularity: "day", Timezone: "America/New_York"},
	{Source: "all"},
	{Source: "1"},
	{Time: "watermark", Delay: "10m"},
	{Time: "watermark", Source: "all"},
	{Time: "trigger", Timezone: "Asia/Kolkata"},
	{Time: "offset:/orders/0"},
	{Time: "offset:/lsn"},
}

func TestParseTwins(t *testing.T) {
	for _, tw := range twins {
		t.Run(tw.name, func(t *testing.T) {
			lpath, epath := twinPaths(tw.name)
			ldata, edata := readFile(t, lpath), readFile(t, epath)
			fromListener, err := parseBoth(t, ldata, tw.kind)
			if err != nil {
				t.Fatalf("listener form: %v", err)
			}
			inferred, err := parseBoth(t, ldata, KindUnknown)
			if err != nil {
				t.Fatalf("listener form, kind inferred: %v", err)
			}
			fromLog, err := parseBoth(t, edata, KindUnknown)
			if err != nil {
				t.Fatalf("event-log form: %v", err)
			}
			if _, err := parseBoth(t, edata, tw.kind); err != nil {
				t.Fatalf("event-log form with its kind: %v", err)
			}
			if !reflect.DeepEqual(fromListener, fromLog) {
				t.Fatalf("twins differ:\n listener %+v\n eventlog %+v", fromListener, fromLog)
			}
			if !reflect.DeepEqual(fromListener, inferred) {
				t.Fatalf("inferred kind differs:\n given    %+v\n inferred %+v", fromListener, inferred)
			}
			checkTwin(t, tw, fromListener)
			for _, o := range twinSpecs {
				spec, err := ParseSpec(o)
				if err != nil {
					t.Fatal(err)
				}
				c1, ok1 := spec.Candidate(fromListener)
				c2, ok2 := spec.Candidate(fromLog)
				if ok1 != ok2 || !reflect.DeepEqual(c1, c2) {
					t.Errorf("%v: candidates differ: %+v %v / %+v %v", spec, c1, ok1, c2, ok2)
				}
			}
		})
	}
}

func checkTwin(t *testing.T, tw twin, ev *Event) {
	t.Helper()
	if ev.Kind != tw.kind || ev.QueryID != fixtureQueryID || ev.RunID != fixtureRunID {
		t.Errorf("kind %v ids %q %q", ev.Kind, ev.QueryID, ev.RunID)
	}
	if ev.Name != tw.eventName || ev.BatchID != tw.batch || ev.Watermark != tw.watermark {
		t.Errorf("name %q batch %d watermark %q, want %q %d %q", ev.Name, ev.BatchID, ev.Watermark, tw.eventName, tw.batch, tw.watermark)
	}
	var want time.Time
	if tw.timestamp != "" {
		want = utc(t, tw.timestamp)
	}
	if !ev.Timestamp.Equal(want) {
		t.Errorf("timestamp %v, want %v", ev.Timestamp, want)
	}
	if len(ev.Sources) != len(tw.ends) {
		t.Fatalf("%d sources, want %d", len(ev.Sources), len(tw.ends))
	}
	for i, s := range ev.Sources {
		if string(s.EndOffset) != tw.ends[i] || string(s.StartOffset) != tw.starts[i] {
			t.Errorf("source %d: offsets %s -> %s, want %s -> %s", i, s.StartOffset, s.EndOffset, tw.starts[i], tw.ends[i])
		}
		if (tw.starts[i] == "") != (s.StartOffset == nil) {
			t.Errorf("source %d: startOffset %#v", i, s.StartOffset)
		}
	}
	if !strings.HasPrefix(ev.Exception, tw.exception) || (tw.exception == "") != (ev.Exception == "") || ev.ErrorClass != tw.errClass {
		t.Errorf("exception %.80q class %q", ev.Exception, ev.ErrorClass)
	}
}

// progressDoc returns a listener-form progress with the given members
// replacing or adding to a minimal valid one.
func progressDoc(extra string) []byte {
	base := `{"id":"` + fixtureQueryID + `","runId":"` + fixtureRunID + `","name":"q","timestamp":"2026-09-28T14:38:05.120Z","batchId":3`
	if extra != "" {
		base += "," + extra
	}
	return []byte(base + "}")
}

const upperID = "8C57E1EC-94B5-4C99-B100-F694162DF0B9"

// parseCases are small documents and what Parse must make of them; they
// also seed FuzzParse.
var parseCases = []struct {
	name  string
	data  string
	kind  Kind
	err   error  // nil = success
	msg   string // a substring of the error
	check func(t *testing.T, ev *Event)
}{
	{name: "nested offsets are compacted", kind: KindProgress,
		data: string(progressDoc(`"sources":[{"description":"k","startOffset":null,"endOffset":{ "t" : { "0" : 1 , "1" : [ 2 , 3 ] } }}]`)),
		check: func(t *testing.T, ev *Event) {
			if got := string(ev.Sources[0].EndOffset); got != `{"t":{"0":1,"1":[2,3]}}` {
				t.Errorf("endOffset %s", got)
			}
		}},
	{name: "numbers keep their digits", kind: KindProgress,
		data: strings.Replace(string(progressDoc(`"sources":[{"startOffset":18446744073709551617,"endOffset":1.50e400}]`)), `"batchId":3`, `"batchId":9223372036854775807`, 1),
		check: func(t *testing.T, ev *Event) {
			if ev.BatchID != 9223372036854775807 || string(ev.Sources[0].StartOffset) != "18446744073709551617" || string(ev.Sources[0].EndOffset) != "1.50e400" {
				t.Errorf("batch %d offsets %s %s", ev.BatchID, ev.Sources[0].StartOffset, ev.Sources[0].EndOffset)
			}
		}},
	{name: "string holding JSON is unwrapped", kind: KindProgress,
		data: string(progressDoc(`"sources":[{"startOffset":" 123 ","endOffset":"{ \"a\" : \"x y\" }"}]`)),
		check: func(t *testing.T, ev *Event) {
			if string(ev.Sources[0].StartOffset) != "123" || string(ev.Sources[0].EndOffset) != `{"a":"x y"}` {
				t.Errorf("offsets %s %s", ev.Sources[0].StartOffset, ev.Sources[0].EndOffset)
			}
		}},
	{name: "string not holding JSON is kept", kind: KindProgress,
		data: string(progressDoc(`"sources":[{"startOffset":"","endOffset":"lsn 0x2A\u00e9"}]`)),
		check: func(t *testing.T, ev *Event) {
			if string(ev.Sources[0].StartOffset) != `""` || string(ev.Sources[0].EndOffset) != `"lsn 0x2A\u00e9"` {
				t.Errorf("offsets %s %s", ev.Sources[0].StartOffset, ev.Sources[0].EndOffset)
			}
		}},
	{name: "string holding a JSON string or null", kind: KindProgress,
		data: string(progressDoc(`"sources":[{"startOffset":"null","endOffset":"\"abc\""}]`)),
		check: func(t *testing.T, ev *Event) {
			if ev.Sources[0].StartOffset != nil || string(ev.Sources[0].EndOffset) != `"abc"` {
				t.Errorf("offsets %#v %s", ev.Sources[0].StartOffset, ev.Sources[0].EndOffset)
			}
		}},
	{name: "absent offsets and description", kind: KindProgress,
		data: string(progressDoc(`"sources":[{},{"description":null,"endOffset":true}]`)),
		check: func(t *testing.T, ev *Event) {
			if len(ev.Sources) != 2 || ev.Sources[0].EndOffset != nil || ev.Sources[0].StartOffset != nil || string(ev.Sources[1].EndOffset) != "true" {
				t.Errorf("sources %+v", ev.Sources)
			}
		}},
	{name: "empty or null sources", kind: KindProgress,
		data: string(progressDoc(`"sources":[]`)),
		check: func(t *testing.T, ev *Event) {
			if ev.Sources != nil {
				t.Errorf("sources %#v", ev.Sources)
			}
		}},
	{name: "rates, counts and maps Spark writes", kind: KindProgress,
		data: string(progressDoc(`"numInputRows":5,"inputRowsPerSecond":"NaN","processedRowsPerSecond":"Infinity","durationMs":{},"stateOperators":[],"observedMetrics":{},"sink":{"metrics":{}},"eventTime":{}`)),
		check: func(t *testing.T, ev *Event) {
			if ev.Watermark != "" || ev.BatchID != 3 {
				t.Errorf("watermark %q batch %d", ev.Watermark, ev.BatchID)
			}
		}},
	{name: "watermark", kind: KindProgress,
		data: string(progressDoc(`"eventTime":{"avg":"x","watermark":"2026-09-28T14:00:00.000Z"}`)),
		check: func(t *testing.T, ev *Event) {
			if ev.Watermark != "2026-09-28T14:00:00.000Z" {
				t.Errorf("watermark %q", ev.Watermark)
			}
		}},
	{name: "null eventTime and watermark", kind: KindProgress,
		data: string(progressDoc(`"eventTime":null`)),
	},
	{name: "ids are lowercased", kind: KindIdle,
		data: `{"id":"` + upperID + `","runId":"` + upperID + `","timestamp":"2026-09-28T14:38:05Z"}`,
		check: func(t *testing.T, ev *Event) {
			if ev.QueryID != fixtureQueryID || ev.RunID != fixtureQueryID {
				t.Errorf("ids %q %q", ev.QueryID, ev.RunID)
			}
		}},
	{name: "timestamp with an offset is UTC", kind: KindStarted,
		data: `{"id":"` + fixtureQueryID + `","runId":"` + fixtureRunID + `","name":"q","timestamp":"2026-09-28T16:38:05.5+02:00"}`,
		check: func(t *testing.T, ev *Event) {
			if want := utc(t, "2026-09-28T14:38:05.5Z"); !ev.Timestamp.Equal(want) || ev.Timestamp.Location() != time.UTC {
				t.Errorf("timestamp %v", ev.Timestamp)
			}
		}},
	{name: "unreadable timestamp is zero", kind: KindProgress,
		data: `{"id":"` + fixtureQueryID + `","runId":"` + fixtureRunID + `","timestamp":"yesterday","batchId":1}`,
		check: func(t *testing.T, ev *Event) {
			if !ev.Timestamp.IsZero() {
				t.Errorf("timestamp %v", ev.Timestamp)
			}
		}},
	{name: "non-progress kinds have batch -1", kind: KindStarted,
		data: string(progressDoc(`"sources":"not read"`)),
		check: func(t *testing.T, ev *Event) {
			if ev.BatchID != -1 || ev.Sources != nil || ev.Name != "q" {
				t.Errorf("%+v", ev)
			}
		}},
	{name: "duplicate keys are refused", kind: KindProgress,
		data: string(progressDoc(`"batchId":4,"name":null`)), err: ErrMalformed, msg: "duplicate"},
	{name: "a key Parse does not read may repeat", kind: KindProgress,
		data: string(progressDoc(`"numOutputRows":1,"numOutputRows":2`)),
		check: func(t *testing.T, ev *Event) {
			if ev.BatchID != 3 {
				t.Errorf("batch %d", ev.BatchID)
			}
		}},
	{name: "escaped keys", kind: KindUnknown,
		data: `{"\u0069d":"` + fixtureQueryID + `","run\u0049d":"` + fixtureRunID + `","batch\u0049d":7}`,
		check: func(t *testing.T, ev *Event) {
			if ev.Kind != KindProgress || ev.BatchID != 7 {
				t.Errorf("%+v", ev)
			}
		}},
	{name: "short event class", data: `{"Event":"QueryIdleEvent","id":"` + fixtureQueryID + `","runId":"` + fixtureRunID + `"}`,
		check: func(t *testing.T, ev *Event) {
			if ev.Kind != KindIdle {
				t.Errorf("kind %v", ev.Kind)
			}
		}},
	{name: "event class without package", data: `{"Event":"StreamingQueryListener$QueryTerminatedEvent","id":"` + fixtureQueryID + `","runId":"` + fixtureRunID + `","exception":null}`,
		check: func(t *testing.T, ev *Event) {
			if ev.Kind != KindTerminated || ev.Exception != "" {
				t.Errorf("%+v", ev)
			}
		}},

	{name: "infer terminated from errorClassOnException", data: `{"id":"` + fixtureQueryID + `","runId":"` + fixtureRunID + `","errorClassOnException":null,"name":"x"}`,
		check: func(t *testing.T, ev *Event) {
			if ev.Kind != KindTerminated {
				t.Errorf("kind %v", ev.Kind)
			}
		}},
	{name: "infer started from a null name", data: `{"id":"` + fixtureQueryID + `","runId":"` + fixtureRunID + `","name":null}`,
		check: func(t *testing.T, ev *Event) {
			if ev.Kind != KindStarted {
				t.Errorf("kind %v", ev.Kind)
			}
		}},
	{name: "infer idle", data: `{"id":"` + fixtureQueryID + `","runId":"` + fixtureRunID + `","timestamp":"2026-09-28T14:38:05Z"}`,
		check: func(t *testing.T, ev *Event) {
			if ev.Kind != KindIdle {
				t.Errorf("kind %v", ev.Kind)
			}
		}},

	{name: "other event class", data: `{"Event":"SparkListenerLogStart","Spark Version":"3.1.0"}`, err: ErrIgnored, msg: "SparkListenerLogStart"},
	{name: "other streaming class", data: `{"Event":"org.apache.spark.sql.streaming.StreamingQueryListener$QueryFooEvent"}`, err: ErrIgnored},
	{name: "class against subject", kind: KindIdle, data: `{"Event":"QueryStartedEvent","id":"` + fixtureQueryID + `","runId":"` + fixtureRunID + `"}`, err: ErrKindMismatch, msg: "want idle, got Event class QueryStartedEvent"},
	{name: "unknown kind value", kind: Kind(9), data: `{}`, err: ErrKindMismatch},
	{name: "progress class without progress", data: `{"Event":"QueryProgressEvent","progress":null}`, err: ErrMalformed, msg: `"progress" object`},
	{name: "Event not a string", data: `{"Event":1}`, err: ErrMalformed},
	{name: "not JSON", kind: KindProgress, data: `{"id":`, err: ErrMalformed, msg: "invalid JSON"},
	{name: "empty", kind: KindProgress, data: ``, err: ErrMalformed},
	{name: "an array", kind: KindProgress, data: `[{}]`, err: ErrMalformed, msg: "want a JSON object"},
	{name: "trailing data", kind: KindProgress, data: string(progressDoc("")) + `{}`, err: ErrMalformed, msg: "trailing"},
	{name: "no id", kind: KindIdle, data: `{"runId":"` + fixtureRunID + `"}`, err: ErrMalformed, msg: "no id"},
	{name: "runId not a UUID", kind: KindIdle, data: `{"id":"` + fixtureQueryID + `","runId":"e225d92f-2545-48f8-87a2-9c0309580f8"}`, err: ErrMalformed, msg: `runId "e225d92f-2545-48f8-87a2-9c0309580f8": want a UUID`},
	{name: "id with bad hex", kind: KindIdle, data: `{"id":"8c57e1ec-94b5-4c99-b100-f694162df0bz","runId":"` + fixtureRunID + `"}`, err: ErrMalformed},
	{name: "id a number", kind: KindIdle, data: `{"id":5,"runId":"` + fixtureRunID + `"}`, err: ErrMalformed},
	{name: "inferred progress without batchId", data: `{"id":"` + fixtureQueryID + `","runId":"` + fixtureRunID + `","name":"q","timestamp":"2026-09-28T14:38:05Z","sources":[{"endOffset":{"commit_ts":"2026-09-28T14:05:00"}}]}`, err: ErrMalformed, msg: "batchId"},
	{name: "no batchId", kind: KindProgress, data: `{"id":"` + fixtureQueryID + `","runId":"` + fixtureRunID + `"}`, err: ErrMalformed, msg: "batchId"},
	{name: "batchId a fraction", kind: KindProgress, data: string(progressDoc(`"batchId":1.5`)), err: ErrMalformed},
	{name: "batchId a string", kind: KindProgress, data: string(progressDoc(`"batchId":"5"`)), err: ErrMalformed},
	{name: "batchId too large", kind: KindProgress, data: string(progressDoc(`"batchId":9223372036854775808`)), err: ErrMalformed},
	{name: "name a number", kind: KindProgress, data: string(progressDoc(`"name":5`)), err: ErrMalformed, msg: "name"},
	{name: "sources an object", kind: KindProgress, data: string(progressDoc(`"sources":{}`)), err: ErrMalformed, msg: "sources"},
	{name: "source a string", kind: KindProgress, data: string(progressDoc(`"sources":[{},"x"]`)), err: ErrMalformed, msg: "sources[1]"},
	{name: "description a number", kind: KindProgress, data: string(progressDoc(`"sources":[{"description":1}]`)), err: ErrMalformed},
	{name: "eventTime an array", kind: KindProgress, data: string(progressDoc(`"eventTime":[]`)), err: ErrMalformed},
	{name: "watermark a number", kind: KindProgress, data: string(progressDoc(`"eventTime":{"watermark":0}`)), err: ErrMalformed},
	{name: "offset with invalid UTF-8", kind: KindProgress, data: string(progressDoc(`"sources":[{"endOffset":{"a":"` + "\xff" + `"}}]`)), err: ErrMalformed, msg: "UTF-8"},
	{name: "batchId twice", kind: KindProgress, data: `{"batchId":999,` + string(progressDoc(""))[1:], err: ErrMalformed, msg: `duplicate key "batchId"`},
	{name: "batchId twice, once escaped", kind: KindProgress, data: `{"batch\u0049d":999,` + string(progressDoc(""))[1:], err: ErrMalformed, msg: "duplicate"},
	{name: "runId twice", kind: KindIdle, data: `{"id":"` + fixtureQueryID + `","runId":"` + fixtureRunID + `","runId":"` + fixtureRunID + `"}`, err: ErrMalformed, msg: "duplicate"},
	{name: "endOffset twice", kind: KindProgress, data: string(progressDoc(`"sources":[{"endOffset":{"a":1},"endOffset":{"a":2}}]`)), err: ErrMalformed, msg: "duplicate"},
	{name: "progress twice", data: `{"Event":"QueryProgressEvent","progress":{},"progress":` + string(progressDoc("")) + `}`, err: ErrMalformed, msg: "duplicate"},
	{name: "exception a number", kind: KindTerminated, data: `{"id":"` + fixtureQueryID + `","runId":"` + fixtureRunID + `","exception":1}`, err: ErrMalformed},
}

func TestParseCases(t *testing.T) {
	for _, tc := range parseCases {
		t.Run(tc.name, func(t *testing.T) {
			ev, err := parseBoth(t, []byte(tc.data), tc.kind)
			if tc.err == nil {
				if err != nil {
					t.Fatalf("Parse: %v", err)
				}
				if tc.check != nil {
					tc.check(t, ev)
				}
				return
			}
			if !errors.Is(err, tc.err) {
				t.Fatalf("error %v, want %v", err, tc.err)
			}
			if !strings.Contains(err.Error(), tc.msg) {
				t.Errorf("error %q does not say %q", err, tc.msg)
			}
		})
	}
}

// TestParseCopies checks that an Event keeps no reference to the input
// buffer, which the caller (a NATS callback) reuses.
func TestParseCopies(t *testing.T) {
	for _, name := range []string{"kafka_watermark", "numeric_offsets"} {
		lpath, epath := twinPaths(name)
		for _, path := range []string{lpath, epath} {
			data := readFile(t, path)
			ev, err := Parse(data, KindUnknown)
			if err != nil {
				t.Fatal(err)
			}
			before, _ := json.Marshal(ev)
			for i := range data {
				data[i] = 'x'
			}
			if after, _ := json.Marshal(ev); !bytes.Equal(before, after) {
				t.Errorf("%s: the Event changed with the input buffer", path)
			}
		}
	}
}

// TestParseOffsetsDoNotShareCapacity checks that appending to one offset
// cannot overwrite the next one.
func TestParseOffsetsDoNotShareCapacity(t *testing.T) {
	ev, err := Parse(readFile(t, filepath.Join("testdata", "twins", "cdc_two_sources.eventlog.json")), KindProgress)
	if err != nil {
		t.Fatal(err)
	}
	want := string(ev.Sources[1].StartOffset)
	_ = append(ev.Sources[0].EndOffset, "garbage"...)
	_ = append(ev.Sources[1].EndOffset, "garbage"...)
	if got := string(ev.Sources[1].StartOffset); got != want {
		t.Errorf("startOffset changed to %s", got)
	}
}
