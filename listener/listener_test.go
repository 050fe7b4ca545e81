package listener_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/finalizer-dev/finalizer/internal/embeddednats"
	"github.com/finalizer-dev/finalizer/listener"
	"github.com/finalizer-dev/finalizer/progress"
)

func TestSubscribeDeliversOnlyItsRun(t *testing.T) {
	srv := startNATS(t)
	q, run, other, otherQuery := uuid(1, 0), uuid(1, 1), uuid(1, 2), uuid(2, 0)
	var mu sync.Mutex
	var parsed [][]byte
	events := newCounter()
	l := dial(t, srv.ClientURL(), listener.Options{OnEvent: events.onEvent})
	listener.SetParse(l, func(data []byte, k progress.Kind) (*progress.Event, error) {
		mu.Lock()
		parsed = append(parsed, bytes.Clone(data))
		mu.Unlock()
		return progress.Parse(data, k)
	})
	box := listener.NewMailbox()
	sub, err := l.Subscribe(q, run, box)
	if err != nil {
		t.Fatalf("Subscribe: %v", err)
	}
	defer sub.Unsubscribe()

	pub := dial(t, srv.ClientURL(), listener.Options{})
	publish(t, pub, progress.KindProgress, q, other, "orders", 100)
	publish(t, pub, progress.KindTerminated, q, other, "", 0)
	publish(t, pub, progress.KindProgress, otherQuery, uuid(2, 1), "other", 200)
	publish(t, pub, progress.KindProgress, q, run, "orders", 1)
	publish(t, pub, progress.KindIdle, q, run, "", 0)

	c := newCollector(box)
	c.waitFor(t, "batch 1 and idle", func(c *collector) bool { return c.last() == 1 && c.idle > 0 })
	if c.terminated != nil {
		t.Fatalf("another run's termination reached the box: %+v", c.terminated)
	}
	// Nothing of the other runs reached the callback, not even to be
	// rejected.
	if n := countAll(events); n != 2 {
		t.Errorf("%d events handled, want 2 (this run's only): %v", n, events)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(parsed) != 2 {
		t.Errorf("parsed %d payloads, want 2 (this run's only)", len(parsed))
	}
	for _, p := range parsed {
		if bytes.Contains(p, []byte(other)) || bytes.Contains(p, []byte(otherQuery)) {
			t.Errorf("another run's payload was parsed: %s", p)
		}
	}
}

func TestSubscribeKeepsNewestUnderBurst(t *testing.T) {
	srv := startNATS(t)
	q, run := uuid(3, 0), uuid(3, 1)
	events := newCounter()
	l := dial(t, srv.ClientURL(), listener.Options{OnEvent: events.onEvent})
	if err := l.EnsureStream(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	box := listener.NewMailbox()
	sub, err := l.Subscribe(q, run, box)
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()

	const n = 2000
	c := newCollector(box)
	done := make(chan struct{})
	go func() { // a slow worker
		defer close(done)
		deadline := time.After(waitTimeout)
		for c.last() != n-1 {
			select {
			case <-box.Wake():
				c.take()
			case <-deadline:
				return
			}
		}
	}()
	nc := rawConn(t, srv.ClientURL())
	for b := int64(0); b < n; b++ {
		if err := nc.Publish("spark.progress."+q+"."+run, progressJSON(q, run, "burst", b)); err != nil {
			t.Fatal(err)
		}
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	<-done
	if c.last() != n-1 {
		t.Fatalf("last batch taken = %d, want %d", c.batches[len(c.batches)-1], n-1)
	}
	for i := 1; i < len(c.batches); i++ {
		if c.batches[i] <= c.batches[i-1] {
			t.Fatalf("batch %d taken after %d", c.batches[i], c.batches[i-1])
		}
	}
	// Each message is parsed or, replaced in the slot before the worker
	// took it, counted as superseded without a parse (ADR 0011).
	eventually(t, "every message counted", func() bool {
		return events.get("progress/accepted")+events.get("progress/superseded") == n
	})
	t.Logf("%d progress messages, %d takes, %d parsed, %d superseded unparsed", n, len(c.batches),
		events.get("progress/accepted"), events.get("progress/superseded"))
}

// A burst that lands while the worker is busy is parsed once: the newest.
func TestSubscribeParsesOnlyTheNewestOfABurst(t *testing.T) {
	srv := startNATS(t)
	q, run := uuid(3, 2), uuid(3, 3)
	events := newCounter()
	l := dial(t, srv.ClientURL(), listener.Options{OnEvent: events.onEvent})
	var parsed atomic.Int64
	listener.SetParse(l, func(data []byte, k progress.Kind) (*progress.Event, error) {
		parsed.Add(1)
		return progress.Parse(data, k)
	})
	box := listener.NewMailbox()
	sub, err := l.Subscribe(q, run, box)
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	const n = 100
	nc := rawConn(t, srv.ClientURL())
	for b := int64(0); b < n; b++ {
		rawPublish(t, nc, "spark.progress."+q+"."+run, progressJSON(q, run, "burst", b))
	}
	// All but the newest and the ones it replaced that are kept in case
	// the newest fails its parse are superseded unparsed.
	eventually(t, "the burst delivered", func() bool { return events.get("progress/superseded") == n-1-listener.MaxFallbacks })
	if p := parsed.Load(); p != 0 {
		t.Fatalf("%d payloads parsed before the worker took one, want 0", p)
	}
	m := box.Take()
	if m.Progress == nil || m.Progress.BatchID != n-1 {
		t.Fatalf("took %+v, want batch %d", m.Progress, n-1)
	}
	if p, a := parsed.Load(), events.get("progress/accepted"); p != 1 || a != 1 {
		t.Errorf("%d parsed, %d accepted; want the newest only", p, a)
	}
	if s := events.get("progress/superseded"); s != n-1 {
		t.Errorf("%d superseded after the take, want %d", s, n-1)
	}
}

func TestLateSubscribeRecoversFromStream(t *testing.T) {
	srv := startNATS(t)
	q, run := uuid(4, 0), uuid(4, 1)
	l := dial(t, srv.ClientURL(), listener.Options{})
	if err := l.EnsureStream(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	publish(t, l, progress.KindStarted, q, run, "late", 0)
	for b := int64(1); b <= 3; b++ {
		publish(t, l, progress.KindProgress, q, run, "late", b)
	}
	publish(t, l, progress.KindTerminated, q, run, "", 0)

	box := listener.NewMailbox()
	sub, err := l.Subscribe(q, run, box)
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	// The catch-up is done when Subscribe returns.
	m := box.Take()
	if m.Progress == nil || m.Progress.BatchID != 3 {
		t.Fatalf("recovered progress = %+v, want batch 3", m.Progress)
	}
	if m.Terminated == nil || m.Terminated.RunID != run {
		t.Fatalf("recovered termination = %+v, want the run's", m.Terminated)
	}
}

func TestCatchUpWindowLosesNothing(t *testing.T) {
	srv := startNATS(t)
	q, run := uuid(5, 0), uuid(5, 1)
	events := newCounter()
	l := dial(t, srv.ClientURL(), listener.Options{OnEvent: events.onEvent})
	if err := l.EnsureStream(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	publish(t, l, progress.KindProgress, q, run, "window", 1)
	nc := rawConn(t, srv.ClientURL())
	subj := "spark.progress." + q + "." + run
	listener.SetAfterFlush(l, func() {
		// The server has the live subscription by now: a request on a
		// subject only it matches (the stream does not) finds a responder
		// that never answers, instead of "no responders".
		_, err := nc.Request("spark.probe."+q+"."+run, []byte("probe"), 200*time.Millisecond)
		if !errors.Is(err, nats.ErrTimeout) {
			t.Errorf("probe request: err = %v, want a timeout (subscription not active yet?)", err)
		}
		// Then batch 2 and a replay of batch 1, before the stream is read.
		// The stream keeps only the replay, so batch 2 can only arrive
		// through the live subscription, and the older replay read back
		// must not hide it.
		rawPublish(t, nc, subj, progressJSON(q, run, "window", 2))
		rawPublish(t, nc, subj, progressJSON(q, run, "window", 1))
	})
	box := listener.NewMailbox()
	sub, err := l.Subscribe(q, run, box)
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	// Two live messages and one read from the stream: the live replay of
	// batch 1, older than the live batch 2 waiting unparsed, is superseded
	// once batch 2 is checked (ADR 0011).
	eventually(t, "three messages handled", func() bool {
		return events.get("progress/accepted")+events.get("progress/superseded") == 3
	})
	c := newCollector(box)
	c.take()
	if c.last() != 2 {
		t.Fatalf("batches taken = %v, want batch 2 last", c.batches)
	}
}

func TestBadMessagesAreDroppedAndCounted(t *testing.T) {
	srv := startNATS(t)
	q, run := uuid(6, 0), uuid(6, 1)
	events := newCounter()
	clock := newFakeClock()
	core, logs := observer.New(zapcore.WarnLevel)
	l := dial(t, srv.ClientURL(), listener.Options{
		OnEvent: events.onEvent, MaxPayload: 4096, Now: clock.Now, Logger: zap.New(core),
	})
	box := listener.NewMailbox()
	sub, err := l.Subscribe(q, run, box)
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()

	nc := rawConn(t, srv.ClientURL())
	subj := func(kind, query string) string { return "spark." + kind + "." + query + "." + run }
	big := progressJSON(q, run, strings.Repeat("x", 8192), 9)
	cases := []struct {
		subject string
		data    []byte
	}{
		{subj("progress", q), []byte(`{"id": "not json`)},                                           // malformed
		{subj("progress", q), big},                                                                  // malformed: too large
		{subj("bogus", q), progressJSON(q, run, "n", 9)},                                            // malformed: kind token
		{subj("progress", q), progressJSON(q, uuid(6, 2), "n", 9)},                                  // mismatch: payload run id
		{subj("progress", uuid(6, 9)), progressJSON(uuid(6, 9), run, "n", 9)},                       // mismatch: query token
		{subj("progress", q), []byte(`{"Event":"x.StreamingQueryListener$QueryIdleEvent"}`)},        // mismatch: kind
		{subj("progress", q), []byte(`{"Event":"org.apache.spark.scheduler.SparkListenerJobEnd"}`)}, // ignored
		{subj("progress", q), progressJSON(q, run, "good", 7)},                                      // accepted
	}
	for _, tc := range cases {
		rawPublish(t, nc, tc.subject, tc.data)
	}
	c := newCollector(box)
	c.waitFor(t, "the good batch 7", func(c *collector) bool { return c.last() == 7 })
	eventually(t, "all counted", func() bool { return countAll(events) == len(cases) })
	want := map[string]int{
		"progress/malformed": 2, "unknown/malformed": 1, "progress/mismatch": 3,
		"progress/ignored": 1, "progress/accepted": 1,
	}
	for k, v := range want {
		if got := events.get(k); got != v {
			t.Errorf("%s = %d, want %d (all: %v)", k, got, v, events)
		}
	}
	if c.last() != 7 || len(c.batches) != 1 {
		t.Errorf("batches taken = %v, want [7]", c.batches)
	}
	// One warning per class: progress/malformed twice gave one line.
	if n := logs.FilterField(zap.String("outcome", "malformed")).FilterField(zap.String("kind", "progress")).Len(); n != 1 {
		t.Errorf("%d malformed/progress warnings, want 1", n)
	}
	// Within the interval a third one is suppressed; after it, the next
	// line reports what was suppressed.
	rawPublish(t, nc, subj("progress", q), []byte(`nope`))
	eventually(t, "third malformed counted", func() bool { return events.get("progress/malformed") == 3 })
	clock.Add(listener.DefaultWarnEvery)
	rawPublish(t, nc, subj("progress", q), []byte(`nope`))
	eventually(t, "fourth malformed counted", func() bool { return events.get("progress/malformed") == 4 })
	lines := logs.FilterField(zap.String("outcome", "malformed")).FilterField(zap.String("kind", "progress")).All()
	if len(lines) != 2 {
		t.Fatalf("%d malformed/progress warnings, want 2", len(lines))
	}
	if got := lines[1].ContextMap()["suppressed"]; got != int64(2) {
		t.Errorf("suppressed = %v, want 2", got)
	}
}

func countAll(c *counter) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for _, v := range c.n {
		n += v
	}
	return n
}

func TestDiscover(t *testing.T) {
	srv := startNATS(t)
	q := uuid(7, 0)
	knownRun, startedRun, idleRun, doneRun := uuid(7, 1), uuid(7, 2), uuid(7, 3), uuid(7, 4)
	l := dial(t, srv.ClientURL(), listener.Options{})
	if err := l.EnsureStream(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	// Retained before discovery starts: the idle run's name comes from it.
	publish(t, l, progress.KindStarted, q, idleRun, "idle-query", 0)

	var parsedKnown atomic.Int64
	listener.SetParse(l, func(data []byte, k progress.Kind) (*progress.Event, error) {
		if bytes.Contains(data, []byte(knownRun)) {
			parsedKnown.Add(1)
		}
		return progress.Parse(data, k)
	})
	var mu sync.Mutex
	found := map[string]listener.Run{}
	known := func(runID string) bool { return runID == knownRun }
	sub, err := l.Discover(known, func(r listener.Run) {
		mu.Lock()
		found[r.RunID] = r
		mu.Unlock()
	})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()

	for b := int64(0); b < 50; b++ {
		publish(t, l, progress.KindProgress, q, knownRun, "known", b)
	}
	publish(t, l, progress.KindStarted, q, startedRun, "orders-v1", 0)
	publish(t, l, progress.KindIdle, q, idleRun, "", 0)
	publish(t, l, progress.KindTerminated, q, doneRun, "", 0)

	eventually(t, "three runs found", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(found) == 3
	})
	mu.Lock()
	defer mu.Unlock()
	want := map[string]listener.Run{
		startedRun: {QueryID: q, RunID: startedRun, Name: "orders-v1", Kind: progress.KindStarted},
		// An idle event carries no name; discovery does not look it up on
		// the delivering goroutine (the registry does, off it).
		idleRun: {QueryID: q, RunID: idleRun, Kind: progress.KindIdle},
		doneRun: {QueryID: q, RunID: doneRun, Kind: progress.KindTerminated, Terminated: true},
	}
	for id, w := range want {
		got := found[id]
		if got.Event == nil || got.Event.RunID != id || got.Event.Kind != w.Kind {
			t.Errorf("found %s carries event %+v, want the %s event that revealed it", id, got.Event, w.Kind)
		}
		got.Event = nil
		if got != w {
			t.Errorf("found %s = %+v, want %+v", id, got, w)
		}
	}
	if _, ok := found[knownRun]; ok {
		t.Error("a known run was reported")
	}
	if n := parsedKnown.Load(); n != 0 {
		t.Errorf("a known run's events were parsed %d times, want 0", n)
	}
}

func TestRetained(t *testing.T) {
	srv := startNATS(t)
	l := dial(t, srv.ClientURL(), listener.Options{})
	if _, err := l.Retained(ctxT(t)); !errors.Is(err, listener.ErrNoStream) {
		t.Fatalf("Retained before EnsureStream: err = %v, want ErrNoStream", err)
	}
	if err := l.EnsureStream(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	qa, qb := uuid(8, 0), uuid(9, 0)
	running, done, idleOnly := uuid(8, 1), uuid(9, 1), uuid(8, 2)
	publish(t, l, progress.KindStarted, qa, running, "old-name", 0)
	publish(t, l, progress.KindProgress, qa, running, "orders", 4)
	publish(t, l, progress.KindStarted, qb, done, "cdc_users", 0)
	publish(t, l, progress.KindTerminated, qb, done, "", 0)
	publish(t, l, progress.KindIdle, qa, idleOnly, "", 0)
	// A subject of the wrong shape that the stream captures anyway.
	rawPublish(t, rawConn(t, srv.ClientURL()), "spark.progress.a.b.c", []byte(`{}`))

	before := time.Now()
	runs, err := l.Retained(ctxT(t))
	if err != nil {
		t.Fatal(err)
	}
	// Stored: when the stream stored each run's newest event (the
	// server's clock, the test's too).
	// Seq: the newest event's stream sequence (the stream holds six).
	stored := map[string]time.Time{}
	seqs := map[string]uint64{}
	for i, r := range runs {
		if r.Stored.IsZero() || r.Stored.After(before) || before.Sub(r.Stored) > time.Minute {
			t.Errorf("%s: stored at %v, want a moment before %v", r.RunID, r.Stored, before)
		}
		if r.Seq == 0 || r.Seq > 6 {
			t.Errorf("%s: sequence %d, want one of the stream's 1..6", r.RunID, r.Seq)
		}
		stored[r.RunID], seqs[r.RunID] = r.Stored, r.Seq
		runs[i].Stored, runs[i].Seq = time.Time{}, 0
	}
	want := []listener.Run{
		{QueryID: qa, RunID: running, Name: "orders", Kind: progress.KindProgress},
		{QueryID: qa, RunID: idleOnly, Kind: progress.KindIdle},
		{QueryID: qb, RunID: done, Name: "cdc_users", Kind: progress.KindTerminated, Terminated: true},
	}
	if fmt.Sprint(runs) != fmt.Sprint(want) {
		t.Fatalf("Retained =\n%+v\nwant\n%+v", runs, want)
	}
	for _, r := range want {
		if name, err := l.RunName(ctxT(t), r.QueryID, r.RunID); err != nil || name != r.Name {
			t.Errorf("RunName(%s) = %q, %v; want %q", r.RunID, name, err, r.Name)
		}
		// RetainedRun: one run's Terminated and Stored, as Retained
		// lists them (a registry reads it before a start into a
		// rewound table).
		one, found, err := l.RetainedRun(ctxT(t), r.QueryID, r.RunID)
		if err != nil || !found || one.Terminated != r.Terminated || !one.Stored.Equal(stored[r.RunID]) || one.Seq != seqs[r.RunID] {
			t.Errorf("RetainedRun(%s) = %+v, %v, %v; want terminated %v, stored %v, sequence %d", r.RunID, one, found, err, r.Terminated, stored[r.RunID], seqs[r.RunID])
		}
	}
	if _, found, err := l.RetainedRun(ctxT(t), qa, "00000000-0000-4000-8000-00000000dead"); err != nil || found {
		t.Errorf("RetainedRun of a run never seen: found %v, %v", found, err)
	}
}

func TestEnsureStream(t *testing.T) {
	srv := startNATS(t)
	ctx := ctxT(t)
	nc := rawConn(t, srv.ClientURL())
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	l := dial(t, srv.ClientURL(), listener.Options{})
	if err := l.EnsureStream(ctx); err != nil {
		t.Fatal(err)
	}
	info := func() *jetstream.StreamInfo {
		t.Helper()
		st, err := js.Stream(ctx, listener.DefaultStream)
		if err != nil {
			t.Fatal(err)
		}
		return st.CachedInfo()
	}
	first := info()
	cfg := first.Config
	wantSubjects := "[spark.started.> spark.progress.> spark.idle.> spark.terminated.>]"
	if fmt.Sprint(cfg.Subjects) != wantSubjects || cfg.MaxMsgsPerSubject != 1 || cfg.Storage != jetstream.FileStorage ||
		cfg.MaxAge != listener.DefaultMaxAge || !cfg.AllowDirect {
		t.Fatalf("stream config = subjects %v, per subject %d, storage %v, max age %v, direct %v",
			cfg.Subjects, cfg.MaxMsgsPerSubject, cfg.Storage, cfg.MaxAge, cfg.AllowDirect)
	}
	// A single-replica stream flushes its writes asynchronously (ADR 0004,
	// addendum: a write per message was a fifth of the service's CPU).
	if cfg.PersistMode != jetstream.AsyncPersistMode {
		t.Fatalf("stream persist mode = %v, want async", cfg.PersistMode)
	}
	// Bounded (issue 9, item 6): before, a flood of 2 GB reached 3.3 GB on
	// disk. Messages no larger than what is parsed, nor than the server takes.
	if cfg.MaxBytes != listener.DefaultMaxBytes || cfg.MaxMsgSize != int32(min(int64(listener.DefaultMaxPayload), nc.MaxPayload())) {
		t.Fatalf("stream bounds = %d bytes, messages of %d", cfg.MaxBytes, cfg.MaxMsgSize)
	}

	t.Run("idempotent", func(t *testing.T) {
		if err := l.EnsureStream(ctx); err != nil {
			t.Fatal(err)
		}
		again := info()
		if !again.Created.Equal(first.Created) || fmt.Sprint(again.Config) != fmt.Sprint(first.Config) {
			t.Fatalf("second EnsureStream changed the stream:\n%+v\n%+v", first.Config, again.Config)
		}
	})
	t.Run("one message per subject", func(t *testing.T) {
		q, r := uuid(10, 0), uuid(10, 1)
		for b := int64(0); b < 3; b++ {
			publish(t, l, progress.KindProgress, q, r, "x", b)
		}
		st, err := js.Stream(ctx, listener.DefaultStream)
		if err != nil {
			t.Fatal(err)
		}
		got, err := st.Info(ctx, jetstream.WithSubjectFilter("spark.progress."+q+"."+r))
		if err != nil {
			t.Fatal(err)
		}
		if n := got.State.Subjects["spark.progress."+q+"."+r]; n != 1 {
			t.Fatalf("messages on the subject = %d, want 1", n)
		}
	})
	t.Run("adds what it needs and keeps the operator's choices", func(t *testing.T) {
		st, err := js.Stream(ctx, listener.DefaultStream)
		if err != nil {
			t.Fatal(err)
		}
		c := st.CachedInfo().Config
		c.Subjects = append(slices.DeleteFunc(c.Subjects, func(s string) bool { return s == "spark.idle.>" }), "extra.>")
		c.MaxMsgsPerSubject = 5
		c.AllowDirect = false
		c.MaxBytes, c.MaxMsgSize = -1, -1 // a stream made before the bounds
		if _, err := js.UpdateStream(ctx, c); err != nil {
			t.Fatal(err)
		}
		core, logs := observer.New(zapcore.WarnLevel)
		l2 := dial(t, srv.ClientURL(), listener.Options{MaxAge: time.Hour, PlacementTags: []string{"ssd"}, Logger: zap.New(core)})
		for range 2 { // the second finds the same differences and says nothing
			if err := l2.EnsureStream(ctx); err != nil {
				t.Fatal(err)
			}
		}
		got := info().Config
		if got.MaxBytes != listener.DefaultMaxBytes || got.MaxMsgSize <= 0 {
			t.Errorf("an unbounded stream stays unbounded: %d bytes, messages of %d", got.MaxBytes, got.MaxMsgSize)
		}
		if got.MaxAge != listener.DefaultMaxAge || got.MaxMsgsPerSubject != 5 || !got.AllowDirect ||
			!slices.Contains(got.Subjects, "extra.>") || !slices.Contains(got.Subjects, "spark.idle.>") {
			t.Fatalf("after ensure: max age %v, per subject %d, direct %v, subjects %v",
				got.MaxAge, got.MaxMsgsPerSubject, got.AllowDirect, got.Subjects)
		}
		warned := logs.FilterMessageSnippet("differ from the configuration").All()
		if len(warned) != 1 {
			t.Fatalf("warnings about differences = %d, want 1: %v", len(warned), logs.All())
		}
		diffs := fmt.Sprint(warned[0].ContextMap()["differences"])
		for _, want := range []string{"max age: stream 168h0m0s, config 1h0m0s", "messages per subject: stream 5, config 1",
			"placement tags: stream [], config [ssd]"} {
			if !strings.Contains(diffs, want) {
				t.Errorf("differences %s: missing %q", diffs, want)
			}
		}
		if strings.Contains(diffs, "replicas") || strings.Contains(diffs, "storage") {
			t.Errorf("differences %s name a setting that is the same", diffs)
		}
	})
}

// startPlainNATS starts a nats-server without JetStream.
func startPlainNATS(t *testing.T) string {
	t.Helper()
	ns, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: -1, NoSigs: true, NoLog: true})
	if err != nil {
		t.Fatal(err)
	}
	ns.Start()
	t.Cleanup(func() { ns.Shutdown(); ns.WaitForShutdown() })
	if !ns.ReadyForConnections(waitTimeout) {
		t.Fatal("plain nats-server not ready")
	}
	return ns.ClientURL()
}

func TestWithoutJetStream(t *testing.T) {
	url := startPlainNATS(t)
	l := dial(t, url, listener.Options{})
	ctx := ctxT(t)
	if err := l.EnsureStream(ctx); !errors.Is(err, listener.ErrNoJetStream) {
		t.Fatalf("EnsureStream: err = %v, want ErrNoJetStream", err)
	}
	if _, err := l.Retained(ctx); !errors.Is(err, listener.ErrNoJetStream) {
		t.Fatalf("Retained: err = %v, want ErrNoJetStream", err)
	}
	q, run := uuid(11, 0), uuid(11, 1)
	box := listener.NewMailbox()
	sub, err := l.Subscribe(q, run, box)
	if err != nil {
		t.Fatalf("Subscribe without JetStream: %v", err)
	}
	defer sub.Unsubscribe()
	publish(t, l, progress.KindProgress, q, run, "live", 5)
	newCollector(box).waitFor(t, "live batch 5", func(c *collector) bool { return c.last() == 5 })
	if err := l.Ready(ctx); err != nil {
		t.Fatalf("Ready: %v", err)
	}
}

func TestPublishIsAcknowledgedByTheStream(t *testing.T) {
	srv := startNATS(t)
	svc := dial(t, srv.ClientURL(), listener.Options{})
	if err := svc.EnsureStream(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	pub := dial(t, srv.ClientURL(), listener.Options{})
	q, run := uuid(12, 0), uuid(12, 1)
	publish(t, pub, progress.KindProgress, q, run, "acked", 1)
	// Acknowledged: the stream holds it as soon as Publish returns.
	runs, err := svc.Retained(ctxT(t))
	if err != nil {
		t.Fatal(err)
	}
	if len(runs) != 1 || runs[0].RunID != run || runs[0].Name != "acked" {
		t.Fatalf("Retained = %+v, want the published run", runs)
	}
}

func TestPrefixWithSeveralTokens(t *testing.T) {
	srv := startNATS(t)
	o := listener.Options{Prefix: "acme.spark", Stream: "ACME"}
	l := dial(t, srv.ClientURL(), o)
	if err := l.EnsureStream(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	q, run := uuid(13, 0), uuid(13, 1)
	publish(t, l, progress.KindProgress, q, run, "acme", 3)
	box := listener.NewMailbox()
	sub, err := l.Subscribe(q, run, box)
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	if m := box.Take(); m.Progress == nil || m.Progress.BatchID != 3 {
		t.Fatalf("recovered %+v, want batch 3", m.Progress)
	}
	publish(t, l, progress.KindProgress, q, run, "acme", 4)
	newCollector(box).waitFor(t, "batch 4", func(c *collector) bool { return c.last() == 4 })
}

func TestServerRestartOnSameStore(t *testing.T) {
	dir := t.TempDir()
	srv, err := embeddednats.Start(embeddednats.Options{Port: embeddednats.RandomPort, StoreDir: dir})
	if err != nil {
		t.Fatal(err)
	}
	url := srv.ClientURL()
	_, portStr, _ := net.SplitHostPort(strings.TrimPrefix(url, "nats://"))
	var port int
	fmt.Sscan(portStr, &port)
	defer func() { srv.Shutdown() }()

	core, logs := observer.New(zapcore.InfoLevel)
	l := dial(t, url, listener.Options{Logger: zap.New(core), ReconnectWait: 500 * time.Millisecond})
	ctx := ctxT(t)
	if err := l.EnsureStream(ctx); err != nil {
		t.Fatal(err)
	}
	q, run := uuid(14, 0), uuid(14, 1)
	box := listener.NewMailbox()
	sub, err := l.Subscribe(q, run, box)
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	var foundMu sync.Mutex
	found := map[string]listener.Run{}
	disc, err := l.Discover(func(id string) bool { return id == run }, func(r listener.Run) {
		foundMu.Lock()
		found[r.RunID] = r
		foundMu.Unlock()
	})
	if err != nil {
		t.Fatal(err)
	}
	defer disc.Unsubscribe()
	publish(t, l, progress.KindProgress, q, run, "restart", 1)
	c := newCollector(box)
	c.waitFor(t, "batch 1", func(c *collector) bool { return c.last() == 1 })

	srv.Shutdown()
	ready := func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
		defer cancel()
		return l.Ready(ctx)
	}
	eventually(t, "not ready while the server is down", func() bool {
		return errors.Is(ready(), listener.ErrNotConnected)
	})
	srv, err = embeddednats.Start(embeddednats.Options{Port: port, StoreDir: dir})
	if err != nil {
		t.Fatal(err)
	}
	// Published by another client before the listener is back (it retries
	// every 500 ms): only the catch-up after the reconnect can bring it.
	other := rawConn(t, url)
	js, err := jetstream.New(other)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := js.Publish(ctx, "spark.progress."+q+"."+run, progressJSON(q, run, "restart", 2)); err != nil {
		t.Fatalf("publish after restart: %v", err)
	}
	// A run that starts meanwhile is found by the rescan after the
	// reconnect.
	newRun := uuid(14, 2)
	if _, err := js.Publish(ctx, "spark.started."+q+"."+newRun, startedJSON(q, newRun, "started-meanwhile")); err != nil {
		t.Fatalf("publish after restart: %v", err)
	}
	if ready() == nil {
		t.Log("the listener reconnected before the publish: the catch-up path was not exercised")
	}
	c.waitFor(t, "batch 2 after the restart", func(c *collector) bool { return c.last() == 2 })
	eventually(t, "ready again", func() bool { return ready() == nil })
	eventually(t, "the run started meanwhile found", func() bool {
		foundMu.Lock()
		defer foundMu.Unlock()
		return found[newRun].Name == "started-meanwhile"
	})
	if logs.FilterMessage("nats disconnected").Len() == 0 || logs.FilterMessage("nats reconnected").Len() == 0 {
		t.Errorf("disconnect and reconnect not logged: %v", logs.All())
	}

	// Live messages flow again on the re-sent subscription.
	publish(t, l, progress.KindProgress, q, run, "restart", 3)
	c.waitFor(t, "batch 3 live", func(c *collector) bool { return c.last() == 3 })
	// And the stream kept its messages across the restart.
	runs, err := l.Retained(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(runs) != 2 || runs[0].RunID != run || runs[0].Name != "restart" || runs[1].RunID != newRun {
		t.Fatalf("Retained after restart = %+v", runs)
	}
}

func TestAPI(t *testing.T) {
	srv := startNATS(t)
	svc := dial(t, srv.ClientURL(), listener.Options{})
	cli := dial(t, srv.ClientURL(), listener.Options{})
	ctx := ctxT(t)

	t.Run("no service", func(t *testing.T) {
		_, err := cli.RequestTrack(ctx, listener.TrackRequest{RunID: uuid(1, 1)})
		if !errors.Is(err, listener.ErrNoService) || !strings.Contains(err.Error(), "finalizer.api.track") {
			t.Fatalf("RequestTrack: err = %v, want ErrNoService naming the subject", err)
		}
		_, err = cli.RequestJoin(ctx, listener.JoinRequest{RunID: uuid(1, 1)})
		if !errors.Is(err, listener.ErrNoService) || !strings.Contains(err.Error(), "finalizer.api.join") {
			t.Fatalf("RequestJoin: err = %v, want ErrNoService naming the subject", err)
		}
	})

	var mu sync.Mutex
	tracked := map[string]listener.TrackRequest{}
	release := make(chan struct{})
	sub, err := svc.ServeAPI(
		func(_ context.Context, r listener.TrackRequest) listener.TrackReply {
			mu.Lock()
			defer mu.Unlock()
			if r.Table == "" {
				return listener.TrackReply{Error: "table is required"}
			}
			_, dup := tracked[r.RunID]
			tracked[r.RunID] = r
			return listener.TrackReply{OK: true, Tracked: !dup}
		},
		func(ctx context.Context, r listener.JoinRequest) listener.JoinReply {
			select {
			case <-release:
				return listener.JoinReply{Done: true, LastError: "advance bronze.orders: boom"}
			case <-time.After(r.Timeout):
				return listener.JoinReply{}
			case <-ctx.Done():
				return listener.JoinReply{Error: "shutting down"}
			}
		})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()

	t.Run("track", func(t *testing.T) {
		req := listener.TrackRequest{QueryID: uuid(1, 0), RunID: uuid(1, 1), Table: "bronze.orders",
			Spec: progress.SpecOptions{Time: "watermark", Granularity: "day", Delay: "10m"}}
		for i, wantTracked := range []bool{true, false} {
			reply, err := cli.RequestTrack(ctx, req)
			if err != nil {
				t.Fatal(err)
			}
			if !reply.OK || reply.Tracked != wantTracked {
				t.Fatalf("reply %d = %+v, want OK and Tracked=%v", i, reply, wantTracked)
			}
		}
		mu.Lock()
		got := tracked[req.RunID]
		mu.Unlock()
		if got != req {
			t.Fatalf("service got %+v, want %+v", got, req)
		}
		reply, err := cli.RequestTrack(ctx, listener.TrackRequest{RunID: uuid(1, 2)})
		if err != nil || reply.OK || reply.Error != "table is required" {
			t.Fatalf("bad track: reply %+v, err %v", reply, err)
		}
	})
	t.Run("join times out", func(t *testing.T) {
		reply, err := cli.RequestJoin(ctx, listener.JoinRequest{RunID: uuid(1, 1), Timeout: 10 * time.Millisecond})
		if err != nil || reply.Done {
			t.Fatalf("join: reply %+v, err %v; want not done", reply, err)
		}
	})
	t.Run("join done", func(t *testing.T) {
		go func() {
			// Released once the request is in flight (or after the fact:
			// either way the reply is done).
			close(release)
		}()
		reply, err := cli.RequestJoin(ctx, listener.JoinRequest{RunID: uuid(1, 1), Timeout: waitTimeout})
		if err != nil || !reply.Done || reply.LastError != "advance bronze.orders: boom" {
			t.Fatalf("join: reply %+v, err %v", reply, err)
		}
	})
	t.Run("bad request", func(t *testing.T) {
		m, err := rawConn(t, srv.ClientURL()).Request("finalizer.api.join", []byte(`{"run_id": 5}`), waitTimeout)
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(string(m.Data), "bad join request") {
			t.Fatalf("reply = %s", m.Data)
		}
	})
}

func TestCloseWaitsForAPIHandlers(t *testing.T) {
	srv := startNATS(t)
	ctx := ctxT(t)
	svc, err := listener.Dial(ctx, listener.Options{URL: srv.ClientURL()})
	if err != nil {
		t.Fatal(err)
	}
	started := make(chan struct{})
	var finished atomic.Bool
	if _, err := svc.ServeAPI(
		func(context.Context, listener.TrackRequest) listener.TrackReply { return listener.TrackReply{} },
		func(ctx context.Context, _ listener.JoinRequest) listener.JoinReply {
			close(started)
			<-ctx.Done() // blocks until Close cancels it
			finished.Store(true)
			return listener.JoinReply{Error: "shutting down"}
		}); err != nil {
		t.Fatal(err)
	}
	cli := dial(t, srv.ClientURL(), listener.Options{})
	errc := make(chan error, 1)
	go func() {
		reply, err := cli.RequestJoin(ctx, listener.JoinRequest{RunID: uuid(1, 1), Timeout: time.Hour})
		if err == nil && reply.Error != "shutting down" {
			err = fmt.Errorf("reply %+v", reply)
		}
		errc <- err
	}()
	<-started
	svc.Close()
	if !finished.Load() {
		t.Fatal("Close returned before the join handler")
	}
	if err := <-errc; err != nil {
		t.Fatalf("join during shutdown: %v", err)
	}
	svc.Close() // twice is fine
	if _, err := svc.Subscribe(uuid(1, 0), uuid(1, 1), listener.NewMailbox()); !errors.Is(err, listener.ErrClosed) {
		t.Fatalf("Subscribe after Close: err = %v, want ErrClosed", err)
	}
	if err := svc.Ready(ctx); !errors.Is(err, listener.ErrClosed) {
		t.Fatalf("Ready after Close: err = %v, want ErrClosed", err)
	}
}

func TestUnsubscribe(t *testing.T) {
	srv := startNATS(t)
	l := dial(t, srv.ClientURL(), listener.Options{})
	q, run := uuid(15, 0), uuid(15, 1)
	box := listener.NewMailbox()
	sub, err := l.Subscribe(q, run, box)
	if err != nil {
		t.Fatal(err)
	}
	if err := sub.Unsubscribe(); err != nil {
		t.Fatal(err)
	}
	if err := sub.Unsubscribe(); err != nil {
		t.Fatalf("second Unsubscribe: %v", err)
	}
	// A probe run's subscription, made after: once it has its message,
	// the unsubscribed run would have had its own.
	probe := listener.NewMailbox()
	psub, err := l.Subscribe(q, uuid(15, 2), probe)
	if err != nil {
		t.Fatal(err)
	}
	defer psub.Unsubscribe()
	publish(t, l, progress.KindProgress, q, run, "gone", 1)
	publish(t, l, progress.KindProgress, q, uuid(15, 2), "probe", 1)
	newCollector(probe).waitFor(t, "probe", func(c *collector) bool { return c.last() == 1 })
	if m := box.Take(); m.Progress != nil {
		t.Fatalf("delivered after Unsubscribe: %+v", m.Progress)
	}
}

func TestSubscribeRejectsBadIDs(t *testing.T) {
	srv := startNATS(t)
	l := dial(t, srv.ClientURL(), listener.Options{})
	for _, id := range []string{"", "a.b", "*", ">", "a b"} {
		if _, err := l.Subscribe(id, uuid(1, 1), listener.NewMailbox()); !errors.Is(err, listener.ErrInvalidToken) {
			t.Errorf("query id %q: err = %v, want ErrInvalidToken", id, err)
		}
		if _, err := l.Subscribe(uuid(1, 0), id, listener.NewMailbox()); !errors.Is(err, listener.ErrInvalidToken) {
			t.Errorf("run id %q: err = %v, want ErrInvalidToken", id, err)
		}
	}
}

func TestDialRetriesUntilTheServerIsUp(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	url := fmt.Sprintf("nats://127.0.0.1:%d", port)

	t.Run("gives up with ctx", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
		defer cancel()
		_, err := listener.Dial(ctx, listener.Options{URL: strings.Replace(url, "//", "//spark:hunter2@", 1)})
		if err == nil || !strings.Contains(err.Error(), fmt.Sprintf("127.0.0.1:%d", port)) {
			t.Fatalf("Dial to nothing: err = %v, want an error naming %s", err, url)
		}
		if strings.Contains(err.Error(), "hunter2") {
			t.Fatalf("the error shows the password: %v", err)
		}
	})
	t.Run("connects once up", func(t *testing.T) {
		type result struct {
			l   *listener.Listener
			err error
		}
		res := make(chan result, 1)
		go func() {
			l, err := listener.Dial(ctxT(t), listener.Options{URL: url})
			res <- result{l, err}
		}()
		srv, err := embeddednats.Start(embeddednats.Options{Port: port, StoreDir: t.TempDir()})
		if err != nil {
			t.Fatal(err)
		}
		defer srv.Shutdown()
		r := <-res
		if r.err != nil {
			t.Fatalf("Dial: %v", r.err)
		}
		r.l.Close()
	})
}

func TestJoinRequestJSON(t *testing.T) {
	tests := []struct {
		name, in string
		want     time.Duration
	}{
		{"string", `{"run_id":"r","timeout":"1m30s"}`, 90 * time.Second},
		{"nanoseconds", `{"run_id":"r","timeout":1000}`, time.Microsecond},
		{"absent", `{"run_id":"r"}`, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var r listener.JoinRequest
			if err := r.UnmarshalJSON([]byte(tt.in)); err != nil {
				t.Fatal(err)
			}
			if r.RunID != "r" || r.Timeout != tt.want {
				t.Fatalf("got %+v, want timeout %v", r, tt.want)
			}
		})
	}
	out, err := listener.JoinRequest{RunID: "r", Timeout: time.Minute}.MarshalJSON()
	if err != nil || string(out) != `{"run_id":"r","timeout":"1m0s"}` {
		t.Fatalf("MarshalJSON = %s, %v", out, err)
	}
	var bad listener.JoinRequest
	if err := bad.UnmarshalJSON([]byte(`{"timeout":"soon"}`)); err == nil {
		t.Fatal("bad timeout accepted")
	}
}

func TestDialAuthentication(t *testing.T) {
	ns, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: -1, NoSigs: true, NoLog: true,
		Username: "spark", Password: "s3cret"})
	if err != nil {
		t.Fatal(err)
	}
	ns.Start()
	t.Cleanup(func() { ns.Shutdown(); ns.WaitForShutdown() })
	if !ns.ReadyForConnections(waitTimeout) {
		t.Fatal("server not ready")
	}
	url := ns.ClientURL()

	l := dial(t, url, listener.Options{User: "spark", Password: "s3cret"})
	if err := l.Ready(ctxT(t)); err != nil {
		t.Fatalf("Ready: %v", err)
	}
	// A wrong password fails at once, not when ctx ends, and the error does
	// not leak the password.
	began := time.Now()
	_, err = listener.Dial(ctxT(t), listener.Options{URL: url, User: "spark", Password: "wrong-password"})
	if err == nil {
		t.Fatal("Dial with a wrong password succeeded")
	}
	if time.Since(began) > waitTimeout/2 || strings.Contains(err.Error(), "wrong-password") {
		t.Fatalf("after %v: %v", time.Since(began), err)
	}
	if _, err := listener.Dial(ctxT(t), listener.Options{URL: url, TLSCertFile: "cert.pem"}); err == nil {
		t.Fatal("a client certificate without a key was accepted")
	}
}

// restartDialer dials TCP and counts; every second connection it returns
// wrapped in a type of its own (which the raw read leaves as it is).
type restartDialer struct{ n atomic.Int32 }

type ownConn struct{ net.Conn }

func (d *restartDialer) Dial(network, address string) (net.Conn, error) {
	c, err := net.DialTimeout(network, address, 2*time.Second)
	if err != nil || d.n.Add(1)%2 == 1 {
		return c, err
	}
	return ownConn{c}, nil
}

// TestServerRestartThroughCustomDialer: with Options.Dialer, the first
// connection and every reconnect after the NATS server restarted are
// dialed by it (through the raw-read wrapper, rawread.go), a plain TCP
// connection and one of the dialer's own type alike, and events flow on
// each.
func TestServerRestartThroughCustomDialer(t *testing.T) {
	dir := t.TempDir()
	srv, err := embeddednats.Start(embeddednats.Options{Port: embeddednats.RandomPort, StoreDir: dir})
	if err != nil {
		t.Fatal(err)
	}
	url := srv.ClientURL()
	_, portStr, _ := net.SplitHostPort(strings.TrimPrefix(url, "nats://"))
	var port int
	fmt.Sscan(portStr, &port)
	defer func() { srv.Shutdown() }()

	d := &restartDialer{}
	l := dial(t, url, listener.Options{Dialer: d})
	ctx := ctxT(t)
	if err := l.EnsureStream(ctx); err != nil {
		t.Fatal(err)
	}
	q, run := uuid(15, 0), uuid(15, 1)
	box := listener.NewMailbox()
	sub, err := l.Subscribe(q, run, box)
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	c := newCollector(box)
	for i := int64(1); i <= 3; i++ {
		publish(t, l, progress.KindProgress, q, run, "dialer", 2*i-1)
		c.waitFor(t, fmt.Sprintf("batch %d", 2*i-1), func(c *collector) bool { return c.last() == 2*i-1 })
		// Then the server gone under the client's read in flight (EOF
		// or a reset from the raw read, a reconnect).
		publish(t, l, progress.KindProgress, q, run, "dialer", 2*i)
		c.waitFor(t, fmt.Sprintf("batch %d", 2*i), func(c *collector) bool { return c.last() == 2*i })
		dialed := d.n.Load()
		srv.Shutdown()
		if srv, err = embeddednats.Start(embeddednats.Options{Port: port, StoreDir: dir}); err != nil {
			t.Fatal(err)
		}
		eventually(t, "reconnected through the dialer", func() bool {
			rctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
			defer cancel()
			return d.n.Load() > dialed && l.Ready(rctx) == nil
		})
	}
	publish(t, l, progress.KindProgress, q, run, "dialer", 7)
	c.waitFor(t, "batch 7 after three restarts", func(c *collector) bool { return c.last() == 7 })
}
