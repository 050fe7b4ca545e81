//go:build linux

package tests

import (
	"context"
	"encoding/json"
	"fmt"
	"hash/fnv"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/finalizer-dev/finalizer/control"
	"github.com/finalizer-dev/finalizer/internal/actions"
	"github.com/finalizer-dev/finalizer/internal/natstest"
	"github.com/finalizer-dev/finalizer/internal/pgcluster/pgtest"
)

// webhookSecret signs the test receivers' webhooks; it must never appear
// in the service's output.
const webhookSecret = "s3cr3t-webhook-key-do-not-log"

// receiver is a webhook endpoint (httptest) that verifies each request's
// signature, fails the first `fail` requests with 500, and records each
// event it accepted by id.
type receiver struct {
	t   *testing.T
	srv *httptest.Server

	mu       sync.Mutex
	fail     int // requests still to fail
	down     bool
	requests int
	badSig   int
	events   []actions.Event // accepted, in arrival order
	byID     map[string]int  // accepted count per id
}

func newReceiver(t *testing.T, fail int) *receiver {
	r := &receiver{t: t, fail: fail, byID: map[string]int{}}
	r.srv = httptest.NewServer(http.HandlerFunc(r.serve))
	t.Cleanup(r.srv.Close)
	return r
}

func (r *receiver) serve(w http.ResponseWriter, req *http.Request) {
	body, _ := io.ReadAll(req.Body)
	r.mu.Lock()
	defer r.mu.Unlock()
	r.requests++
	err := actions.Verify([]byte(webhookSecret), req.Header.Get("X-Finalizer-Timestamp"), req.Header.Get("X-Finalizer-Signature"), body, time.Now(), 5*time.Minute)
	if err != nil {
		r.badSig++
		http.Error(w, err.Error(), http.StatusUnauthorized)
		return
	}
	if r.down || r.fail > 0 {
		r.fail--
		http.Error(w, "not now", http.StatusInternalServerError)
		return
	}
	var ev actions.Event
	if err := json.Unmarshal(body, &ev); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	if req.Header.Get("X-Finalizer-Event-Id") != ev.ID {
		http.Error(w, "id header differs from the body's", http.StatusBadRequest)
		return
	}
	r.byID[ev.ID]++
	if r.byID[ev.ID] == 1 {
		r.events = append(r.events, ev)
	}
	w.WriteHeader(http.StatusNoContent)
}

func (r *receiver) setDown(down bool) {
	r.mu.Lock()
	r.down = down
	r.mu.Unlock()
}

// accepted returns the events accepted once or more, and the ids
// accepted more than once.
func (r *receiver) accepted() ([]actions.Event, []string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	var twice []string
	for id, n := range r.byID {
		if n > 1 {
			twice = append(twice, id)
		}
	}
	return append([]actions.Event(nil), r.events...), twice
}

// periods lists the events' period starts as 15:04.
func periods(evs []actions.Event) string {
	var out []string
	for _, e := range evs {
		out = append(out, e.PeriodStart.UTC().Format("15:04"))
	}
	return strings.Join(out, " ")
}

// finalStream reads every message of the nats action's stream for a
// table's subject, in stream order.
func finalStream(t *testing.T, natsURL, subject string) []actions.Event {
	t.Helper()
	nc, js := natstest.Connect(t, natsURL)
	defer nc.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	st, err := js.Stream(ctx, "FINALIZER_FINAL")
	if err != nil {
		t.Fatal(err)
	}
	info, err := st.Info(ctx, jetstream.WithSubjectFilter(subject))
	if err != nil {
		t.Fatal(err)
	}
	n := int(info.State.Subjects[subject])
	if n == 0 {
		return nil
	}
	c, err := st.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{FilterSubjects: []string{subject}})
	if err != nil {
		t.Fatal(err)
	}
	batch, err := c.FetchNoWait(n)
	if err != nil {
		t.Fatal(err)
	}
	var out []actions.Event
	for m := range batch.Messages() {
		var ev actions.Event
		if err := json.Unmarshal(m.Data(), &ev); err != nil {
			t.Fatal(err)
		}
		if id := m.Headers().Get("Nats-Msg-Id"); id != ev.ID {
			t.Errorf("Nats-Msg-Id %q, body id %q", id, ev.ID)
		}
		out = append(out, ev)
	}
	return out
}

// actionsConfig is a rule for orders-v1 into bronze.orders, hourly, with
// the given actions (YAML list items, indented by 6).
func actionsConfig(items ...string) string {
	return `
tables:
  - table: bronze.orders
    query: orders-v1
    actions:
` + strings.Join(items, "\n") + "\n"
}

func webhookItem(url string) string {
	return `      - webhook: {url: "` + url + `", secret_env: TEST_WEBHOOK_SECRET, initial_interval: 50ms, max_interval: 200ms}`
}

// checkJump checks the events of the first verdict (11:00, first) and a
// jump from 12:00 to 15:00 (12:00, 13:00, 14:00), in order.
func checkJump(t *testing.T, kind string, evs []actions.Event) {
	t.Helper()
	if got := periods(evs); got != "11:00 12:00 13:00 14:00" {
		t.Fatalf("%s: periods %q, want 11:00 12:00 13:00 14:00 in order", kind, got)
	}
	ids := map[string]bool{}
	for i, e := range evs {
		if e.Table != "bronze.orders" || e.Granularity != "hour" || !e.PeriodEnd.Equal(e.PeriodStart.Add(time.Hour)) || ids[e.ID] || e.Again {
			t.Errorf("%s: event %d: %+v", kind, i, e)
		}
		ids[e.ID] = true
		if (i == 0) != e.First {
			t.Errorf("%s: event %d first=%v", kind, i, e.First)
		}
		want := utc("2026-09-28T15:00:00Z")
		if i == 0 {
			want = utc("2026-09-28T12:00:00Z")
		}
		if !e.FinalizedUntil.Equal(want) || e.RunID != runA || e.QueryID != queryA {
			t.Errorf("%s: event %d provenance: %+v", kind, i, e)
		}
	}
}

// TestActionsJumpInOrder: a jump of the verdict over three periods
// (12:00 to 15:00) gives three events in order (12:00, 13:00, 14:00), on
// each action kind: the NATS stream, the webhook, the marker files. The
// first verdict announces its one period.
func TestActionsJumpInOrder(t *testing.T) {
	pgURL := pgtest.URL(t)
	rcv := newReceiver(t, 0)
	markers := t.TempDir()
	s := startServe(t, serveOpts{pgURL: pgURL, env: []string{"TEST_WEBHOOK_SECRET=" + webhookSecret}, config: actionsConfig(
		`      - nats: {}`,
		webhookItem(rcv.srv.URL+"/hook?token=querysecret"),
		`      - marker: {path: "`+markers+`/{table}/{period}/_SUCCESS"}`,
	)})
	pub := connect(t, s.natsURL)
	pub.publish("started", queryA, runA, startedJSON(queryA, runA, "orders-v1"))
	pub.publish("progress", queryA, runA, cdcProgressJSON(queryA, runA, "orders-v1", "2026-09-28T12:10:00"))
	waitVerdict(t, pgURL, "bronze.orders", "2026-09-28T12:00:00Z")
	pub.publish("progress", queryA, runA, cdcProgressJSON(queryA, runA, "orders-v1", "2026-09-28T15:20:00"))
	waitVerdict(t, pgURL, "bronze.orders", "2026-09-28T15:00:00Z")

	eventually(t, "four webhook events", func() bool { evs, _ := rcv.accepted(); return len(evs) >= 4 })
	evs, twice := rcv.accepted()
	checkJump(t, "webhook", evs)
	if len(twice) > 0 {
		t.Errorf("webhook: ids delivered twice: %v", twice)
	}
	var stream []actions.Event
	eventually(t, "four NATS events", func() bool {
		stream = finalStream(t, s.natsURL, "finalizer.api.final.bronze.orders")
		return len(stream) >= 4
	})
	checkJump(t, "nats", stream)
	for i := range stream {
		if stream[i].ID != evs[i].ID {
			t.Errorf("event %d: nats id %s, webhook id %s: one event, one id", i, stream[i].ID, evs[i].ID)
		}
	}
	var files []actions.Event
	eventually(t, "four markers", func() bool {
		files = nil
		for _, p := range []string{"2026-09-28T11", "2026-09-28T12", "2026-09-28T13", "2026-09-28T14"} {
			raw, err := os.ReadFile(filepath.Join(markers, "bronze.orders", p, "_SUCCESS"))
			if err != nil {
				return false
			}
			var ev actions.Event
			if err := json.Unmarshal(raw, &ev); err != nil {
				t.Fatalf("marker %s: %v", p, err)
			}
			files = append(files, ev)
		}
		return true
	})
	checkJump(t, "marker", files)
	// Markers are written in order: each one's mtime is not before the
	// previous one's.
	var last time.Time
	for _, p := range []string{"2026-09-28T11", "2026-09-28T12", "2026-09-28T13", "2026-09-28T14"} {
		fi, err := os.Stat(filepath.Join(markers, "bronze.orders", p, "_SUCCESS"))
		if err != nil {
			t.Fatal(err)
		}
		if fi.ModTime().Before(last) {
			t.Errorf("marker %s written before the previous one", p)
		}
		last = fi.ModTime()
	}
	// No temporary file is left behind.
	_ = filepath.Walk(markers, func(p string, fi os.FileInfo, err error) error {
		if err == nil && strings.Contains(filepath.Base(p), ".tmp-") {
			t.Errorf("temporary marker left: %s", p)
		}
		return nil
	})
	for _, out := range []string{s.stdout.String(), s.stderr.String()} {
		if strings.Contains(out, webhookSecret) || strings.Contains(out, "querysecret") {
			t.Error("the webhook's secret or its URL's query appears in the service's output")
		}
	}
	// The metrics count each delivery, per action.
	eventually(t, "metrics", func() bool {
		text := metricText(t, s.httpURL)
		return strings.Contains(text, `finalizer_action_delivered_total{action="webhook",kind="webhook"} 4`) &&
			strings.Contains(text, `finalizer_action_delivered_total{action="nats",kind="nats"} 4`) &&
			strings.Contains(text, `finalizer_action_delivered_total{action="marker",kind="marker"} 4`)
	})
}

// TestActionsWebhookRetries: a receiver that fails twice, then succeeds,
// verifying each request's signature: every event arrives once by id, in
// order, and the retries are counted.
func TestActionsWebhookRetries(t *testing.T) {
	pgURL := pgtest.URL(t)
	rcv := newReceiver(t, 2)
	s := startServe(t, serveOpts{pgURL: pgURL, env: []string{"TEST_WEBHOOK_SECRET=" + webhookSecret}, config: actionsConfig(webhookItem(rcv.srv.URL))})
	pub := connect(t, s.natsURL)
	pub.publish("started", queryA, runA, startedJSON(queryA, runA, "orders-v1"))
	pub.publish("progress", queryA, runA, cdcProgressJSON(queryA, runA, "orders-v1", "2026-09-28T12:10:00"))
	waitVerdict(t, pgURL, "bronze.orders", "2026-09-28T12:00:00Z")
	pub.publish("progress", queryA, runA, cdcProgressJSON(queryA, runA, "orders-v1", "2026-09-28T15:20:00"))
	waitVerdict(t, pgURL, "bronze.orders", "2026-09-28T15:00:00Z")
	eventually(t, "the webhook's events", func() bool { evs, _ := rcv.accepted(); return len(evs) >= 4 })
	evs, twice := rcv.accepted()
	if got := periods(evs); got != "11:00 12:00 13:00 14:00" {
		t.Errorf("periods %q", got)
	}
	if len(twice) > 0 {
		t.Errorf("ids delivered twice: %v", twice)
	}
	rcv.mu.Lock()
	requests, bad := rcv.requests, rcv.badSig
	rcv.mu.Unlock()
	if bad > 0 {
		t.Errorf("%d requests with a bad signature", bad)
	}
	if requests != 6 {
		t.Errorf("%d requests, want 6 (two failures, four events)", requests)
	}
	if v := sample(t, s.httpURL, `finalizer_action_retries_total{action="webhook",kind="webhook"}`); v != 2 {
		t.Errorf("retries metric %v, want 2", v)
	}
	if v := sample(t, s.httpURL, `finalizer_action_lag_seconds_count{action="webhook",kind="webhook"}`); v != 4 {
		t.Errorf("lag observations %v, want 4", v)
	}
}

// TestActionsBadConfig: an unknown action, a missing secret, a marker
// directory that cannot be written are startup errors naming the field.
func TestActionsBadConfig(t *testing.T) {
	pgURL := pgtest.URL(t)
	readOnly := filepath.Join(t.TempDir(), "ro")
	if err := os.MkdirAll(readOnly, 0o555); err != nil {
		t.Fatal(err)
	}
	if os.Geteuid() == 0 {
		// root writes into a read-only directory; not into /proc.
		readOnly = "/proc/finalizer-actions-test"
	}
	notDir := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(notDir, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name, item string
		env        []string
		want       []string
	}{
		{"unknown kind", `      - kafka: {topic: x}`, nil, []string{`unknown key "kafka"`, "tables[0].actions[0]"}},
		{"no kind", `      - name: x`, nil, []string{"tables[0].actions[0]", "no kind"}},
		{"two kinds", `      - {nats: {}, marker: {path: /tmp/x}}`, nil, []string{"tables[0].actions[0]", "nats and marker"}},
		{"missing secret", `      - webhook: {url: "http://127.0.0.1:1/", secret_env: NOT_SET_ANYWHERE}`, nil,
			[]string{"tables[0].actions[0].webhook.secret_env", "NOT_SET_ANYWHERE"}},
		{"no secret_env", `      - webhook: {url: "http://127.0.0.1:1/"}`, nil, []string{"tables[0].actions[0].webhook.secret_env", "required"}},
		{"bad url", `      - webhook: {url: "ftp://x/", secret_env: S}`, []string{"S=x"}, []string{"tables[0].actions[0].webhook.url"}},
		{"unwritable marker dir", `      - marker: {path: "` + readOnly + `/{table}/_SUCCESS"}`, nil, []string{"tables[0].actions[0].marker.path", readOnly}},
		{"marker under a file", `      - marker: {path: "` + notDir + `/{table}/_SUCCESS"}`, nil, []string{"tables[0].actions[0].marker.path", notDir}},
		{"unknown placeholder", `      - marker: {path: "/tmp/{tabel}/_SUCCESS"}`, nil, []string{"tables[0].actions[0].marker.path", "placeholder"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			cfg := filepath.Join(dir, "finalizer.yaml")
			if err := os.WriteFile(cfg, []byte(actionsConfig(c.item)), 0o644); err != nil {
				t.Fatal(err)
			}
			code, _, stderr := cli(t, c.env, "serve", "--config", cfg, "--data-dir", dir, "--postgres-url", pgURL,
				"--nats-listen", "127.0.0.1:0", "--http-listen", "off")
			if code != 2 {
				t.Fatalf("exit %d, want 2 (a usage error)\n%s", code, stderr)
			}
			for _, w := range c.want {
				if !strings.Contains(stderr, w) {
					t.Errorf("stderr lacks %q:\n%s", w, stderr)
				}
			}
		})
	}
}

// expandLock is the advisory lock the service's expansion of the outbox
// takes (control.Outbox.Expand): held by a test, the moves stay in the
// outbox, committed with their verdicts and not yet expanded.
func expandLock() int64 {
	h := fnv.New64a()
	h.Write([]byte(`finalizer actions expand "public"."table_finalization"`))
	return int64(h.Sum64())
}

// countRows counts the rows of a query.
func countRows(t *testing.T, pgURL, query string, args ...any) int {
	t.Helper()
	conn, err := pgx.Connect(context.Background(), pgURL)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	var n int
	if err := conn.QueryRow(context.Background(), query, args...).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// TestActionsKillBetweenCommitAndDelivery kills the service (SIGKILL)
// twice between verdict commits and their deliveries: first with the
// moves committed and not yet expanded (the test holds the expansion's
// lock), then with their events queued and failing (the receiver is
// down). After each restart every event is delivered, none is lost, none
// arrives twice by id, on the webhook and on the NATS stream.
func TestActionsKillBetweenCommitAndDelivery(t *testing.T) {
	ctx := context.Background()
	pgURL := pgtest.URL(t)
	rcv := newReceiver(t, 0)
	cfg := actionsConfig(`      - nats: {}`,
		`      - webhook: {url: "`+rcv.srv.URL+`", secret_env: TEST_WEBHOOK_SECRET, initial_interval: 50ms, max_interval: 200ms, max_attempts: 100000}`)
	env := []string{"TEST_WEBHOOK_SECRET=" + webhookSecret}
	dataDir := t.TempDir()
	s := startServe(t, serveOpts{pgURL: pgURL, dataDir: dataDir, env: env, config: cfg})

	// 1. The moves are committed; the expansion is held off.
	lock, err := pgx.Connect(ctx, pgURL)
	if err != nil {
		t.Fatal(err)
	}
	defer lock.Close(ctx)
	if _, err := lock.Exec(ctx, "SELECT pg_advisory_lock($1)", expandLock()); err != nil {
		t.Fatal(err)
	}
	pub := connect(t, s.natsURL)
	pub.publish("started", queryA, runA, startedJSON(queryA, runA, "orders-v1"))
	pub.publish("progress", queryA, runA, cdcProgressJSON(queryA, runA, "orders-v1", "2026-09-28T12:10:00"))
	waitVerdict(t, pgURL, "bronze.orders", "2026-09-28T12:00:00Z")
	pub.publish("progress", queryA, runA, cdcProgressJSON(queryA, runA, "orders-v1", "2026-09-28T15:20:00"))
	waitVerdict(t, pgURL, "bronze.orders", "2026-09-28T15:00:00Z")
	if n := countRows(t, pgURL, "SELECT count(*) FROM public.table_finalization_outbox"); n != 2 {
		t.Fatalf("%d moves in the outbox, want 2 (committed with the verdicts)", n)
	}
	s.kill()
	if evs, _ := rcv.accepted(); len(evs) != 0 {
		t.Fatalf("delivered before the kill: %s", periods(evs))
	}
	if _, err := lock.Exec(ctx, "SELECT pg_advisory_unlock($1)", expandLock()); err != nil {
		t.Fatal(err)
	}
	s = startServe(t, serveOpts{pgURL: pgURL, dataDir: dataDir, env: env, config: cfg})
	eventually(t, "the four events after the restart", func() bool { evs, _ := rcv.accepted(); return len(evs) >= 4 })

	// 2. The events are queued; the receiver fails them.
	rcv.setDown(true)
	pub = connect(t, s.natsURL)
	pub.publish("started", queryA, runB, startedAtJSON(queryA, runB, "orders-v1", "2026-09-28T15:30:00"))
	pub.publish("progress", queryA, runB, cdcProgressJSON(queryA, runB, "orders-v1", "2026-09-28T17:20:00"))
	waitVerdict(t, pgURL, "bronze.orders", "2026-09-28T17:00:00Z")
	eventually(t, "the new events tried and failed", func() bool {
		return countRows(t, pgURL, "SELECT count(*) FROM public.table_finalization_sends WHERE action LIKE 'webhook:%' AND state = 'pending' AND attempts > 0") == 1
	})
	s.kill()
	rcv.setDown(false)
	s = startServe(t, serveOpts{pgURL: pgURL, dataDir: dataDir, env: env, config: cfg})
	eventually(t, "all six events", func() bool { evs, _ := rcv.accepted(); return len(evs) >= 6 })
	evs, twice := rcv.accepted()
	if got := periods(evs); got != "11:00 12:00 13:00 14:00 15:00 16:00" {
		t.Errorf("webhook periods %q", got)
	}
	if len(twice) > 0 {
		t.Errorf("ids delivered twice: %v", twice)
	}
	var stream []actions.Event
	eventually(t, "six NATS events", func() bool {
		stream = finalStream(t, s.natsURL, "finalizer.api.final.bronze.orders")
		return len(stream) >= 6
	})
	if got := periods(stream); got != "11:00 12:00 13:00 14:00 15:00 16:00" {
		t.Errorf("nats periods %q", got)
	}
	for i := range stream {
		if i < len(evs) && stream[i].ID != evs[i].ID {
			t.Errorf("event %d: ids differ between nats and webhook", i)
		}
	}
	if n := countRows(t, pgURL, "SELECT count(*) FROM public.table_finalization_sends WHERE state <> 'delivered'"); n != 0 {
		t.Errorf("%d events not delivered", n)
	}
}

// TestActionsTwoReplicas runs two replicas on one PostgreSQL and one NATS,
// both tracking the same ten queries: every event is delivered once by id
// (the webhook receiver counts), in order per table.
func TestActionsTwoReplicas(t *testing.T) {
	pgURL := pgtest.URL(t)
	rcv := newReceiver(t, 0)
	cfg := `
tables:
  - table: "bronze.{name}"
    query: "cdc_*"
    actions:
      - nats: {}
      - webhook: {url: "` + rcv.srv.URL + `", secret_env: TEST_WEBHOOK_SECRET, initial_interval: 50ms}
`
	env := []string{"TEST_WEBHOOK_SECRET=" + webhookSecret}
	a := startServe(t, serveOpts{pgURL: pgURL, env: env, config: cfg})
	b := startServe(t, serveOpts{pgURL: pgURL, env: env, config: cfg, natsURL: a.natsURL})
	pub := connect(t, a.natsURL)
	const n = 10
	for i := range n {
		q, r := fmt.Sprintf("00000000-0000-4000-8000-%012d", i), fmt.Sprintf("00000000-0000-4000-9000-%012d", i)
		name := fmt.Sprintf("cdc_%d", i)
		pub.publish("started", q, r, startedJSON(q, r, name))
		pub.publish("progress", q, r, cdcProgressJSON(q, r, name, "2026-09-28T12:10:00"))
	}
	for i := range n {
		waitVerdict(t, pgURL, fmt.Sprintf("bronze.cdc_%d", i), "2026-09-28T12:00:00Z")
	}
	for i := range n {
		q, r := fmt.Sprintf("00000000-0000-4000-8000-%012d", i), fmt.Sprintf("00000000-0000-4000-9000-%012d", i)
		pub.publish("progress", q, r, cdcProgressJSON(q, r, fmt.Sprintf("cdc_%d", i), "2026-09-28T15:20:00"))
	}
	eventually(t, "every event", func() bool { evs, _ := rcv.accepted(); return len(evs) >= 4*n })
	evs, twice := rcv.accepted()
	if len(evs) != 4*n || len(twice) > 0 {
		t.Fatalf("%d events (want %d), ids delivered twice: %v", len(evs), 4*n, twice)
	}
	byTable := map[string][]actions.Event{}
	for _, e := range evs {
		byTable[e.Table] = append(byTable[e.Table], e)
	}
	for table, es := range byTable {
		if got := periods(es); got != "11:00 12:00 13:00 14:00" {
			t.Errorf("%s: periods %q", table, got)
		}
	}
	total := 0.0
	for _, p := range []*proc{a, b} {
		total += sample(t, p.httpURL, `finalizer_action_delivered_total{action="webhook",kind="webhook"}`)
	}
	if total != 4*n {
		t.Errorf("the replicas delivered %v webhook events between them, want %d", total, 4*n)
	}
	// The NATS action is dispatched apart from the webhook: its last
	// event may still be on its way when the webhook's have all arrived.
	var got int
	eventually(t, "the NATS events of bronze.cdc_0", func() bool {
		got = len(finalStream(t, a.natsURL, "finalizer.api.final.bronze.cdc_0"))
		return got >= 4
	})
	if got != 4 {
		t.Errorf("%d NATS events of bronze.cdc_0, want 4", got)
	}
}

// TestActionsStuckIsVisible: a webhook that keeps failing is a stuck
// action in `finalizer status`, in /v1/tables/{t} and in the metrics;
// one out of attempts is dead-lettered and counted.
func TestActionsStuckIsVisible(t *testing.T) {
	pgURL := pgtest.URL(t)
	rcv := newReceiver(t, 0)
	rcv.setDown(true)
	s := startServe(t, serveOpts{pgURL: pgURL, env: []string{"TEST_WEBHOOK_SECRET=" + webhookSecret}, config: actionsConfig(
		`      - name: patient
        webhook: {url: "`+rcv.srv.URL+`/a", secret_env: TEST_WEBHOOK_SECRET, initial_interval: 50ms, max_interval: 100ms, max_attempts: 100000}`,
		`      - name: fragile
        webhook: {url: "`+rcv.srv.URL+`/b", secret_env: TEST_WEBHOOK_SECRET, initial_interval: 50ms, max_attempts: 2}`,
	)})
	pub := connect(t, s.natsURL)
	pub.publish("started", queryA, runA, startedJSON(queryA, runA, "orders-v1"))
	pub.publish("progress", queryA, runA, cdcProgressJSON(queryA, runA, "orders-v1", "2026-09-28T12:10:00"))
	waitVerdict(t, pgURL, "bronze.orders", "2026-09-28T12:00:00Z")
	eventually(t, "the fragile webhook's event dead-lettered", func() bool {
		return sample(t, s.httpURL, `finalizer_action_dead_lettered_total{action="fragile",kind="webhook"}`) == 1
	})
	var st struct {
		Actions []struct {
			Action, Name string
			LastError    string `json:"last_error"`
			Pending      int
			Attempts     int
			Dead         int
			Stuck        bool
		} `json:"actions"`
	}
	eventually(t, "the stuck action in /v1/tables/bronze.orders", func() bool {
		getJSON(t, s.httpURL+"/v1/tables/bronze.orders", &st)
		for _, a := range st.Actions {
			if a.Name == "patient" && a.Stuck && a.Pending == 1 && a.Attempts > 0 && strings.Contains(a.LastError, "HTTP 500") {
				return true
			}
		}
		return false
	})
	code, out, _ := cli(t, nil, "status", "--postgres-url", pgURL, "--http-url", s.httpURL)
	if code != 0 || !strings.Contains(out, "ACTION STUCK bronze.orders webhook:") || !strings.Contains(out, "HTTP 500") ||
		!strings.Contains(out, "1 events dead-lettered") {
		t.Errorf("status (exit %d) does not show the stuck and the dead-lettered action:\n%s", code, out)
	}
	if v := sample(t, s.httpURL, `finalizer_action_pending{action="patient",kind="webhook"}`); v != 1 {
		t.Errorf("pending metric %v, want 1", v)
	}
	if v := sample(t, s.httpURL, `finalizer_action_oldest_pending_seconds{action="patient",kind="webhook"}`); v <= 0 {
		t.Errorf("oldest pending %v, want > 0", v)
	}
	if v := sample(t, s.httpURL, `finalizer_action_dead{action="fragile",kind="webhook"}`); v != 1 {
		t.Errorf("dead metric %v, want 1", v)
	}
	// Once the receiver is back, the stuck action catches up.
	rcv.setDown(false)
	eventually(t, "the patient webhook's event", func() bool { evs, _ := rcv.accepted(); return len(evs) == 1 })
}

// TestActionsRewindAnnouncesAgain: after an operator's rewind (ADR 0019),
// the periods that become final again are announced again, with new ids
// and the flag that says so; pending events of the rewound periods are
// not delivered.
func TestActionsRewindAnnouncesAgain(t *testing.T) {
	pgURL := pgtest.URL(t)
	rcv := newReceiver(t, 0)
	s := startServe(t, serveOpts{pgURL: pgURL, env: []string{"TEST_WEBHOOK_SECRET=" + webhookSecret}, config: actionsConfig(webhookItem(rcv.srv.URL))})
	pub := connect(t, s.natsURL)
	pub.publish("started", queryA, runA, startedJSON(queryA, runA, "orders-v1"))
	pub.publish("progress", queryA, runA, cdcProgressJSON(queryA, runA, "orders-v1", "2026-09-28T12:10:00"))
	waitVerdict(t, pgURL, "bronze.orders", "2026-09-28T12:00:00Z")
	pub.publish("progress", queryA, runA, cdcProgressJSON(queryA, runA, "orders-v1", "2026-09-28T15:20:00"))
	eventually(t, "four events", func() bool { evs, _ := rcv.accepted(); return len(evs) >= 4 })
	if code, out, e := cli(t, nil, "rewind", "--table", "bronze.orders", "--to", "2026-09-28T13:00:00Z", "--reason", "test", "--by", "test",
		"--postgres-url", pgURL); code != 0 {
		t.Fatalf("rewind: %d %s %s", code, out, e)
	}
	eventually(t, "the rewind", func() bool {
		return countRows(t, pgURL, "SELECT count(*) FROM public.table_finalization WHERE table_name = 'bronze.orders' AND finalized_until = '2026-09-28T13:00:00Z'") == 1
	})
	pub.publish("progress", queryA, runA, cdcProgressJSON(queryA, runA, "orders-v1", "2026-09-28T16:20:00"))
	waitVerdict(t, pgURL, "bronze.orders", "2026-09-28T16:00:00Z")
	eventually(t, "seven events", func() bool { evs, _ := rcv.accepted(); return len(evs) >= 7 })
	evs, twice := rcv.accepted()
	if got := periods(evs); got != "11:00 12:00 13:00 14:00 13:00 14:00 15:00" || len(twice) > 0 {
		t.Fatalf("periods %q, twice %v", got, twice)
	}
	for i, e := range evs {
		again, gen := i == 4 || i == 5, int64(0)
		if i >= 4 {
			gen = 1
		}
		if e.Again != again || e.Generation != gen {
			t.Errorf("event %d (%s): again %v generation %d, want %v %d", i, e.PeriodStart.Format("15:04"), e.Again, e.Generation, again, gen)
		}
	}
	if evs[4].ID == evs[2].ID {
		t.Error("a period announced again kept its id")
	}
}

// TestActionsHangingWebhooksDoNotStallOthers: webhooks whose receivers
// hang (more than the outbox's default pool, each holding its delivery's
// transaction for its timeout) must not hold the table's other actions nor
// the expansion of its next moves: the marker and the NATS event of the
// next period arrive while the webhooks wait, and the scrape-time gauges
// still answer.
func TestActionsHangingWebhooksDoNotStallOthers(t *testing.T) {
	pgURL := pgtest.URL(t)
	release := make(chan struct{})
	var inFlight atomic.Int32
	hang := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		inFlight.Add(1)
		select {
		case <-release:
		case <-r.Context().Done():
		}
		w.WriteHeader(http.StatusServiceUnavailable)
	}))
	t.Cleanup(hang.Close)
	t.Cleanup(func() { close(release) })
	markers := t.TempDir()
	items := []string{`      - nats: {}`, `      - marker: {path: "` + markers + `/{table}/{period}/_SUCCESS"}`}
	hooks := int32(control.DefaultOutboxConns + 1)
	for i := range hooks {
		items = append(items, fmt.Sprintf(`      - name: hang%d
        webhook: {url: "%s/%d", secret_env: TEST_WEBHOOK_SECRET, timeout: 2m}`, i, hang.URL, i))
	}
	s := startServe(t, serveOpts{pgURL: pgURL, env: []string{"TEST_WEBHOOK_SECRET=" + webhookSecret}, config: actionsConfig(items...)})
	pub := connect(t, s.natsURL)
	pub.publish("started", queryA, runA, startedJSON(queryA, runA, "orders-v1"))
	pub.publish("progress", queryA, runA, cdcProgressJSON(queryA, runA, "orders-v1", "2026-09-28T12:10:00"))
	waitVerdict(t, pgURL, "bronze.orders", "2026-09-28T12:00:00Z")
	eventually(t, "the webhooks hanging", func() bool { return inFlight.Load() >= int32(control.DefaultOutboxConns) })
	pub.publish("progress", queryA, runA, cdcProgressJSON(queryA, runA, "orders-v1", "2026-09-28T13:10:00"))
	waitVerdict(t, pgURL, "bronze.orders", "2026-09-28T13:00:00Z")
	eventually(t, "the next period's marker while the webhooks hang", func() bool {
		_, err := os.Stat(filepath.Join(markers, "bronze.orders", "2026-09-28T12", "_SUCCESS"))
		return err == nil
	})
	eventually(t, "the next period's NATS event while the webhooks hang", func() bool {
		return len(finalStream(t, s.natsURL, "finalizer.api.final.bronze.orders")) == 2
	})
	if v := sample(t, s.httpURL, `finalizer_action_pending{action="hang0",kind="webhook"}`); v != 2 {
		t.Errorf("pending of a hanging webhook %v, want 2", v)
	}
}

// TestActionsRewindWithdrawsMarkers: a rewind removes the markers of the
// periods it takes back (a _SUCCESS left on disk told a Spark or Hive job
// that a period was final after the rewind said it was not), before the
// periods are announced, and marked, again.
func TestActionsRewindWithdrawsMarkers(t *testing.T) {
	pgURL := pgtest.URL(t)
	markers := t.TempDir()
	s := startServe(t, serveOpts{pgURL: pgURL, config: actionsConfig(`      - marker: {path: "` + markers + `/{table}/{period}/_SUCCESS"}`)})
	pub := connect(t, s.natsURL)
	marker := func(hour string) string {
		return filepath.Join(markers, "bronze.orders", "2026-09-28T"+hour, "_SUCCESS")
	}
	exists := func(hour string) bool { _, err := os.Stat(marker(hour)); return err == nil }
	pub.publish("started", queryA, runA, startedJSON(queryA, runA, "orders-v1"))
	pub.publish("progress", queryA, runA, cdcProgressJSON(queryA, runA, "orders-v1", "2026-09-28T12:10:00"))
	waitVerdict(t, pgURL, "bronze.orders", "2026-09-28T12:00:00Z")
	pub.publish("progress", queryA, runA, cdcProgressJSON(queryA, runA, "orders-v1", "2026-09-28T15:20:00"))
	eventually(t, "the markers of 11:00 to 14:00", func() bool {
		return exists("11") && exists("12") && exists("13") && exists("14")
	})
	if code, out, e := cli(t, nil, "rewind", "--table", "bronze.orders", "--to", "2026-09-28T13:00:00Z", "--reason", "test", "--by", "test",
		"--postgres-url", pgURL); code != 0 {
		t.Fatalf("rewind: %d %s %s", code, out, e)
	}
	eventually(t, "the markers of 13:00 and 14:00 withdrawn", func() bool { return !exists("13") && !exists("14") })
	if !exists("11") || !exists("12") {
		t.Fatal("a rewind to 13:00 removed a marker of a period still final")
	}
	pub.publish("progress", queryA, runA, cdcProgressJSON(queryA, runA, "orders-v1", "2026-09-28T14:20:00"))
	waitVerdict(t, pgURL, "bronze.orders", "2026-09-28T14:00:00Z")
	eventually(t, "the 13:00 marker again", func() bool { return exists("13") })
	raw, err := os.ReadFile(marker("13"))
	if err != nil {
		t.Fatal(err)
	}
	var ev actions.Event
	if err := json.Unmarshal(raw, &ev); err != nil || !ev.Again || ev.Withdrawn || ev.Generation != 1 {
		t.Errorf("the 13:00 marker again: %s (%v)", raw, err)
	}
	time.Sleep(500 * time.Millisecond)
	if exists("14") {
		t.Error("the 14:00 marker is back before its period is final again")
	}
}
