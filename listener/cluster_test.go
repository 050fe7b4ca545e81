package listener_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/finalizer-dev/finalizer/internal/natstest"
	"github.com/finalizer-dev/finalizer/listener"
)

// clusterTimeout bounds the waits of the cluster tests: a stream leader
// election after a node's loss takes a few seconds.
const clusterTimeout = 30 * time.Second

// ackedPublisher publishes each run's progress with increasing batch ids
// through JetStream, retrying a batch until the cluster acknowledges it,
// and remembers the last acknowledged batch of every run.
type ackedPublisher struct {
	js   jetstream.JetStream
	runs [][2]string // query id, run id

	mu        sync.Mutex
	acked     map[string]int64
	attempted map[string]int64 // a publish cancelled at the end may still be delivered
}

func (p *ackedPublisher) run(ctx context.Context, every time.Duration) {
	for b := int64(0); ctx.Err() == nil; b++ {
		for _, r := range p.runs {
			subj := "spark.progress." + r[0] + "." + r[1]
			p.mu.Lock()
			p.attempted[r[1]] = b
			p.mu.Unlock()
			for ctx.Err() == nil {
				pctx, cancel := context.WithTimeout(ctx, time.Second)
				_, err := p.js.Publish(pctx, subj, progressJSON(r[0], r[1], "q", b))
				cancel()
				if err == nil {
					p.mu.Lock()
					p.acked[r[1]] = b
					p.mu.Unlock()
					break
				}
				time.Sleep(50 * time.Millisecond)
			}
		}
		select {
		case <-ctx.Done():
		case <-time.After(every):
		}
	}
}

func (p *ackedPublisher) last(run string) int64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	if b, ok := p.acked[run]; ok {
		return b
	}
	return -1
}

// connectedNode returns the index of the node the listener (connection
// name "finalizer") is connected to, or -1.
func connectedNode(c *natstest.Cluster, n int) int {
	for i := range n {
		ns := c.Node(i)
		if ns == nil {
			continue
		}
		cz, err := ns.Connz(&server.ConnzOptions{})
		if err != nil {
			continue
		}
		for _, ci := range cz.Conns {
			if ci.Name == listener.DefaultName {
				return i
			}
		}
	}
	return -1
}

// TestClusterLeaderLoss runs a listener against a three-node JetStream
// cluster with an R3 stream while events flow, and kills first the
// stream's leader, then the node the listener is connected to: every run
// ends at the last progress the cluster acknowledged.
func TestClusterLeaderLoss(t *testing.T) {
	c := natstest.StartCluster(t, 3)
	core, logs := observer.New(zapcore.InfoLevel)
	l := dial(t, c.URLs(), listener.Options{Replicas: 3, Logger: zap.New(core)})
	ctx, cancel := context.WithTimeout(context.Background(), 2*clusterTimeout)
	defer cancel()
	if err := l.EnsureStream(ctx); err != nil {
		t.Fatal(err)
	}
	nc, err := nats.Connect(c.URLs(), nats.MaxReconnects(-1), nats.ReconnectWait(50*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	st, err := js.Stream(ctx, listener.DefaultStream)
	if err != nil {
		t.Fatal(err)
	}
	if info := st.CachedInfo(); info.Config.Replicas != 3 || info.Cluster == nil || len(info.Cluster.Replicas) != 2 {
		t.Fatalf("stream: replicas %d, cluster %+v; want R3", info.Config.Replicas, info.Cluster)
	}

	p := &ackedPublisher{js: js, acked: map[string]int64{}, attempted: map[string]int64{}}
	var cols []*collector
	for i := range 4 {
		q, r := uuid(40, i), uuid(41, i)
		box := listener.NewMailbox()
		if _, err := l.Subscribe(q, r, box); err != nil {
			t.Fatal(err)
		}
		p.runs = append(p.runs, [2]string{q, r})
		cols = append(cols, newCollector(box))
	}
	pctx, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); p.run(pctx, 20*time.Millisecond) }()
	defer func() { stop(); <-done }()

	waitAcked := func(what string, beyond int64) int64 {
		t.Helper()
		deadline := time.Now().Add(clusterTimeout)
		for p.last(p.runs[len(p.runs)-1][1]) <= beyond {
			if time.Now().After(deadline) {
				t.Fatalf("%s: no acknowledged publish beyond batch %d", what, beyond)
			}
			time.Sleep(20 * time.Millisecond)
		}
		return p.last(p.runs[len(p.runs)-1][1])
	}
	b := waitAcked("before", 5)

	leader, err := c.WaitStreamLeader(listener.DefaultStream, clusterTimeout)
	if err != nil {
		t.Fatal(err)
	}
	// A run whose progress the cluster acknowledged before the leader's
	// loss, subscribed while the stream elects a new leader: its catch-up
	// must deliver that progress (from a replica, or retried).
	lateQ, lateR := uuid(42, 0), uuid(42, 1)
	if _, err := js.Publish(ctx, "spark.progress."+lateQ+"."+lateR, progressJSON(lateQ, lateR, "late", 7)); err != nil {
		t.Fatal(err)
	}
	t.Logf("killing the stream leader n%d at batch %d", leader, b)
	c.Kill(leader)
	lateBox := listener.NewMailbox()
	if _, err := l.Subscribe(lateQ, lateR, lateBox); err != nil {
		t.Fatalf("subscribe during the leader's loss: %v", err)
	}
	b = waitAcked("after the leader's loss", b+5)
	c.Restart(leader)

	conn := connectedNode(c, 3)
	if conn < 0 {
		t.Fatal("listener connected to no node")
	}
	t.Logf("killing n%d, the listener's node, at batch %d", conn, b)
	c.Kill(conn)
	b = waitAcked("after the listener's node's loss", b+5)
	// Ready asks JetStream (AccountInfo, bounded by the request timeout,
	// 5 s): while the cluster settles after the loss of the listener's
	// node, a probe can go unanswered for all of it (6 runs of 12 under
	// load were ready after 5.03 s), and two such probes used up the
	// 10 s of a listener's wait (eventually). It is bounded as the
	// cluster's other waits are (clusterTimeout).
	lost := time.Now()
	var notReady error
	for deadline := lost.Add(clusterTimeout); ; time.Sleep(20 * time.Millisecond) {
		if notReady = l.Ready(ctx); notReady == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the listener not ready %v after its node's loss: %v", clusterTimeout, notReady)
		}
	}
	t.Logf("the listener ready %v after its node's loss", time.Since(lost).Round(time.Millisecond))
	c.Restart(conn)
	waitAcked("after the restarts", b+5)
	stop()
	<-done

	for i, col := range cols {
		acked := p.last(p.runs[i][1])
		p.mu.Lock()
		attempted := p.attempted[p.runs[i][1]]
		p.mu.Unlock()
		col.waitFor(t, fmt.Sprintf("run %d: the last acknowledged batch %d (or the one after, published as the load stopped)", i, acked),
			func(c *collector) bool { return c.last() >= acked && c.last() <= attempted })
	}
	newCollector(lateBox).waitFor(t, "the late run's retained batch", func(c *collector) bool { return c.last() == 7 })
	reconnects := logs.FilterMessage("nats reconnected").Len()
	eventually(t, "a catch-up after every reconnect", func() bool {
		return logs.FilterMessage("caught up after reconnect").Len() >= reconnects
	})
	for _, e := range logs.FilterLevelExact(zapcore.WarnLevel).All() {
		t.Logf("warning: %s %v", e.Message, e.ContextMap())
	}
}

// TestEnsureStreamReplicasOnCluster creates an R3 stream placed by
// cluster name, and reports an R1 stream an operator made as differing.
func TestEnsureStreamReplicasOnCluster(t *testing.T) {
	c := natstest.StartCluster(t, 3)
	ctx, cancel := context.WithTimeout(context.Background(), clusterTimeout)
	defer cancel()
	l := dial(t, c.URLs(), listener.Options{Stream: "PLACED", Replicas: 3, PlacementCluster: natstest.ClusterName})
	if err := l.EnsureStream(ctx); err != nil {
		t.Fatal(err)
	}
	nc := rawConn(t, c.URLs())
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	st, err := js.Stream(ctx, "PLACED")
	if err != nil {
		t.Fatal(err)
	}
	info := st.CachedInfo()
	if info.Config.Replicas != 3 || info.Config.Placement == nil || info.Config.Placement.Cluster != natstest.ClusterName {
		t.Fatalf("created stream: replicas %d, placement %+v", info.Config.Replicas, info.Config.Placement)
	}
	// A replicated stream's writes go through its Raft log: the server
	// refuses the async persist mode there, and EnsureStream does not ask.
	if info.Config.PersistMode != jetstream.DefaultPersistMode {
		t.Fatalf("created R3 stream: persist mode %v", info.Config.PersistMode)
	}

	// An operator's R1 stream with another retention: kept, and named.
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "HAND", Subjects: []string{"hand.started.>", "hand.progress.>", "hand.idle.>", "hand.terminated.>"}, Replicas: 1,
		MaxAge: time.Hour, MaxMsgsPerSubject: 1, Storage: jetstream.FileStorage, AllowDirect: true}); err != nil {
		t.Fatal(err)
	}
	core, logs := observer.New(zapcore.WarnLevel)
	l2 := dial(t, c.URLs(), listener.Options{Stream: "HAND", Prefix: "hand", Replicas: 3, Logger: zap.New(core)})
	if err := l2.EnsureStream(ctx); err != nil {
		t.Fatal(err)
	}
	st, err = js.Stream(ctx, "HAND")
	if err != nil {
		t.Fatal(err)
	}
	if got := st.CachedInfo().Config; got.Replicas != 1 || got.MaxAge != time.Hour {
		t.Fatalf("operator's stream changed: replicas %d, max age %v", got.Replicas, got.MaxAge)
	}
	w := logs.FilterMessageSnippet("differ from the configuration").All()
	if len(w) != 1 {
		t.Fatalf("warnings = %v", logs.All())
	}
	diffs, _ := w[0].ContextMap()["differences"].([]any)
	want := map[string]bool{"replicas: stream 1, config 3": true, "max age: stream 1h0m0s, config 168h0m0s": true}
	if len(diffs) != len(want) {
		t.Fatalf("differences = %v, want %v", diffs, want)
	}
	for _, d := range diffs {
		if !want[d.(string)] {
			t.Errorf("unexpected difference %q", d)
		}
	}
	if _, err := js.Stream(ctx, "nope"); !errors.Is(err, jetstream.ErrStreamNotFound) {
		t.Fatalf("lookup of a missing stream: %v", err)
	}
}
