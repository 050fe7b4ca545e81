package bench

import (
	"bytes"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/finalizer-dev/finalizer/progress"
)

// Placeholders in a progress template, each exactly as wide as what
// replaces it, so that a message is a copy of the template with a few
// bytes overwritten (no formatting of 2-3 KB per message).
const (
	markBatch     = "##########"               // batchId: right-aligned digits after spaces
	markTimestamp = "@@@@@@@@@@@@@@@@@@@@@@@@" // progress timestamp, RFC 3339 with ms and Z
	markWatermark = "%%%%%%%%%%%%%%%%%%%%%%%%" // eventTime.watermark, same layout
	markCommitTS  = "^^^^^^^^^^^^^^^^^^^^^^^"  // endOffset.commit_ts, ISO-8601 without a zone
	layoutZ       = "2006-01-02T15:04:05.000Z"
	layoutNaive   = "2006-01-02T15:04:05.000"
)

// sourceKind is the kind of a simulated query's source, which decides how
// its time is read.
type sourceKind uint8

const (
	// sourceCDC: endOffset {"lsn": ..., "commit_ts": ...}, tracked by
	// offset:/commit_ts.
	sourceCDC sourceKind = iota
	// sourceKafka: endOffset {"topic": {"0": n, ...}} without a time,
	// tracked by the watermark.
	sourceKafka
)

// sim is one simulated run of a streaming query: its identity, its
// tracking, and the template of its progress documents.
type sim struct {
	idx      int
	queryID  string
	runID    string
	name     string
	table    string
	source   sourceKind
	eventLog bool // the event-log (Jackson) form, else the listener (json4s) form
	rule     bool // tracked by a rule, else explicitly
	spec     progress.Spec
	off      int64 // batch offset of the synthetic clock (see clock)
	last     int64 // the last batch published (owned by the publishing goroutine)

	subject        string // <prefix>.progress.<q>.<r>
	startedSubject string
	idleSubject    string // <prefix>.idle.<q>.<r>
	started        []byte // the started event
	// shape is the progress template of the run's source kind and form,
	// shared by the runs of that shape; the run's own ids, name and index
	// are written into it per message. A template per run held 2-3 KB per
	// run of the bench's own heap in the service's process, which the
	// service's memory limit counts in the live heap (issue 12).
	shape   *shape
	msgLen  int // the length of the run's progress documents
	batchAt []int
	tsAt    []int
	wmAt    []int
	ctsAt   []int
}

// The per-run parts of a shape's template; '~' appears nowhere else in
// a template, and strconv.Quote leaves it as it is.
const (
	markQuery = "~QUERY~"
	markRun   = "~RUN~"
	markName  = "~NAME~"
	markIdx   = "~IDX~"
)

// shape is a progress template with the run's parts left out: literal
// pieces, and between them which part of the run goes there.
type shape struct {
	lits   [][]byte
	fields []byte // fields[i] follows lits[i]: 'q', 'r', 'n', 'i'
}

// newShape splits tmpl at the run's parts.
func newShape(tmpl string) *shape {
	sh := &shape{}
	marks := map[string]byte{markQuery: 'q', markRun: 'r', markName: 'n', markIdx: 'i'}
	for {
		at, which := -1, ""
		for m := range marks {
			if i := strings.Index(tmpl, m); i >= 0 && (at < 0 || i < at) {
				at, which = i, m
			}
		}
		if at < 0 {
			sh.lits = append(sh.lits, []byte(tmpl))
			return sh
		}
		sh.lits = append(sh.lits, []byte(tmpl[:at]))
		sh.fields = append(sh.fields, marks[which])
		tmpl = tmpl[at+len(which):]
	}
}

// render appends s's document of the shape (with the batch and time
// placeholders) to buf.
func (sh *shape) render(buf []byte, s *sim) []byte {
	for i, lit := range sh.lits {
		buf = append(buf, lit...)
		if i == len(sh.fields) {
			break
		}
		switch sh.fields[i] {
		case 'q':
			buf = append(buf, s.queryID...)
		case 'r':
			buf = append(buf, s.runID...)
		case 'n':
			buf = append(buf, s.name...)
		case 'i':
			buf = strconv.AppendInt(buf, int64(s.idx), 10)
		}
	}
	return buf
}

// clock is the synthetic event time: batch k of run s carries the time
// base + (k + s.off)*step. base is the start of a minute and step divides
// a minute into perPeriod steps, so a run's batch crosses into a new
// minute when k + s.off is a multiple of perPeriod; the offsets spread the
// crossings of different runs evenly. All times lie in the past, so the
// tracker's cap on future times never applies.
type clock struct {
	base      time.Time
	step      time.Duration
	perPeriod int64
}

// at returns the event time of s's batch k.
func (c clock) at(s *sim, k int64) time.Time { return c.base.Add(time.Duration(k+s.off) * c.step) }

// period returns the start of the period (minute) holding s's batch k:
// the verdict that batch supports.
func (c clock) period(s *sim, k int64) time.Time { return c.at(s, k).Truncate(time.Minute) }

// crossing reports whether s's batch k is the first of its period.
func (c clock) crossing(s *sim, k int64) bool { return (k+s.off)%c.perPeriod == 0 }

// nextCrossing returns s's first crossing batch after k.
func (c clock) nextCrossing(s *sim, k int64) int64 {
	return ((k+s.off)/c.perPeriod+1)*c.perPeriod - s.off
}

// newSims makes n runs. Run i reads a CDC source when i is even and a
// Kafka source when odd; it is in the event-log form when i/2 is odd; it
// is tracked by a rule or explicitly as tracking says ("mixed": by a rule
// when i/4 is odd). tag makes the ids and names of one bench invocation
// unique.
func newSims(n int, tag uint32, prefix, tracking string, perPeriod int64) ([]*sim, error) {
	cdc, err := progress.ParseSpec(progress.SpecOptions{Time: "offset:/commit_ts", Granularity: "minute"})
	if err != nil {
		return nil, err
	}
	kafka, err := progress.ParseSpec(progress.SpecOptions{Time: "watermark", Granularity: "minute"})
	if err != nil {
		return nil, err
	}
	sims := make([]*sim, n)
	shapes := map[[2]bool]*shape{}
	var scratch []byte
	for i := range sims {
		s := &sim{
			idx:      i,
			queryID:  fmt.Sprintf("%08x-0000-4000-8000-%012x", tag, i),
			runID:    fmt.Sprintf("%08x-0001-4000-8000-%012x", tag, i),
			source:   sourceKind(i % 2),
			eventLog: (i/2)%2 == 1,
			off:      int64(i) % perPeriod,
		}
		switch tracking {
		case "rule":
			s.rule = true
		case "explicit":
		default:
			s.rule = (i/4)%2 == 1
		}
		kind := "cdc"
		s.spec = cdc
		if s.source == sourceKafka {
			kind, s.spec = "kafka", kafka
		}
		if s.rule {
			s.name = fmt.Sprintf("b%08x-%s-%d", tag, kind, i)
			s.table = "bench." + s.name // what the rule's "bench.{name}" gives
		} else {
			s.name = fmt.Sprintf("b%08x-explicit-%d", tag, i)
			s.table = fmt.Sprintf("bench.b%08x_t%d", tag, i)
		}
		s.subject = prefix + ".progress." + s.queryID + "." + s.runID
		s.startedSubject = prefix + ".started." + s.queryID + "." + s.runID
		s.idleSubject = prefix + ".idle." + s.queryID + "." + s.runID
		key := [2]bool{s.source == sourceKafka, s.eventLog}
		if shapes[key] == nil {
			body, _ := templates(s.source, s.eventLog, markQuery, markRun, markName, markIdx)
			shapes[key] = newShape(body)
		}
		s.shape = shapes[key]
		_, started := templates(s.source, s.eventLog, s.queryID, s.runID, s.name, strconv.Itoa(i))
		s.started = []byte(started)
		scratch = s.shape.render(scratch[:0], s)
		s.msgLen = len(scratch)
		s.batchAt = indexAll(scratch, markBatch)
		s.tsAt = indexAll(scratch, markTimestamp)
		s.wmAt = indexAll(scratch, markWatermark)
		s.ctsAt = indexAll(scratch, markCommitTS)
		sims[i] = s
	}
	return sims, nil
}

// partitionOffsets writes a Kafka offset object of 8 partitions.
func partitionOffsets(topic string, base int64) string {
	var b strings.Builder
	b.WriteString(`{"` + topic + `":{`)
	for p := range 8 {
		if p > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, `"%d":%d`, p, base+int64(p)*7919)
	}
	b.WriteString("}}")
	return b.String()
}

// templates writes a run's progress template and started event in its
// JSON form (the progress about 2-3 KB, shaped like what Spark 3.5
// posts), with the given ids, name and index (the marks, for a shape).
func templates(source sourceKind, eventLog bool, queryID, runID, name, idx string) (body, started string) {
	jsonIn := func(v string) string { // an offset as the form carries it
		if eventLog {
			return strconv.Quote(v) // Jackson: a string holding JSON
		}
		return v
	}
	rate := func(v string) string { // event-log rates can be "NaN"
		if eventLog && v == "0.0" {
			return `"NaN"`
		}
		return v
	}
	var src, eventTime string
	switch source {
	case sourceKafka:
		topic := "orders_" + idx
		src = `{"description":"KafkaV2[Subscribe[` + topic + `]]",` +
			`"startOffset":` + jsonIn(partitionOffsets(topic, 48_000_000)) + `,` +
			`"endOffset":` + jsonIn(partitionOffsets(topic, 48_001_200)) + `,` +
			`"latestOffset":` + jsonIn(partitionOffsets(topic, 48_001_200)) + `,` +
			`"numInputRows":1200,"inputRowsPerSecond":` + rate("0.0") + `,"processedRowsPerSecond":533.3333333333334,` +
			`"metrics":{"avgOffsetsBehindLatest":"0.0","maxOffsetsBehindLatest":"0","minOffsetsBehindLatest":"0"}}`
		eventTime = `{"avg":"2024-01-01T00:00:00.000Z","max":"2024-01-01T00:00:00.000Z","min":"2024-01-01T00:00:00.000Z","watermark":"` + markWatermark + `"}`
	default:
		tbl := "dbo.orders_" + idx
		src = `{"description":"SqlServerCdc[` + tbl + `]",` +
			`"startOffset":` + jsonIn(`{"lsn":"0x00000027000000010003","commit_ts":"2024-01-01T00:00:00.000"}`) + `,` +
			`"endOffset":` + jsonIn(`{"lsn":"0x00000027000000020007","commit_ts":"`+markCommitTS+`"}`) + `,` +
			`"latestOffset":null,"numInputRows":120,"inputRowsPerSecond":` + rate("0.0") + `,"processedRowsPerSecond":40.0,` +
			`"metrics":{"changeTables":"1","rowsBehindSource":"0"}}`
		eventTime = `{}`
	}
	top := ""
	if !eventLog {
		top = `"numInputRows":1200,"inputRowsPerSecond":12.0,"processedRowsPerSecond":533.3333333333334,`
	}
	body = `{"id":"` + queryID + `","runId":"` + runID + `","name":"` + name + `",` +
		`"timestamp":"` + markTimestamp + `","batchId":` + markBatch + `,"batchDuration":2251,` + top +
		`"durationMs":{"addBatch":2100,"commitOffsets":31,"getBatch":0,"latestOffset":12,"queryPlanning":35,"triggerExecution":2250,"walCommit":40},` +
		`"eventTime":` + eventTime + `,` +
		`"stateOperators":[{"operatorName":"stateStoreSave","numRowsTotal":48210,"numRowsUpdated":1200,"allUpdatesTimeMs":35,` +
		`"numRowsRemoved":0,"allRemovalsTimeMs":0,"commitTimeMs":120,"memoryUsedBytes":18245320,"numRowsDroppedByWatermark":0,` +
		`"numShufflePartitions":200,"numStateStoreInstances":200,"customMetrics":{"loadedMapCacheHitCount":400,` +
		`"loadedMapCacheMissCount":0,"stateOnCurrentVersionSizeBytes":17520112}},` +
		`{"operatorName":"dedupe","numRowsTotal":1203311,"numRowsUpdated":1200,"allUpdatesTimeMs":12,"numRowsRemoved":1180,` +
		`"allRemovalsTimeMs":9,"commitTimeMs":88,"memoryUsedBytes":402113232,"numRowsDroppedByWatermark":3,` +
		`"numShufflePartitions":200,"numStateStoreInstances":200,"customMetrics":{"loadedMapCacheHitCount":400,` +
		`"loadedMapCacheMissCount":0,"numDroppedDuplicateRows":17,"stateOnCurrentVersionSizeBytes":398112004}}],` +
		`"sources":[` + src + `],` +
		`"sink":{"description":"DeltaSink[s3://lake/bronze/` + name + `]","numOutputRows":-1,"metrics":{}},` +
		`"observedMetrics":{}}`
	started = `{"id":"` + queryID + `","runId":"` + runID + `","name":"` + name + `","timestamp":"2024-01-01T00:00:00.000Z"}`
	if eventLog {
		body = `{"Event":"org.apache.spark.sql.streaming.StreamingQueryListener$QueryProgressEvent","progress":` + body + `}`
		started = `{"Event":"org.apache.spark.sql.streaming.StreamingQueryListener$QueryStartedEvent",` + started[1:]
	}
	return body, started
}

// indexAll returns the offsets of every occurrence of mark in b.
func indexAll(b []byte, mark string) []int {
	var at []int
	for off := 0; ; {
		i := bytes.Index(b[off:], []byte(mark))
		if i < 0 {
			return at
		}
		at = append(at, off+i)
		off += i + len(mark)
	}
}

// progress writes the run's progress of batch k, with event time t, into
// buf (reused) and returns it.
// idleEvent appends s's QueryIdleEvent at t to buf[:0], in s's form: what
// Spark 3.5+ posts every noDataProgressEventInterval while the run has no
// new data.
func (s *sim) idleEvent(buf []byte, t time.Time) []byte {
	buf = buf[:0]
	if s.eventLog {
		buf = append(buf, `{"Event":"org.apache.spark.sql.streaming.StreamingQueryListener$QueryIdleEvent",`...)
	} else {
		buf = append(buf, '{')
	}
	buf = append(buf, `"id":"`...)
	buf = append(buf, s.queryID...)
	buf = append(buf, `","runId":"`...)
	buf = append(buf, s.runID...)
	buf = append(buf, `","timestamp":"`...)
	buf = t.UTC().AppendFormat(buf, "2006-01-02T15:04:05.000Z")
	return append(buf, `"}`...)
}

func (s *sim) progress(buf []byte, k int64, t time.Time) []byte {
	buf = s.shape.render(buf[:0], s)
	var scratch [32]byte
	num := strconv.AppendInt(scratch[:0], k, 10)
	for _, at := range s.batchAt {
		field := buf[at : at+len(markBatch)]
		for i := range field {
			field[i] = ' '
		}
		copy(field[len(field)-len(num):], num)
	}
	ts := t.UTC().AppendFormat(scratch[:0], layoutZ)
	for _, at := range s.tsAt {
		copy(buf[at:], ts)
	}
	for _, at := range s.wmAt {
		copy(buf[at:], ts)
	}
	naive := t.UTC().AppendFormat(scratch[:0], layoutNaive)
	for _, at := range s.ctsAt {
		copy(buf[at:], naive)
	}
	return buf
}
