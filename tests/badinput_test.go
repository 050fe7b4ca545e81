//go:build linux

package tests

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/nats-io/nats.go"

	"github.com/finalizer-dev/finalizer/internal/pgcluster/pgtest"
)

// Bad input through the real service: every message below is dropped and
// counted (finalizer_events_total by outcome) or yields no candidate
// (finalizer_candidates_total), nothing crashes, and a healthy run tracked
// beside them keeps moving after every one of them.
func TestBadInputIsDroppedAndCounted(t *testing.T) {
	pgURL := pgtest.URL(t)
	config := `
tracking:
  future_skew: 1m
tables:
  - table: "bad.{name}"
    query: "healthy_*"
`
	s := startServe(t, serveOpts{pgURL: pgURL, config: config})
	pub := connect(t, s.natsURL)
	qH, rH := id(0x800), id(0x801) // the healthy run
	qF, rF := id(0x802), id(0x803) // a run whose clock is far ahead
	qN, rN := id(0x804), id(0x805) // a run whose offsets hold \u0000
	for _, tr := range []struct{ q, r, table, gran string }{{qH, rH, "healthy", "minute"}, {qF, rF, "future", "minute"}, {qN, rN, "nul", "hour"}} {
		if code, out, e := cli(t, nil, "track", "--nats-url", s.natsURL, "--query-id", tr.q, "--run-id", tr.r, "--table", tr.table, "--granularity", tr.gran); code != 0 {
			t.Fatalf("track: %d %s %s", code, out, e)
		}
	}
	watch := watchVerdict(t, pgURL, "healthy")

	// healthy publishes the healthy run's next batch (one minute later each
	// time) and waits for its verdict: the service still serves it.
	var batch int64
	healthy := func(after string) {
		t.Helper()
		batch++
		ts := time.Date(2026, 9, 28, 13, int(batch), 30, 0, time.UTC)
		pub.publish("progress", qH, rH, progressAt(qH, rH, "x", batch, ts.Format("2006-01-02T15:04:05")))
		r := waitVerdict(t, pgURL, "healthy", ts.Truncate(time.Minute).Format(time.RFC3339))
		if r.BatchID != batch {
			t.Fatalf("after %s: healthy verdict from batch %d, want %d", after, r.BatchID, batch)
		}
	}
	// expect waits until the sum of the series grew by want.
	expect := func(what string, want float64, series ...string) func() {
		base := make([]float64, len(series))
		for i, s2 := range series {
			base[i] = sample(t, s.httpURL, s2)
		}
		return func() {
			t.Helper()
			eventually(t, what+" counted as "+strings.Join(series, " + "), func() bool {
				var got float64
				for i, s2 := range series {
					got += sample(t, s.httpURL, s2) - base[i]
				}
				return got == want
			})
		}
	}
	const (
		malformed = `finalizer_events_total{kind="progress",outcome="malformed"}`
		mismatch  = `finalizer_events_total{kind="progress",outcome="mismatch"}`
		ignored   = `finalizer_events_total{kind="progress",outcome="ignored"}`
		unknown   = `finalizer_events_total{kind="unknown",outcome="malformed"}`
		noTime    = `finalizer_candidates_total{outcome="no_time"}`
		future    = `finalizer_candidates_total{outcome="future"}`
		implaus   = `finalizer_candidates_total{outcome="implausible"}`
	)
	healthy("start")
	subject := "spark.progress." + qH + "." + rH
	raw := func(subj string, payload []byte) {
		t.Helper()
		if err := pub.nc.Publish(subj, payload); err != nil {
			t.Fatalf("publish %s: %v", subj, err)
		}
		if err := pub.nc.Flush(); err != nil {
			t.Fatal(err)
		}
	}

	inputs := []struct {
		name    string
		payload string
		outcome string
	}{
		{"truncated JSON", `{"id":"` + qH + `","runId":"` + rH, malformed},
		{"not JSON at all", "\x00\xff\xfe garbage", malformed},
		{"empty payload", "", malformed},
		{"JSON of the wrong shape", `{"id":123,"runId":["x"],"batchId":"seven"}`, malformed},
		{"a JSON array", `[1,2,3]`, malformed},
		{"deeply nested", strings.Repeat("[", 100000) + strings.Repeat("]", 100000), malformed},
		{"ids that are not UUIDs", `{"id":"orders","runId":"today","batchId":1,"timestamp":"2026-09-28T15:00:00.000Z","sources":[]}`, malformed},
		{"ids of another run", progressAt(qH, id(0x8ff), "x", 99, "2026-09-28T23:00:00"), mismatch},
		{"ids of another query", progressAt(id(0x8fe), rH, "x", 99, "2026-09-28T23:00:00"), mismatch},
		{"a termination (listener form) on the progress subject", terminatedJSON(qH, rH), malformed},
		{"a termination (event-log form) on the progress subject", `{"Event":"org.apache.spark.sql.streaming.StreamingQueryListener$QueryTerminatedEvent","id":"` + qH + `","runId":"` + rH + `","exception":null}`, mismatch},
		{"an unknown event-log class", `{"Event":"org.apache.spark.sql.streaming.StreamingQueryListener$QueryMadeUpEvent","id":"` + qH + `"}`, ignored},
	}
	for _, in := range inputs {
		done := expect(in.name, 1, in.outcome)
		raw(subject, []byte(in.payload))
		done()
		healthy(in.name)
	}

	// Times: far in the future, before 1970, and not a time at all.
	for _, in := range []struct{ name, commitTS, outcome string }{ // JSON values
		{"a time before 1970", `"1969-07-20T20:17:00"`, noTime},
		{"the zero time", `"0001-01-01T00:00:00"`, noTime},
		{"epoch milliseconds before 1970", `-1`, implaus},
		{"a Kafka partition offset", `48917`, implaus},
		{"a NUL inside the time", `"2026-09-28T23:00:00\u0000"`, noTime},
		{"a year beyond 9999", `"10000-01-01T00:00:00"`, noTime},
		{"not a time", `"yesterday"`, noTime},
		{"null", `null`, noTime},
	} {
		done := expect(in.name, 1, in.outcome)
		batch++
		pub.publish("progress", qH, rH, progressWithOffset(qH, rH, batch, `{"lsn":"0x27","commit_ts":`+in.commitTS+`}`))
		done()
		healthy(in.name)
	}
	// A time beyond the clock plus future_skew gives no candidate (ADR
	// 0012): counted, shown on the run, and no verdict at all.
	done := expect("a time far in the future", 1, future)
	pub.publish("progress", qF, rF, progressAt(qF, rF, "x", 1, "2999-01-01T00:00:00"))
	done()
	if row, ok := readRow(t, pgURL, "future"); ok {
		t.Fatalf("future verdict %v, want none", row.FinalizedUntil)
	}
	healthy("a time far in the future")

	// \u0000 in the end offset: jsonb refuses it; the verdict must not wedge.
	pub.publish("progress", qN, rN, progressWithOffset(qN, rN, 1, `{"commit_ts":"2026-09-28T13:10:00","note":"a\u0000b","k\u0000":1}`))
	waitVerdict(t, pgURL, "nul", "2026-09-28T13:00:00Z")
	var stored string
	conn, err := pgx.Connect(context.Background(), pgURL)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	if err := conn.QueryRow(context.Background(), `SELECT end_offset->>'note' FROM public.table_finalization WHERE table_name = 'nul'`).Scan(&stored); err != nil {
		t.Fatal(err)
	}
	if stored != `a\u0000b` {
		t.Errorf("stored note %q, want the NUL escaped as the text a\\u0000b", stored)
	}
	pub.publish("progress", qN, rN, progressWithOffset(qN, rN, 2, `{"commit_ts":"2026-09-28T14:05:00","note":"\ud800"}`))
	waitVerdict(t, pgURL, "nul", "2026-09-28T14:00:00Z")
	healthy("offsets holding \\u0000")

	// Size: a valid progress of exactly 1 MiB is applied; 1 MiB of junk is
	// dropped; more than 1 MiB never gets through NATS (max_payload).
	batch++
	big := progressAt(qH, rH, "x", batch, time.Date(2026, 9, 28, 13, int(batch), 30, 0, time.UTC).Format("2006-01-02T15:04:05"))
	big = strings.Replace(big, `"numInputRows":10,`, `"padding":"`+strings.Repeat("x", 1<<20-len(big)-13)+`","numInputRows":10,`, 1)
	if len(big) != 1<<20 {
		t.Fatalf("big payload is %d bytes", len(big))
	}
	raw(subject, []byte(big))
	waitVerdict(t, pgURL, "healthy", time.Date(2026, 9, 28, 13, int(batch), 0, 0, time.UTC).Format(time.RFC3339))
	done = expect("1 MiB of junk", 1, malformed)
	raw(subject, []byte(`{"junk":"`+strings.Repeat("\x01", 1<<20-11)+`"}`))
	done()
	if err := pub.nc.Publish(subject, make([]byte, 1<<20+1)); !errors.Is(err, nats.ErrMaxPayload) {
		t.Errorf("publish of 1 MiB + 1 byte: err = %v, want nats.ErrMaxPayload", err)
	}
	healthy("payloads of 1 MiB")

	// Subjects with odd tokens.
	done = expect("odd subjects", 3, unknown, mismatch)
	raw("spark.bogus."+qH+"."+rH, []byte(progressAt(qH, rH, "x", 1, "2026-09-28T23:00:00")))                                       // unknown kind on the run's own subscription
	raw("spark.progress."+strings.ToUpper(qH)+"."+strings.ToUpper(rH), []byte(progressAt(qH, rH, "x", 99, "2026-09-28T23:00:00"))) // upper-case ids: another run to the server
	raw("spark.progress.é.ü", []byte(progressAt(qH, rH, "x", 99, "2026-09-28T23:00:00")))                                          // non-ASCII tokens
	done()
	raw("spark.progress."+qH+"."+rH+".extra", []byte(`{}`)) // five tokens: no subscription matches, the stream keeps it
	raw("spark.progress", []byte(`{}`))
	healthy("odd subjects")
	if code, _, e := cli(t, nil, "track", "--nats-url", s.natsURL, "--query-id", qH, "--run-id", "a.*", "--table", "x"); code != 2 || !strings.Contains(e, "is not a UUID") {
		t.Errorf("track with a run id holding a wildcard: exit %d, %s", code, e)
	}
	// The same request, bypassing the CLI's check: refused before it is
	// persisted (the restart below would log its failed recovery).
	reply, err := pub.nc.Request("finalizer.api.track", []byte(`{"query_id":"`+qH+`","run_id":"a.*","table":"x","spec":{}}`), 10*time.Second)
	if err != nil || !strings.Contains(string(reply.Data), "is not a UUID") {
		t.Errorf("track request with a run id holding a wildcard: %v %v", reply, err)
	}

	// The service restarts over a stream holding all of the above.
	s.stop()
	s2 := startServe(t, serveOpts{pgURL: pgURL, config: config, dataDir: s.dataDir})
	pub = connect(t, s2.natsURL)
	s = s2
	healthy("a restart over the bad input")
	watch.check(t, time.Date(2026, 9, 28, 13, int(batch), 0, 0, time.UTC).Format(time.RFC3339))
	if errs := errorLines(s.stderr.String()); len(errs) > 0 {
		t.Errorf("errors logged after the restart:\n%s", strings.Join(errs, "\n"))
	}
}

// Bad configuration is refused at start with a one-line error naming what
// is wrong (exit 2): a control-table name with quotes or semicolons, a
// config file with unknown keys, values of the wrong type.
func TestBadConfigRefused(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct {
		name   string
		args   []string
		config string
		want   []string
	}{
		{"control table with a semicolon", []string{"--control-table", "public.verdicts; DROP TABLE x"}, "", []string{"control_table", "invalid control table name"}},
		{"control table with quotes", []string{"--control-table", `public."verdicts"`}, "", []string{"control_table", "invalid control table name"}},
		{"control table with three parts", []string{"--control-table", "a.b.c"}, "", []string{"control_table"}},
		{"unknown top-level key", nil, "natz:\n  url: nats://x\n", []string{`unknown key "natz" at the top level`, "line 1", `did you mean "nats"`}},
		{"unknown key in a table", nil, "tables:\n  - table: t\n    query: q\n    granulrity: hour\n", []string{`unknown key "granulrity" in tables[0]`, "line 4", `did you mean "granularity"`}},
		{"unknown key under nats.embedded", nil, "nats:\n  embedded:\n    userz: []\n", []string{"userz"}},
		{"a duration that is not one", nil, "tracking:\n  stale_after: soon\n", []string{"line 2", `"soon" is not a duration`}},
		{"a bad granularity", nil, "tables:\n  - table: t\n    query: q\n    granularity: fortnight\n", []string{"fortnight"}},
		{"a negative delay", nil, "tables:\n  - table: t\n    query: q\n    delay: -5m\n", []string{"delay"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			args := append([]string{"serve", "--data-dir", dir, "--nats-listen", "127.0.0.1:0", "--http-listen", "127.0.0.1:0"}, tc.args...)
			if tc.config != "" {
				args = append(args, "--config", writeFile(t, t.TempDir(), "finalizer.yaml", tc.config, 0o644))
			}
			code, out, e := cli(t, nil, args...)
			if code != 2 {
				t.Fatalf("exit %d, want 2:\n%s%s", code, out, e)
			}
			if lines := strings.Split(strings.TrimSpace(e), "\n"); len(lines) != 1 {
				t.Errorf("error is %d lines, want one: %s", len(lines), e)
			}
			for _, w := range tc.want {
				if !strings.Contains(e, w) {
					t.Errorf("error %q does not name %q", e, w)
				}
			}
		})
	}
	code, _, e := cli(t, nil, "status", "--postgres-url", "postgres://127.0.0.1:1/x", "--control-table", "x;y")
	if code != 2 || !strings.Contains(e, "invalid control table name") {
		t.Errorf("status with a bad control table: exit %d: %s", code, e)
	}
}

// A progress that names the epoch as its watermark (Spark's "no watermark
// yet") or carries no usable time is counted as no_time through the real
// service, in both JSON forms.
func TestNoTimeInBothForms(t *testing.T) {
	pgURL := pgtest.URL(t)
	s := startServe(t, serveOpts{pgURL: pgURL})
	pub := connect(t, s.natsURL)
	q, r := id(0x900), id(0x901)
	if code, out, e := cli(t, nil, "track", "--nats-url", s.natsURL, "--query-id", q, "--run-id", r, "--table", "wm", "--time", "watermark"); code != 0 {
		t.Fatalf("track: %d %s %s", code, out, e)
	}
	listener := fmt.Sprintf(`{"id":%q,"runId":%q,"batchId":1,"timestamp":"2026-09-28T15:00:00.000Z","durationMs":{"addBatch":1},"eventTime":{"watermark":"1970-01-01T00:00:00.000Z"},"stateOperators":[{"operatorName":"stateStoreSave"}],"sources":[{"endOffset":{"x":1}}]}`, q, r)
	eventLog := fmt.Sprintf(`{"Event":"org.apache.spark.sql.streaming.StreamingQueryListener$QueryProgressEvent","progress":{"id":%q,"runId":%q,"batchId":2,"timestamp":"2026-09-28T15:00:00.000Z","durationMs":{"addBatch":1},"eventTime":{},"stateOperators":[{"operatorName":"stateStoreSave"}],"sources":[{"endOffset":"{\"x\":2}"}]}}`, q, r)
	for i, p := range []string{listener, eventLog} {
		pub.publish("progress", q, r, p)
		eventually(t, "no_time counted", func() bool {
			return sample(t, s.httpURL, `finalizer_candidates_total{outcome="no_time"}`) == float64(i+1)
		})
	}
	pub.publish("progress", q, r, fmt.Sprintf(`{"id":%q,"runId":%q,"batchId":3,"timestamp":"2026-09-28T15:00:00.000Z","durationMs":{"addBatch":1},"eventTime":{"watermark":"2026-09-28T14:05:00.000Z"},"stateOperators":[{"operatorName":"stateStoreSave"}],"sources":[{"endOffset":{"x":3}}]}`, q, r))
	waitVerdict(t, pgURL, "wm", "2026-09-28T14:00:00Z")
}
