package listener_test

import (
	"context"
	"fmt"
	"net"
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

// TestSlowRescanHoldsBackNoReconnect: a rescan of the retained runs for
// discovery that is slow (here: its known callback held on one run; in
// production a large stream, a slow server) must not hold back the
// handling of a NATS reconnect: the run subscriptions are caught up
// (what was stored while the listener was away reaches them) while the
// rescan is still held. The reconnect ends the rescan in flight and asks
// for one more, which finds the run that began while NATS was down once
// the first lets go. Before, the rescan ran on the goroutine that handles
// reconnects, which waited for it.
func TestSlowRescanHoldsBackNoReconnect(t *testing.T) {
	dir := t.TempDir()
	srv, err := embeddednats.Start(embeddednats.Options{Port: embeddednats.RandomPort, StoreDir: dir})
	if err != nil {
		t.Fatal(err)
	}
	url := srv.ClientURL()
	_, portStr, _ := net.SplitHostPort(strings.TrimPrefix(url, "nats://"))
	var port int
	if _, err := fmt.Sscan(portStr, &port); err != nil {
		t.Fatal(err)
	}
	defer func() { srv.Shutdown() }()
	core, logs := observer.New(zapcore.InfoLevel)
	l := dial(t, url, listener.Options{Logger: zap.New(core), ReconnectWait: 100 * time.Millisecond})
	ctx := ctxT(t)
	if err := l.EnsureStream(ctx); err != nil {
		t.Fatal(err)
	}
	q, run, slow := uuid(31, 0), uuid(31, 1), uuid(31, 2)
	// Retained before discovery starts: only a rescan reads it.
	publish(t, l, progress.KindStarted, q, slow, "slow", 0)

	box := listener.NewMailbox()
	sub, err := l.Subscribe(q, run, box)
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	publish(t, l, progress.KindProgress, q, run, "live", 1)
	c := newCollector(box)
	c.waitFor(t, "batch 1", func(c *collector) bool { return c.last() == 1 })

	var (
		gate     = make(chan struct{})
		held     = make(chan struct{})
		holdOnce sync.Once
		openOnce sync.Once
		mu       sync.Mutex
		found    = map[string]int{}
	)
	release := func() { openOnce.Do(func() { close(gate) }) }
	t.Cleanup(release) // before dial's Close, which waits for the rescan
	disc, err := l.Discover(func(id string) bool {
		if id == slow {
			select {
			case <-gate:
			default:
				holdOnce.Do(func() { close(held) })
				<-gate
			}
		}
		return id == run
	}, func(r listener.Run) {
		mu.Lock()
		found[r.RunID]++
		mu.Unlock()
	})
	if err != nil {
		t.Fatal(err)
	}
	defer disc.Unsubscribe()
	disc.Rescan()
	select {
	case <-held:
	case <-time.After(waitTimeout):
		t.Fatal("the rescan did not reach the held run")
	}

	srv.Shutdown()
	eventually(t, "disconnected", func() bool { return logs.FilterMessage("nats disconnected").Len() > 0 })
	if srv, err = embeddednats.Start(embeddednats.Options{Port: port, StoreDir: dir}); err != nil {
		t.Fatal(err)
	}
	other := rawConn(t, url)
	js, err := jetstream.New(other)
	if err != nil {
		t.Fatal(err)
	}
	pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if _, err := js.Publish(pctx, "spark.progress."+q+"."+run, progressJSON(q, run, "live", 2)); err != nil {
		t.Fatal(err)
	}
	began := uuid(31, 3)
	if _, err := js.Publish(pctx, "spark.started."+q+"."+began, startedJSON(q, began, "began-meanwhile")); err != nil {
		t.Fatal(err)
	}
	// The reconnect is handled, and the run caught up, while the rescan
	// is still held.
	eventually(t, "the reconnect handled while a rescan is held", func() bool {
		return logs.FilterMessage("caught up after reconnect").Len() > 0
	})
	c.waitFor(t, "batch 2 after the restart", func(c *collector) bool { return c.last() == 2 })
	select {
	case <-gate:
		t.Fatal("the rescan was let go before the reconnect was handled")
	default:
	}
	// Let go: the rescan the reconnect asked for finds the run that began
	// meanwhile.
	release()
	eventually(t, "the run that began while NATS was down found", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return found[began] > 0
	})
}
