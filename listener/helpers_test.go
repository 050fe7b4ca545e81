package listener_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"go.uber.org/goleak"

	"github.com/finalizer-dev/finalizer/internal/embeddednats"
	"github.com/finalizer-dev/finalizer/listener"
	"github.com/finalizer-dev/finalizer/progress"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// waitTimeout bounds every poll in these tests.
const waitTimeout = 10 * time.Second

// startNATS starts an embedded server on a random port with its store in
// a temporary directory.
func startNATS(t testing.TB) *embeddednats.Server {
	t.Helper()
	s, err := embeddednats.Start(embeddednats.Options{Port: embeddednats.RandomPort, StoreDir: t.TempDir()})
	if err != nil {
		t.Fatalf("start nats: %v", err)
	}
	t.Cleanup(s.Shutdown)
	return s
}

// dial connects a Listener closed at the end of the test.
func dial(t testing.TB, url string, o listener.Options) *listener.Listener {
	t.Helper()
	o.URL = url
	if o.ReconnectWait == 0 {
		o.ReconnectWait = 50 * time.Millisecond
	}
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	l, err := listener.Dial(ctx, o)
	if err != nil {
		t.Fatalf("Dial: %v", err)
	}
	t.Cleanup(l.Close)
	return l
}

// rawConn is a plain NATS client, for publishing what Listener.Publish
// refuses to.
func rawConn(t testing.TB, url string) *nats.Conn {
	t.Helper()
	nc, err := nats.Connect(url)
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	t.Cleanup(nc.Close)
	return nc
}

// rawPublish publishes and flushes.
func rawPublish(t testing.TB, nc *nats.Conn, subject string, data []byte) {
	t.Helper()
	if err := nc.Publish(subject, data); err != nil {
		t.Fatalf("publish %s: %v", subject, err)
	}
	if err := nc.Flush(); err != nil {
		t.Fatalf("flush: %v", err)
	}
}

func ctxT(t testing.TB) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	t.Cleanup(cancel)
	return ctx
}

// eventually polls cond until it holds or the deadline passes.
func eventually(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(waitTimeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// uuid returns a valid lowercase UUID made of n and m.
func uuid(n, m int) string {
	return fmt.Sprintf("%08x-0000-4000-8000-%012x", n, m)
}

var base = time.Date(2026, 9, 28, 13, 0, 0, 0, time.UTC)

// progressJSON is a listener-form progress of batch b.
func progressJSON(q, r, name string, b int64) []byte {
	ts := base.Add(time.Duration(b) * time.Minute).Format("2006-01-02T15:04:05.000Z")
	return []byte(fmt.Sprintf(`{"id":%q,"runId":%q,"name":%q,"timestamp":%q,"batchId":%d,`+
		`"sources":[{"description":"test","startOffset":null,"endOffset":{"commit_ts":%q}}],"eventTime":{}}`,
		q, r, name, ts, b, ts))
}

func startedJSON(q, r, name string) []byte {
	return []byte(fmt.Sprintf(`{"id":%q,"runId":%q,"name":%q,"timestamp":"2026-09-28T13:00:00.000Z"}`, q, r, name))
}

func idleJSON(q, r string) []byte {
	return []byte(fmt.Sprintf(`{"id":%q,"runId":%q,"timestamp":"2026-09-28T13:00:10.000Z"}`, q, r))
}

func terminatedJSON(q, r string) []byte {
	return []byte(fmt.Sprintf(`{"id":%q,"runId":%q,"exception":null,"errorClassOnException":null}`, q, r))
}

// payloadOf returns the JSON of an event of kind.
func payloadOf(kind progress.Kind, q, r, name string, b int64) []byte {
	switch kind {
	case progress.KindStarted:
		return startedJSON(q, r, name)
	case progress.KindProgress:
		return progressJSON(q, r, name, b)
	case progress.KindIdle:
		return idleJSON(q, r)
	case progress.KindTerminated:
		return terminatedJSON(q, r)
	}
	panic("bad kind")
}

// publish sends an event through Listener.Publish.
func publish(t testing.TB, l *listener.Listener, kind progress.Kind, q, r, name string, b int64) {
	t.Helper()
	ev := &progress.Event{Kind: kind, QueryID: q, RunID: r}
	if err := l.Publish(ctxT(t), ev, payloadOf(kind, q, r, name, b)); err != nil {
		t.Fatalf("Publish %s: %v", kind, err)
	}
}

// counter counts OnEvent calls by kind and outcome.
type counter struct {
	mu sync.Mutex
	n  map[string]int
}

func newCounter() *counter { return &counter{n: make(map[string]int)} }

func (c *counter) onEvent(kind progress.Kind, outcome string) {
	c.mu.Lock()
	c.n[kind.String()+"/"+outcome]++
	c.mu.Unlock()
}

func (c *counter) get(key string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n[key]
}

func (c *counter) String() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return fmt.Sprint(c.n)
}

// collector takes mail out of a mailbox and keeps what it saw.
type collector struct {
	box *listener.Mailbox

	mu         sync.Mutex
	batches    []int64
	idle       int
	terminated *progress.Event
}

func newCollector(box *listener.Mailbox) *collector { return &collector{box: box} }

// take empties the mailbox once.
func (c *collector) take() {
	m := c.box.Take()
	c.mu.Lock()
	defer c.mu.Unlock()
	if m.Progress != nil {
		c.batches = append(c.batches, m.Progress.BatchID)
	}
	if m.Idle {
		c.idle++
	}
	if m.Terminated != nil {
		c.terminated = m.Terminated
	}
}

// last returns the last batch taken, or -1.
func (c *collector) last() int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.batches) == 0 {
		return -1
	}
	return c.batches[len(c.batches)-1]
}

// waitFor takes mail until cond holds. Only the calling goroutine may
// take from c meanwhile.
func (c *collector) waitFor(t testing.TB, what string, cond func(c *collector) bool) {
	t.Helper()
	deadline := time.After(waitTimeout)
	for {
		c.take()
		if cond(c) {
			return
		}
		select {
		case <-c.box.Wake():
		case <-deadline:
			t.Fatalf("timed out waiting for %s; batches %v idle %d terminated %v", what, c.batches, c.idle, c.terminated != nil)
		}
	}
}

// fakeClock is an injectable clock.
type fakeClock struct{ ns atomic.Int64 }

func newFakeClock() *fakeClock {
	c := &fakeClock{}
	c.ns.Store(base.UnixNano())
	return c
}

func (c *fakeClock) Now() time.Time      { return time.Unix(0, c.ns.Load()) }
func (c *fakeClock) Add(d time.Duration) { c.ns.Add(int64(d)) }

// subscribeRuns subscribes runs 0 to n-1 (query uuid(i, 0), run uuid(i,
// 1)) on l, each with a mailbox of its own, unsubscribed at the end of
// the test, and returns the mailboxes.
func subscribeRuns(t testing.TB, l *listener.Listener, n int) []*listener.Mailbox {
	t.Helper()
	boxes := make([]*listener.Mailbox, n)
	for i := range boxes {
		boxes[i] = listener.NewMailbox()
		s, err := l.Subscribe(uuid(i, 0), uuid(i, 1), boxes[i])
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = s.Unsubscribe() })
	}
	return boxes
}
