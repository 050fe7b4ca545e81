//go:build linux

package tests

import (
	"context"
	"fmt"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/finalizer-dev/finalizer/internal/embeddednats"
	"github.com/finalizer-dev/finalizer/internal/natstest"
	"github.com/finalizer-dev/finalizer/internal/pgcluster/pgtest"
)

// takeoverBound is the longest a takeover may take, from the owner's
// death to the held verdicts written: a poll of the locks (1 s) and one
// statement, with room for a loaded machine. It is well below the grace
// (set to a minute here), so a write within it is the takeover's, not a
// fallback's.
const takeoverBound = 8 * time.Second

// TestOwnershipTakeover runs two and then three replicas of the built
// binary under a steady load of acknowledged events, with the ownership
// of tables on (one owner). The owner is frozen (SIGSTOP: its session
// and its locks live on, it writes nothing), the load stops, and the
// owner is killed with -9: PostgreSQL ends its session, and a survivor
// takes the buckets and writes the newest verdict it holds, without any
// new event, within takeoverBound. The load starts again and the verdicts
// keep moving under the new owner. No verdict ever moved back or ran
// ahead of the published events (the checker polls the control table
// throughout).
func TestOwnershipTakeover(t *testing.T) {
	for _, n := range []int{2, 3} {
		t.Run(fmt.Sprintf("%d replicas", n), func(t *testing.T) { ownershipTakeover(t, n) })
	}
}

func ownershipTakeover(t *testing.T, n int) {
	began := time.Now()
	pgURL := pgtest.URL(t)
	ns, err := embeddednats.Start(embeddednats.Options{Port: embeddednats.RandomPort, StoreDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer ns.Shutdown()
	config := `
ownership: {grace: 1m}
tables:
  - table: "own.{name}"
    query: "load_*"
    granularity: minute
`
	var procs []*proc
	for range n {
		procs = append(procs, startServe(t, serveOpts{pgURL: pgURL, natsURL: ns.ClientURL(), config: config, args: []string{"--log-level", "info"}}))
	}
	owner := -1
	eventually(t, "one replica owns every bucket", func() bool {
		owner = -1
		for i, p := range procs {
			switch metric(t, p.httpURL, "finalizer_ownership_buckets_owned") {
			case 64:
				owner = i
			case 0:
			default:
				return false
			}
		}
		return owner >= 0
	})

	_, js := natstest.Connect(t, ns.ClientURL())
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	var runs []*loadRun
	for i := range 4 {
		r := &loadRun{q: id(0x700 + 2*i + 16*n), r: id(0x701 + 2*i + 16*n), name: fmt.Sprintf("load_%d", i), acked: -1, attempted: -1}
		r.table = "own." + r.name
		if _, err := js.Publish(ctx, "spark.started."+r.q+"."+r.r, []byte(startedJSON(r.q, r.r, r.name))); err != nil {
			t.Fatal(err)
		}
		runs = append(runs, r)
	}
	for _, r := range runs {
		for _, p := range procs {
			eventually(t, "every replica tracks "+r.name, func() bool { return tracked(t, p.httpURL, r.r) })
		}
	}
	checker := checkAhead(t, pgURL, runs)
	load := func(from int64) (stop func()) {
		lctx, cancel := context.WithCancel(ctx)
		done := make(chan struct{})
		go func() { defer close(done); steadyLoadFrom(lctx, js, runs, 50*time.Millisecond, from) }()
		return func() { cancel(); <-done }
	}
	waitBatch := func(what string, b int64) {
		t.Helper()
		deadline := time.Now().Add(time.Minute)
		for {
			if a, _ := runs[len(runs)-1].bounds(); a >= b {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: the load did not reach batch %d", what, b)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	// reach waits until every table is at least at the verdict of its
	// last acknowledged batch (the checker sees to it that none runs
	// ahead).
	reach := func(what string, within time.Duration) time.Duration {
		t.Helper()
		start := time.Now()
		for _, r := range runs {
			acked, _ := r.bounds()
			lo := justified(acked)
			for {
				row, ok := readRow(t, pgURL, r.table)
				if ok && !row.FinalizedUntil.Before(lo) {
					break
				}
				if time.Since(start) > within {
					t.Fatalf("%s: %s at %v after %v, want %v", what, r.table, row.FinalizedUntil, within, lo)
				}
				time.Sleep(20 * time.Millisecond)
			}
		}
		return time.Since(start)
	}

	stop := load(0)
	waitBatch("before the faults", 20)
	reach("under the load", 30*time.Second)

	// The owner freezes: its session and locks live on, it writes
	// nothing; the others hold what the load brings.
	frozen := procs[owner]
	if err := frozen.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	a, _ := runs[0].bounds()
	waitBatch("while the owner is frozen", a+12)
	stop()
	last, _ := runs[0].bounds()
	time.Sleep(300 * time.Millisecond) // the survivors take the last events in
	behind := 0
	for _, r := range runs {
		if row, _ := readRow(t, pgURL, r.table); row.FinalizedUntil.Before(justified(last)) {
			behind++
		}
	}
	if behind == 0 {
		t.Fatalf("every table reached batch %d while its owner was frozen: did a non-owner write?", last)
	}
	// kill -9: PostgreSQL ends the frozen owner's session and releases its
	// locks. No event is published: only the takeover can write.
	t.Logf("%v: kill -9 of the owner (replica %d of %d) at batch %d, %d tables behind",
		time.Since(began).Round(time.Millisecond), owner+1, n, last, behind)
	frozen.kill()
	took := reach("after the owner's death, with no new event", takeoverBound)
	t.Logf("takeover: the held verdicts written %v after the kill", took.Round(time.Millisecond))
	var survivors []*proc
	for i, p := range procs {
		if i != owner {
			survivors = append(survivors, p)
		}
	}
	eventually(t, "a survivor owns every bucket", func() bool {
		sum := 0.0
		for _, p := range survivors {
			sum += metric(t, p.httpURL, "finalizer_ownership_buckets_owned")
		}
		return sum == 64
	})
	var flushed float64
	for _, p := range survivors {
		flushed += sample(t, p.httpURL, `finalizer_ownership_held_moved_total{why="flush"}`)
	}
	if flushed < 1 {
		t.Errorf("no survivor counted a held verdict moved by its takeover")
	}

	// Verdicts keep moving under the new owner.
	stop = load(last + 1)
	waitBatch("after the takeover", last+20)
	stop()
	reach("after the takeover, under the load", 30*time.Second)
	checker.verify()
	for _, p := range survivors {
		p.stop()
	}
	t.Logf("took %v", time.Since(began).Round(time.Millisecond))
}

// steadyLoadFrom is steadyLoad starting at batch from.
func steadyLoadFrom(ctx context.Context, js jetstream.JetStream, runs []*loadRun, every time.Duration, from int64) {
	for b := from; ctx.Err() == nil; b++ {
		ts := loadBase.Add(time.Duration(b) * loadStep).Format("2006-01-02T15:04:05")
		for _, r := range runs {
			r.mu.Lock()
			r.attempted = b
			r.mu.Unlock()
			subj := "spark.progress." + r.q + "." + r.r
			for ctx.Err() == nil {
				pctx, cancel := context.WithTimeout(ctx, time.Second)
				_, err := js.Publish(pctx, subj, []byte(progressAt(r.q, r.r, r.name, b, ts)))
				cancel()
				if err == nil {
					r.mu.Lock()
					r.acked = b
					r.mu.Unlock()
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
