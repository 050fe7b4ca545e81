//go:build linux

package tests

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/finalizer-dev/finalizer/internal/natstest"
	"github.com/finalizer-dev/finalizer/internal/pgcluster/pgtest"
)

// loadBase is the commit time of batch 0 of a steady load; batch b ends
// b*loadStep later.
var loadBase = time.Date(2026, 9, 28, 13, 0, 0, 0, time.UTC)

const loadStep = 10 * time.Second

// loadRun is one run of the steady load and what was published for it.
type loadRun struct {
	q, r, name, table string

	mu        sync.Mutex
	acked     int64 // last batch the cluster acknowledged, -1 before
	attempted int64 // last batch published (acknowledged or not), -1 before
}

// justified returns the verdict batch b justifies: the start of the
// minute that holds its commit time.
func justified(b int64) time.Time {
	if b < 0 {
		return time.Time{}
	}
	return loadBase.Add(time.Duration(b) * loadStep).Truncate(time.Minute)
}

func (r *loadRun) bounds() (acked, attempted int64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.acked, r.attempted
}

// steadyLoad publishes every run's next progress every `every`, through
// JetStream, retrying a batch until the cluster acknowledges it, as a
// careful publisher would; it stops when ctx is done.
func steadyLoad(ctx context.Context, js jetstream.JetStream, runs []*loadRun, every time.Duration) {
	steadyLoadFrom(ctx, js, runs, every, 0)
}

// aheadChecker polls the control table through pgURL and fails the test
// when a run's table ever moves back or runs ahead of what the batches
// published so far justify.
type aheadChecker struct {
	t     *testing.T
	runs  []*loadRun
	stop  chan struct{}
	wg    sync.WaitGroup
	mu    sync.Mutex
	polls int
	errs  []string
	seen  map[string][]time.Time
}

func checkAhead(t *testing.T, pgURL string, runs []*loadRun) *aheadChecker {
	c := &aheadChecker{t: t, runs: runs, stop: make(chan struct{}), seen: map[string][]time.Time{}}
	c.wg.Add(1)
	go func() {
		defer c.wg.Done()
		pollPostgres(pgURL, 20*time.Millisecond, c.stop, c.poll)
	}()
	t.Cleanup(c.close)
	return c
}

func (c *aheadChecker) poll(ctx context.Context, conn *pgx.Conn) error {
	rows, err := conn.Query(ctx, `SELECT table_name, finalized_until FROM public.table_finalization`)
	if err != nil {
		return err
	}
	got := map[string]time.Time{}
	for rows.Next() {
		var table string
		var until time.Time
		if err := rows.Scan(&table, &until); err != nil {
			rows.Close()
			return err
		}
		got[table] = until.UTC()
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.polls++
	for _, r := range c.runs {
		v, ok := got[r.table]
		if !ok {
			continue
		}
		// Read after the verdict: a bound that only grows.
		_, attempted := r.bounds()
		if limit := justified(attempted); v.After(limit) {
			c.errs = append(c.errs, fmt.Sprintf("%s: verdict %v ran ahead of the newest published batch's %v", r.table, v, limit))
		}
		s := c.seen[r.table]
		if n := len(s); n > 0 && v.Before(s[n-1]) {
			c.errs = append(c.errs, fmt.Sprintf("%s: verdict moved back from %v to %v", r.table, s[n-1], v))
		}
		if n := len(s); n == 0 || !v.Equal(s[n-1]) {
			c.seen[r.table] = append(s, v)
		}
	}
	return nil
}

func (c *aheadChecker) close() {
	select {
	case <-c.stop:
	default:
		close(c.stop)
	}
	c.wg.Wait()
}

// verify stops the checker and reports what it found.
func (c *aheadChecker) verify() {
	c.t.Helper()
	c.close()
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.polls < 10 {
		c.t.Errorf("the checker polled the control table only %d times", c.polls)
	}
	for _, e := range c.errs {
		c.t.Error(e)
	}
}

// readyProbe polls a replica's /readyz and records, for each answer,
// whether the NATS cluster had a JetStream meta leader just before and
// just after it.
type readyProbe struct {
	url  string
	stop chan struct{}
	wg   sync.WaitGroup

	mu      sync.Mutex
	answers []readyAnswer
}

type readyAnswer struct {
	at           time.Time
	status       int // 0: no answer (the process is down)
	body         string
	leaderBefore bool
	leaderAfter  bool
}

func probeReady(t *testing.T, httpURL string, c *natstest.Cluster) *readyProbe {
	p := &readyProbe{url: httpURL + "/readyz", stop: make(chan struct{})}
	client := &http.Client{Timeout: 8 * time.Second}
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		for {
			select {
			case <-p.stop:
				return
			case <-time.After(100 * time.Millisecond):
			}
			a := readyAnswer{at: time.Now(), leaderBefore: c.HasMetaLeader()}
			resp, err := client.Get(p.url)
			if err == nil {
				buf := make([]byte, 512)
				n, _ := resp.Body.Read(buf)
				resp.Body.Close()
				a.status, a.body = resp.StatusCode, string(buf[:n])
			}
			a.leaderAfter = c.HasMetaLeader()
			p.mu.Lock()
			p.answers = append(p.answers, a)
			p.mu.Unlock()
		}
	}()
	t.Cleanup(p.close)
	return p
}

func (p *readyProbe) close() {
	select {
	case <-p.stop:
	default:
		close(p.stop)
	}
	p.wg.Wait()
}

// TestNATSClusterReplicas runs two replicas of the built binary against a
// three-node JetStream cluster, the R3 event stream created by the first
// replica, under a steady load of acknowledged events. It kills the
// stream leader's node, then one replica (kill -9), then restarts both.
// Every table ends at the verdict its last acknowledged event justifies,
// no verdict ever moved back or ran ahead of the published events, and
// each replica's /readyz told the truth: never ready while the cluster had
// no JetStream, ready again once it had.
func TestNATSClusterReplicas(t *testing.T) {
	began := time.Now()
	c := natstest.StartCluster(t, 3)
	pgURL := pgtest.URL(t)
	config := `
stream: {replicas: 3}
tables:
  - table: "topo.{name}"
    query: "load_*"
    granularity: minute
`
	serveR := func() *proc {
		return startServe(t, serveOpts{pgURL: pgURL, natsURL: c.URLs(), config: config, args: []string{"--log-level", "info"}})
	}
	s1 := serveR()
	s2 := serveR()

	_, js := natstest.Connect(t, c.URLs(), nats.MaxReconnects(-1), nats.ReconnectWait(50*time.Millisecond))
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	st, err := js.Stream(ctx, "SPARK_EVENTS")
	if err != nil {
		t.Fatal(err)
	}
	if info := st.CachedInfo(); info.Config.Replicas != 3 || info.Cluster == nil || len(info.Cluster.Replicas) != 2 {
		t.Fatalf("stream: %d replicas, cluster %+v; want R3", info.Config.Replicas, info.Cluster)
	}

	var runs []*loadRun
	for i := range 3 {
		r := &loadRun{q: id(0x900 + 2*i), r: id(0x901 + 2*i), name: fmt.Sprintf("load_%d", i), acked: -1, attempted: -1}
		r.table = "topo." + r.name
		if _, err := js.Publish(ctx, "spark.started."+r.q+"."+r.r, []byte(startedJSON(r.q, r.r, r.name))); err != nil {
			t.Fatal(err)
		}
		runs = append(runs, r)
	}
	for _, r := range runs {
		eventually(t, "both replicas track "+r.name, func() bool { return tracked(t, s1.httpURL, r.r) && tracked(t, s2.httpURL, r.r) })
	}
	checker := checkAhead(t, pgURL, runs)
	probes := []*readyProbe{probeReady(t, s1.httpURL, c), probeReady(t, s2.httpURL, c)}
	lctx, stopLoad := context.WithCancel(ctx)
	loadDone := make(chan struct{})
	go func() { defer close(loadDone); steadyLoad(lctx, js, runs, 100*time.Millisecond) }()
	defer func() { stopLoad(); <-loadDone }()

	waitBatch := func(what string, n int64) {
		t.Helper()
		deadline := time.Now().Add(time.Minute)
		for {
			a, _ := runs[len(runs)-1].bounds()
			if a >= n {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: the load did not reach batch %d (at %d)", what, n, a)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	waitBatch("before the faults", 15)
	for _, r := range runs {
		eventually(t, r.table+" moving under the load", func() bool {
			row, ok := readRow(t, pgURL, r.table)
			return ok && !row.FinalizedUntil.Before(justified(6))
		})
	}
	leader, err := c.WaitStreamLeader("SPARK_EVENTS", 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	a, _ := runs[0].bounds()
	t.Logf("%v: killing the stream leader n%d at batch %d", time.Since(began).Round(time.Millisecond), leader, a)
	c.Kill(leader)
	waitBatch("after the leader's loss", a+40)
	a, _ = runs[0].bounds()
	t.Logf("%v: kill -9 of replica 2 at batch %d", time.Since(began).Round(time.Millisecond), a)
	s2.kill()
	waitBatch("after the replica's loss", a+40)
	a, _ = runs[0].bounds()
	t.Logf("%v: restarting n%d and replica 2 at batch %d", time.Since(began).Round(time.Millisecond), leader, a)
	c.Restart(leader)
	s2 = serveR()
	probes[1].close()
	probes = append(probes, probeReady(t, s2.httpURL, c))
	waitBatch("after the restarts", a+40)
	stopLoad()
	<-loadDone

	for _, r := range runs {
		acked, attempted := r.bounds()
		lo, hi := justified(acked), justified(attempted)
		eventually(t, r.table+" at its last acknowledged batch's verdict", func() bool {
			row, ok := readRow(t, pgURL, r.table)
			return ok && !row.FinalizedUntil.Before(lo) && !row.FinalizedUntil.After(hi)
		})
	}
	checker.verify()

	// /readyz: never 200 while the cluster had no JetStream meta leader
	// just before and after the probe; 200 at the end.
	for i, p := range probes {
		p.close()
		p.mu.Lock()
		var ok, down, notReady int
		for _, a := range p.answers {
			switch {
			case a.status == http.StatusOK:
				ok++
				if !a.leaderBefore && !a.leaderAfter {
					t.Errorf("probe %d: /readyz 200 at %v while the cluster had no JetStream", i, a.at.Sub(began))
				}
			case a.status == 0:
				down++
			default:
				notReady++
				if !strings.Contains(a.body, "nats") && !strings.Contains(a.body, "jetstream") && !strings.Contains(a.body, "postgres") {
					t.Errorf("probe %d: /readyz %d without a reason: %q", i, a.status, a.body)
				}
			}
		}
		want := http.StatusOK
		if i == 1 {
			want = 0 // the replica killed with -9 answers no more
		}
		if n := len(p.answers); n == 0 || p.answers[n-1].status != want {
			t.Errorf("probe %d: the last /readyz answer is not %d: %+v", i, want, p.answers[max(n-1, 0):])
		}
		t.Logf("probe %d: %d answers: %d ready, %d not ready, %d no answer", i, len(p.answers), ok, notReady, down)
		p.mu.Unlock()
	}
	for i, s := range []*proc{s1, s2} {
		s.stop()
		if errs := errorLines(s.stderr.String()); len(errs) > 0 {
			t.Logf("replica %d logged errors (expected while the cluster elects):\n%s", i+1, strings.Join(errs, "\n"))
		}
	}
	t.Logf("took %v", time.Since(began).Round(time.Millisecond))
}
