package natstest

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
)

// ClusterName is the name of the JetStream cluster StartCluster starts.
const ClusterName = "finalizer-test"

// clusterReady bounds waiting for a node to accept clients and for the
// cluster's JetStream to elect a meta leader.
const clusterReady = 30 * time.Second

// Cluster is a JetStream cluster of in-process nats-server nodes on
// loopback, for tests of the clustered topology. Each node keeps its client
// port, route port and store across Kill and Restart, so a client given
// URLs reconnects to a restarted node. Its methods are safe for concurrent
// use.
type Cluster struct {
	t      testing.TB
	dir    string
	client []int // client port of each node
	route  []int // cluster (route) port of each node

	mu    sync.Mutex
	nodes []*server.Server // nil while a node is down
}

// StartCluster starts an n-node JetStream cluster (n >= 3 for R3 streams)
// with its stores in a temporary directory, waits until its JetStream has
// a meta leader, and shuts it down when the test ends.
func StartCluster(t testing.TB, n int) *Cluster {
	t.Helper()
	c := &Cluster{t: t, dir: t.TempDir(), nodes: make([]*server.Server, n)}
	ports, err := freePorts(2 * n)
	if err != nil {
		t.Fatal(err)
	}
	c.client, c.route = ports[:n], ports[n:]
	t.Cleanup(c.Shutdown)
	for i := range n {
		if err := c.start(i); err != nil {
			t.Fatal(err)
		}
	}
	if err := c.WaitJetStream(clusterReady); err != nil {
		t.Fatal(err)
	}
	return c
}

// freePorts returns n distinct loopback ports that were free a moment ago.
func freePorts(n int) ([]int, error) {
	ports := make([]int, 0, n)
	var open []net.Listener
	defer func() {
		for _, l := range open {
			_ = l.Close()
		}
	}()
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, fmt.Errorf("pick a free port: %w", err)
		}
		open = append(open, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

// Name returns node i's server name.
func (c *Cluster) Name(i int) string { return "n" + strconv.Itoa(i) }

// URL returns node i's client URL.
func (c *Cluster) URL(i int) string { return "nats://127.0.0.1:" + strconv.Itoa(c.client[i]) }

// URLs returns every node's client URL, comma-separated.
func (c *Cluster) URLs() string {
	urls := make([]string, len(c.client))
	for i := range c.client {
		urls[i] = c.URL(i)
	}
	return strings.Join(urls, ",")
}

func (c *Cluster) start(i int) error {
	routes := make([]*url.URL, 0, len(c.route))
	for j, p := range c.route {
		if j != i {
			routes = append(routes, &url.URL{Scheme: "nats-route", Host: "127.0.0.1:" + strconv.Itoa(p)})
		}
	}
	ns, err := server.NewServer(&server.Options{
		ServerName: c.Name(i),
		Host:       "127.0.0.1",
		Port:       c.client[i],
		JetStream:  true,
		StoreDir:   filepath.Join(c.dir, c.Name(i)),
		Cluster: server.ClusterOpts{
			Name: ClusterName,
			Host: "127.0.0.1",
			Port: c.route[i],
		},
		Routes:     routes,
		NoSigs:     true,
		NoLog:      true,
		MaxPayload: 8 << 20,
		// As the embedded server: a burst of plain publishes is stored.
		StreamMaxBufferedMsgs: 1_000_000,
		StreamMaxBufferedSize: 1 << 30,
	})
	if err != nil {
		return fmt.Errorf("node %d: %w", i, err)
	}
	ns.Start()
	if !ns.ReadyForConnections(clusterReady) {
		ns.Shutdown()
		return fmt.Errorf("node %d not ready for connections", i)
	}
	c.mu.Lock()
	c.nodes[i] = ns
	c.mu.Unlock()
	return nil
}

// Kill stops node i at once (its clients see the connection drop). It is
// a no-op for a node that is down.
func (c *Cluster) Kill(i int) {
	c.mu.Lock()
	ns := c.nodes[i]
	c.nodes[i] = nil
	c.mu.Unlock()
	if ns != nil {
		ns.Shutdown()
		ns.WaitForShutdown()
	}
}

// Restart starts node i again on its ports and store.
func (c *Cluster) Restart(i int) {
	c.t.Helper()
	c.mu.Lock()
	up := c.nodes[i] != nil
	c.mu.Unlock()
	if up {
		return
	}
	if err := c.start(i); err != nil {
		c.t.Fatal(err)
	}
}

// Shutdown stops every node that is up.
func (c *Cluster) Shutdown() {
	for i := range c.client {
		c.Kill(i)
	}
}

// Node returns node i's server, nil while it is down.
func (c *Cluster) Node(i int) *server.Server {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.nodes[i]
}

// StreamLeader returns the index of the node that leads the stream of the
// default account, or -1 when no running node does.
func (c *Cluster) StreamLeader(stream string) int {
	for i := range c.client {
		if ns := c.Node(i); ns != nil && ns.JetStreamIsStreamLeader(server.DEFAULT_GLOBAL_ACCOUNT, stream) {
			return i
		}
	}
	return -1
}

// WaitStreamLeader waits until a running node leads the stream and
// returns its index.
func (c *Cluster) WaitStreamLeader(stream string, timeout time.Duration) (int, error) {
	deadline := time.Now().Add(timeout)
	for {
		if i := c.StreamLeader(stream); i >= 0 {
			return i, nil
		}
		if time.Now().After(deadline) {
			return -1, fmt.Errorf("no leader of stream %s after %v", stream, timeout)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// HasMetaLeader reports whether a running node is the JetStream meta
// leader at this moment.
func (c *Cluster) HasMetaLeader() bool {
	for i := range c.client {
		if ns := c.Node(i); ns != nil && ns.JetStreamIsLeader() {
			return true
		}
	}
	return false
}

// WaitJetStream waits until a running node is the JetStream meta leader
// and knows every running node as a peer, so a stream of as many replicas
// as nodes can be placed.
func (c *Cluster) WaitJetStream(timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		up := 0
		for i := range c.client {
			if c.Node(i) != nil {
				up++
			}
		}
		for i := range c.client {
			if ns := c.Node(i); ns != nil && ns.JetStreamIsLeader() && len(ns.JetStreamClusterPeers()) >= up {
				return nil
			}
		}
		if time.Now().After(deadline) {
			return errors.New("the cluster's JetStream elected no meta leader that knows every node")
		}
		time.Sleep(20 * time.Millisecond)
	}
}
