package listener_test

import (
	"context"
	"errors"
	"net"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/finalizer-dev/finalizer/internal/embeddednats"
	"github.com/finalizer-dev/finalizer/listener"
	"github.com/finalizer-dev/finalizer/progress"
)

// TestStreamDeletedOrPurged (issue 9, item 8): anyone who could reach the
// server could purge or delete the stream, and nothing noticed (/readyz
// stayed up, recovery data silently gone). A deletion is noticed (by the
// server's advisory, or the periodic check), said by StreamReady until the
// stream is back, and the stream is recreated with its settings, storing
// events again; a purge is logged and counted.
func TestStreamDeletedOrPurged(t *testing.T) {
	srv := startNATS(t)
	ctx := ctxT(t)
	var mu sync.Mutex
	incidents := map[string]int{}
	count := func(kind string) int {
		mu.Lock()
		defer mu.Unlock()
		return incidents[kind]
	}
	l := dial(t, srv.ClientURL(), listener.Options{
		StreamCheckEvery: time.Hour, // the advisories alone
		OnStreamIncident: func(kind string) {
			mu.Lock()
			incidents[kind]++
			mu.Unlock()
		},
	})
	if err := l.EnsureStream(ctx); err != nil {
		t.Fatal(err)
	}
	if err := l.StreamReady(ctx); err != nil {
		t.Fatalf("StreamReady: %v", err)
	}
	js, err := jetstream.New(rawConn(t, srv.ClientURL()))
	if err != nil {
		t.Fatal(err)
	}
	q, r := uuid(1, 1), uuid(1, 2)
	// Each check has a context of its own: the test's ctx (waitTimeout
	// from its start) ran out before the last check on a slow machine,
	// and every check after that failed whatever the stream held.
	fresh := func() context.Context {
		c, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		t.Cleanup(cancel)
		return c
	}
	stored := func() bool {
		ctx := fresh()
		st, err := js.Stream(ctx, listener.DefaultStream)
		if err != nil {
			return false
		}
		_, err = st.GetLastMsgForSubject(ctx, "spark.progress."+q+"."+r)
		return err == nil
	}
	publish(t, l, progress.KindProgress, q, r, "orders", 1)
	eventually(t, "stored", stored)

	// A purge: counted, and the stream still stores.
	st, err := js.Stream(ctx, listener.DefaultStream)
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Purge(ctx); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the purge counted", func() bool { return count(listener.StreamPurged) == 1 })
	if err := l.StreamReady(ctx); err != nil {
		t.Errorf("StreamReady after a purge: %v", err)
	}

	// A deletion: recreated at once, and events are stored again.
	if err := js.DeleteStream(ctx, listener.DefaultStream); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the deletion counted", func() bool { return count(listener.StreamDeleted) == 1 })
	eventually(t, "the stream back", func() bool { return l.StreamReady(fresh()) == nil })
	info, err := js.Stream(fresh(), listener.DefaultStream)
	if err != nil {
		t.Fatal(err)
	}
	if cfg := info.CachedInfo().Config; cfg.MaxMsgsPerSubject != 1 || cfg.MaxBytes != listener.DefaultMaxBytes {
		t.Errorf("recreated stream: per subject %d, max bytes %d", cfg.MaxMsgsPerSubject, cfg.MaxBytes)
	}
	// As a Spark driver publishes: plainly.
	rawPublish(t, rawConn(t, srv.ClientURL()), "spark.progress."+q+"."+r, progressJSON(q, r, "orders", 2))
	eventually(t, "stored again", stored)
	if n := count(listener.StreamPurged); n != 1 {
		t.Errorf("purges counted: %d, want 1", n)
	}
}

// TestStreamReadyWhileDeleted: while the stream is deleted (here nothing
// recreates it), StreamReady says it is missing, for /readyz.
func TestStreamReadyWhileDeleted(t *testing.T) {
	srv := startNATS(t)
	ctx := ctxT(t)
	l := dial(t, srv.ClientURL(), listener.Options{StreamCheckEvery: -1})
	if err := l.EnsureStream(ctx); err != nil {
		t.Fatal(err)
	}
	js, err := jetstream.New(rawConn(t, srv.ClientURL()))
	if err != nil {
		t.Fatal(err)
	}
	if err := js.DeleteStream(ctx, listener.DefaultStream); err != nil {
		t.Fatal(err)
	}
	if err := l.StreamReady(ctx); !errors.Is(err, listener.ErrNoStream) {
		t.Errorf("StreamReady with the stream deleted: %v, want ErrNoStream", err)
	}
}

// TestStreamLostWithTheServersStore: a server that comes back without its
// store (restarted on an empty store directory) has no event stream; the
// reconnect's EnsureStream created it again at INFO, as at a first start,
// and nothing counted the loss of what it retained. It is a deletion: an
// ERROR line and finalizer_stream_incidents_total{kind="deleted"}. A
// server restarted on its own store loses nothing and counts nothing.
func TestStreamLostWithTheServersStore(t *testing.T) {
	dir := t.TempDir()
	srv, err := embeddednats.Start(embeddednats.Options{Port: embeddednats.RandomPort, StoreDir: dir})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { srv.Shutdown() }()
	url := srv.ClientURL()
	_, portStr, _ := net.SplitHostPort(strings.TrimPrefix(url, "nats://"))
	port, err := strconv.Atoi(portStr)
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	deleted := 0
	count := func() int {
		mu.Lock()
		defer mu.Unlock()
		return deleted
	}
	core, logs := observer.New(zapcore.InfoLevel)
	l := dial(t, url, listener.Options{
		Logger:           zap.New(core),
		StreamCheckEvery: time.Hour, // the reconnect alone
		OnStreamIncident: func(kind string) {
			if kind == listener.StreamDeleted {
				mu.Lock()
				deleted++
				mu.Unlock()
			}
		},
	})
	ctx := ctxT(t)
	if err := l.EnsureStream(ctx); err != nil {
		t.Fatal(err)
	}
	first := logs.FilterMessage("created event stream").Len() // the first start's
	restart := func(store string) {
		t.Helper()
		srv.Shutdown()
		if srv, err = embeddednats.Start(embeddednats.Options{Port: port, StoreDir: store}); err != nil {
			t.Fatal(err)
		}
		eventually(t, "the stream there again", func() bool {
			c, cancel := context.WithTimeout(context.Background(), time.Second)
			defer cancel()
			return l.StreamReady(c) == nil && logs.FilterMessage("nats reconnected").Len() > 0
		})
	}
	restart(dir)
	time.Sleep(200 * time.Millisecond) // the reconnect's EnsureStream has run: nothing to count
	if n := count(); n != 0 {
		t.Fatalf("a restart on the same store counted %d deletions", n)
	}
	restart(t.TempDir())
	eventually(t, "the lost stream counted", func() bool { return count() == 1 })
	if logs.FilterLevelExact(zapcore.ErrorLevel).FilterMessageSnippet("the event stream was gone").Len() != 1 {
		t.Errorf("no ERROR line for the lost stream: %v", logs.FilterMessageSnippet("stream").All())
	}
	if logs.FilterMessage("created event stream").Len() != first {
		t.Errorf("the lost stream's creation logged as a first creation")
	}
}
