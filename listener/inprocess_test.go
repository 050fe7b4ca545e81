package listener_test

import (
	"context"
	"errors"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/finalizer-dev/finalizer/internal/embeddednats"
	"github.com/finalizer-dev/finalizer/internal/testpki"
	"github.com/finalizer-dev/finalizer/listener"
	"github.com/finalizer-dev/finalizer/progress"
)

// cuttable hands out in-process connections to srv and can cut them
// (the connection breaks as a socket would) and refuse new ones for a
// while (a reconnect fails as it does to a port no one listens on).
type cuttable struct {
	srv *embeddednats.Server

	mu    sync.Mutex
	down  bool
	conns []net.Conn
}

func (c *cuttable) InProcessConn() (net.Conn, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.down {
		return nil, errors.New("refused by the test")
	}
	conn, err := c.srv.InProcessConn()
	if err == nil {
		c.conns = append(c.conns, conn)
	}
	return conn, err
}

// cut breaks every connection handed out so far and refuses new ones
// until restore.
func (c *cuttable) cut() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.down = true
	for _, conn := range c.conns {
		_ = conn.Close()
	}
	c.conns = nil
}

func (c *cuttable) restore() {
	c.mu.Lock()
	c.down = false
	c.mu.Unlock()
}

// TestInProcessConnection: a listener given the embedded server in
// process (ADR 0004, addendum) works without a socket (its URL names a
// port no one listens on), authenticates as any client, and when its
// connection breaks it reconnects in process, catches its runs up from
// the stream with what was published meanwhile, and gets live events
// again; once the server is gone it reports not connected and closes
// cleanly (goleak, TestMain).
func TestInProcessConnection(t *testing.T) {
	srv, err := embeddednats.Start(embeddednats.Options{
		Port: embeddednats.RandomPort, StoreDir: t.TempDir(),
		Users: []embeddednats.User{{Name: "svc", Password: "secret"}},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Shutdown)
	prov := &cuttable{srv: srv}
	core, logs := observer.New(zapcore.InfoLevel)
	l := dial(t, "nats://127.0.0.1:1", listener.Options{
		InProcess: prov, User: "svc", Password: "secret", Logger: zap.New(core),
	})
	ctx := ctxT(t)
	if err := l.EnsureStream(ctx); err != nil {
		t.Fatal(err)
	}
	if logs.FilterMessage("nats connected").FilterField(zap.Bool("in_process", true)).Len() != 1 {
		t.Errorf("no \"nats connected\" line with in_process=true: %v", logs.All())
	}
	q, run := uuid(40, 0), uuid(40, 1)
	box := listener.NewMailbox()
	sub, err := l.Subscribe(q, run, box)
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	// The publisher (a Spark driver) over TCP, as in production.
	pub := rawConn(t, "nats://svc:secret@"+srv.ClientURL()[len("nats://"):])
	js, err := jetstream.New(pub)
	if err != nil {
		t.Fatal(err)
	}
	subject := "spark.progress." + q + "." + run
	if _, err := js.Publish(ctx, subject, progressJSON(q, run, "inproc", 1)); err != nil {
		t.Fatal(err)
	}
	c := newCollector(box)
	c.waitFor(t, "batch 1 live", func(c *collector) bool { return c.last() == 1 })

	ready := func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
		defer cancel()
		return l.Ready(ctx)
	}
	prov.cut()
	eventually(t, "not ready while cut off", func() bool { return errors.Is(ready(), listener.ErrNotConnected) })
	// Stored while the listener cannot reconnect: only the catch-up after
	// the reconnect can bring it.
	if _, err := js.Publish(ctx, subject, progressJSON(q, run, "inproc", 2)); err != nil {
		t.Fatal(err)
	}
	prov.restore()
	c.waitFor(t, "batch 2 caught up after the reconnect", func(c *collector) bool { return c.last() == 2 })
	eventually(t, "ready again", func() bool { return ready() == nil })
	if _, err := js.Publish(ctx, subject, progressJSON(q, run, "inproc", 3)); err != nil {
		t.Fatal(err)
	}
	c.waitFor(t, "batch 3 live after the reconnect", func(c *collector) bool { return c.last() == 3 })
	if logs.FilterMessage("nats disconnected").Len() == 0 || logs.FilterMessage("nats reconnected").Len() == 0 {
		t.Errorf("disconnect and reconnect not logged: %v", logs.All())
	}
	if st := l.ConnStats(); st.SlowConsumer != 0 || st.Dropped != 0 {
		t.Errorf("conn stats %+v, want no slow consumer and nothing dropped", st)
	}

	// The server goes away: reconnects fail, Close still ends everything.
	srv.Shutdown()
	eventually(t, "not ready once the server is gone", func() bool { return errors.Is(ready(), listener.ErrNotConnected) })
}

// TestInProcessIgnoresTLSSettings: the listener's TLS settings and a
// tls:// URL do not apply to an in-process connection (there is no wire;
// the server offers TLS to in-process clients without requiring it),
// so the service reaches an embedded server that requires TLS from
// every other client (mutual TLS here) without a handshake over the
// pipe: what protects the connection is that it never leaves the process.
func TestInProcessIgnoresTLSSettings(t *testing.T) {
	pki, other := testpki.New(t), testpki.New(t)
	srv, err := embeddednats.Start(embeddednats.Options{
		Port: embeddednats.RandomPort, StoreDir: t.TempDir(),
		TLS: &embeddednats.TLS{CertFile: pki.ServerCert, KeyFile: pki.ServerKey, ClientCAFile: pki.CACert},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Shutdown)
	// Another CA and no client certificate: over TCP the handshake would
	// fail both ways.
	l := dial(t, srv.ClientURL(), listener.Options{InProcess: srv, TLSCAFile: other.CACert})
	if err := l.EnsureStream(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	q, run := uuid(41, 0), uuid(41, 1)
	publish(t, l, progress.KindProgress, q, run, "tls", 1)
	box := listener.NewMailbox()
	sub, err := l.Subscribe(q, run, box)
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	if m := box.Take(); m.Progress == nil || m.Progress.BatchID != 1 {
		t.Fatalf("recovered %+v, want batch 1", m.Progress)
	}
}
