//go:build linux

package tests

import (
	"context"
	"encoding/json"
	"net/http"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/finalizer-dev/finalizer/internal/pgcluster"
)

// startStandby makes a streaming standby of primary with pg_basebackup -R
// in dir, stopped at cleanup.
func startStandby(t *testing.T, primary *pgcluster.Cluster, dir string) *pgcluster.Cluster {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	s, err := primary.StartStandby(ctx, pgcluster.Options{Dir: dir, Settings: fastPG})
	if err != nil {
		t.Fatalf("start standby: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := s.Stop(ctx); err != nil {
			t.Error(err)
		}
	})
	return s
}

// multiHostURL is primary's URL naming both servers, in order, and asking
// for the one that accepts writes.
func multiHostURL(primary, standby *pgcluster.Cluster) string {
	p, s := "127.0.0.1:"+strconv.Itoa(primary.Port()), "127.0.0.1:"+strconv.Itoa(standby.Port())
	return strings.Replace(primary.URL(), p, p+","+s, 1) + "&target_session_attrs=read-write"
}

// PostgreSQL failover: a primary and a streaming standby made with
// pg_basebackup -R, the service given both through a multi-host URL with
// target_session_attrs=read-write. The standby stops receiving WAL, so
// the primary's last verdict is lost in the failover as asynchronous
// replication can lose it; the primary dies and the standby is promoted.
// The service reconnects to the new primary, every tracker re-asserts the
// verdict it last wrote (the lost one comes back with no new event), the
// verdicts keep moving, and a `finalizer wait` and an HTTP long-poll
// blocked since before the failover are released by the next move.
func TestPostgresFailover(t *testing.T) {
	began := time.Now()
	root := openDir(t)
	primary := startCluster(t, filepath.Join(root, "primary"), 0, fastPG)
	standby := startStandby(t, primary, filepath.Join(root, "standby"))
	url := multiHostURL(primary, standby)
	t.Logf("standby ready after %v", time.Since(began).Round(time.Millisecond))

	config := `
tables:
  - table: "fo.{name}"
    query: "fo_*"
    granularity: hour
`
	// Two replicas with the ownership of tables (ADR 0020): one writes;
	// after the failover, whichever takes the buckets on the promoted
	// standby writes again what it holds.
	s := startServe(t, serveOpts{pgURL: url, config: config})
	s2 := startServe(t, serveOpts{pgURL: url, natsURL: s.natsURL, config: config})
	pub := connect(t, s.natsURL)
	q, r, table := id(0xf00), id(0xf01), "fo.fo_orders"
	pub.publish("started", q, r, startedJSON(q, r, "fo_orders"))
	eventually(t, "the run tracked", func() bool { return tracked(t, s.httpURL, r) && tracked(t, s2.httpURL, r) })
	pub.publish("progress", q, r, progressAt(q, r, "fo_orders", 1, "2026-09-28T13:10:00"))
	waitVerdict(t, url, table, "2026-09-28T13:00:00Z")
	pub.publish("progress", q, r, progressAt(q, r, "fo_orders", 2, "2026-09-28T14:05:00"))
	waitVerdict(t, url, table, "2026-09-28T14:00:00Z")
	// Replayed on the standby (which may not even have the table yet).
	eventually(t, "the standby replayed 14:00", func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		conn, err := pgx.Connect(ctx, standby.URL())
		if err != nil {
			return false
		}
		defer conn.Close(ctx)
		var until time.Time
		err = conn.QueryRow(ctx, `SELECT finalized_until FROM public.table_finalization WHERE table_name = $1`, table).Scan(&until)
		return err == nil && until.Equal(utc("2026-09-28T14:00:00Z"))
	})

	// A downstream job waits for 15:00-16:00, across the failover.
	waitCtx, cancelWait := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancelWait()
	waiter := exec.CommandContext(waitCtx, binary, "wait", "--table", table, "--until", "2026-09-28T17:00:00Z", "--timeout", "90s")
	waiter.Env = append(cleanEnv(), "FINALIZER_POSTGRES_URL="+url)
	var waitOut, waitErr syncBuffer
	waiter.Stdout, waiter.Stderr = &waitOut, &waitErr
	if err := waiter.Start(); err != nil {
		t.Fatal(err)
	}
	waited := make(chan error, 1)
	go func() { waited <- waiter.Wait() }()
	// And the service's HTTP long-poll, on the LISTEN connection it shares.
	type finalDoc struct {
		Status int
		Final  bool `json:"final"`
		Err    error
	}
	polled := make(chan finalDoc, 1)
	go func() {
		var doc finalDoc
		resp, err := http.Get(s.httpURL + "/v1/tables/" + table + "/final?period_end=2026-09-28T17:00:00Z&wait=90s")
		if err != nil {
			doc.Err = err
		} else {
			doc.Status = resp.StatusCode
			doc.Err = json.NewDecoder(resp.Body).Decode(&doc)
			resp.Body.Close()
		}
		polled <- doc
	}()

	// The standby stops receiving WAL (DetachStandby returns once its
	// receiver has stopped): 15:00 reaches the primary only.
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := standby.DetachStandby(ctx); err != nil {
		t.Fatal(err)
	}
	pub.publish("progress", q, r, progressAt(q, r, "fo_orders", 3, "2026-09-28T15:05:00"))
	waitVerdict(t, primary.URL(), table, "2026-09-28T15:00:00Z")
	time.Sleep(500 * time.Millisecond)
	if row, _ := readRow(t, standby.URL(), table); !row.FinalizedUntil.Equal(utc("2026-09-28T14:00:00Z")) {
		t.Fatalf("the detached standby is at %v, want 14:00 (the 15:00 write must be lost in the failover)", row.FinalizedUntil)
	}

	// The primary dies; the standby is promoted. No event is published:
	// only the re-assert can bring 15:00 back.
	failedAt := time.Now()
	if err := primary.Crash(ctx); err != nil {
		t.Fatal(err)
	}
	if err := standby.Promote(ctx); err != nil {
		t.Fatal(err)
	}
	t.Logf("promoted after %v", time.Since(began).Round(time.Millisecond))
	back := waitVerdict(t, url, table, "2026-09-28T15:00:00Z")
	t.Logf("the lost verdict was re-asserted %v after the primary died", time.Since(failedAt).Round(time.Millisecond))
	if back.BatchID != 3 || back.RunID != r {
		t.Errorf("re-asserted row: batch %d run %s, want the provenance of batch 3", back.BatchID, back.RunID)
	}
	// Counted once the statement returns, a moment after the commit: by a
	// tracker's re-assert, or by the held advances an owner writes when it
	// takes the buckets on the promoted standby, on one replica.
	eventually(t, "one restore counted", func() bool {
		n := 0.0
		for _, p := range []*proc{s, s2} {
			n += sample(t, p.httpURL, `finalizer_reasserts_total{outcome="restored"}`)
			n += sample(t, p.httpURL, `finalizer_ownership_held_moved_total{why="flush"}`)
		}
		return n == 1
	})
	select {
	case err := <-waited:
		t.Fatalf("wait returned before 17:00 was final: %v\n%s%s", err, waitOut.String(), waitErr.String())
	case doc := <-polled:
		t.Fatalf("the HTTP long-poll returned before 17:00 was final: %+v", doc)
	default:
	}

	// Verdicts keep moving on the new primary; the blocked wait is
	// released by the move.
	watch := watchVerdict(t, url, table)
	pub.publish("progress", q, r, progressAt(q, r, "fo_orders", 4, "2026-09-28T16:05:00"))
	waitVerdict(t, url, table, "2026-09-28T16:00:00Z")
	pub.publish("progress", q, r, progressAt(q, r, "fo_orders", 5, "2026-09-28T17:01:00"))
	waitVerdict(t, url, table, "2026-09-28T17:00:00Z")
	select {
	case err := <-waited:
		if err != nil {
			t.Fatalf("wait: %v\n%s%s", err, waitOut.String(), waitErr.String())
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("wait still blocked after the verdict reached 17:00\n%s%s", waitOut.String(), waitErr.String())
	}
	select {
	case doc := <-polled:
		if doc.Err != nil || doc.Status != http.StatusOK || !doc.Final {
			t.Errorf("the HTTP long-poll across the failover: %+v, want 200 and final", doc)
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("the HTTP long-poll still blocked after the verdict reached 17:00")
	}
	if !strings.Contains(waitOut.String(), "final until 2026-09-28T17:00:00Z") {
		t.Errorf("wait printed %q", waitOut.String())
	}
	watch.check(t, "2026-09-28T17:00:00Z")
	if code, body := httpGet(t, s.httpURL+"/readyz", ""); code != 200 {
		t.Errorf("/readyz after the failover: %d %s", code, body)
	}
	t.Logf("took %v", time.Since(began).Round(time.Millisecond))
}
