package bench

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
)

// DefaultCommitProbeRate is how many lone commits a second the commit
// probe makes beside a latency phase: 500 in the default 10 s phase, so
// that its p99 is the fifth slowest, while adding a small share to the
// commits of the service's group commit at 1,000 events/s.
const DefaultCommitProbeRate = 50

// commitProbeTimeout bounds one probe's statement; a probe that takes
// longer is counted at this bound (the phase's own waits are longer).
const commitProbeTimeout = 10 * time.Second

// commitProbe measures, beside a latency phase and in the same window,
// what PostgreSQL and the disk give any writer: a lone commit of the
// control table's shape (one row updated and a NOTIFY sent, in one
// implicit transaction, so the commit flushes the WAL and takes the
// NOTIFY lock as an advance's does), made at a steady rate on a
// connection of its own and timed from sending the statement to its
// result. Its p99 is the floor the crossings' p99 stands on: a crossing
// cannot be heard before its commit is durable, and when a WAL flush
// stalls (the disk) every commit in the window waits for it, the
// probe's as the service's. The bench reports the crossings' p99 over
// the probe's, a ratio measured in the same window on the same machine
// (BENCHMARKS.md, "The latency phase's commit probe").
type commitProbe struct {
	cancel context.CancelFunc
	done   chan struct{}

	mu   sync.Mutex
	lat  []time.Duration
	fail error // the first statement that failed, if any
}

// startCommitProbe creates the probe's table in the bench's schema (64
// rows, each updated in turn) and starts probing at rate a second until
// finish. A rate of 0 or less probes nothing (nil, nil).
func (r *runner) startCommitProbe(ctx context.Context, rate float64) (*commitProbe, error) {
	if rate <= 0 {
		return nil, nil
	}
	conn, err := pgx.Connect(ctx, r.pgURL)
	if err != nil {
		return nil, fmt.Errorf("commit probe: %w", err)
	}
	table := pgx.Identifier{r.schema, "bench_commit_probe"}.Sanitize()
	if _, err := conn.Exec(ctx, `CREATE TABLE IF NOT EXISTS `+table+` (id int PRIMARY KEY, n bigint NOT NULL DEFAULT 0) WITH (fillfactor = 50);
INSERT INTO `+table+` (id) SELECT g FROM generate_series(0, 63) g ON CONFLICT DO NOTHING`); err != nil {
		_ = conn.Close(context.Background())
		return nil, fmt.Errorf("commit probe: its table: %w", err)
	}
	pctx, cancel := context.WithCancel(ctx)
	p := &commitProbe{cancel: cancel, done: make(chan struct{})}
	stmt := `WITH u AS (UPDATE ` + table + ` SET n = n + 1 WHERE id = $1 RETURNING n)
SELECT pg_notify('finalizer_bench_commit_probe', n::text) FROM u`
	go p.loop(pctx, conn, stmt, rate)
	return p, nil
}

// loop makes the probe's commits, one after the other, at rate a second
// from its start: a commit that overran its slot delays the next ones,
// which then go at once until the schedule is met again.
func (p *commitProbe) loop(ctx context.Context, conn *pgx.Conn, stmt string, rate float64) {
	defer close(p.done)
	defer func() { _ = conn.Close(context.Background()) }()
	start := time.Now()
	for i := 0; ; i++ {
		next := start.Add(time.Duration(float64(i) / rate * float64(time.Second)))
		select {
		case <-ctx.Done():
			return
		case <-time.After(time.Until(next)):
		}
		sctx, cancel := context.WithTimeout(ctx, commitProbeTimeout)
		began := time.Now()
		_, err := conn.Exec(sctx, stmt, i%64)
		took := time.Since(began)
		cancel()
		if ctx.Err() != nil {
			return
		}
		p.mu.Lock()
		if err != nil && p.fail == nil {
			p.fail = err
		}
		p.lat = append(p.lat, took)
		p.mu.Unlock()
		if err != nil && sctx.Err() == nil {
			return // the connection is gone or the statement refused: reported by finish
		}
	}
}

// finish stops the probe, waits for its goroutine and returns every
// commit's time and the first error. A nil probe returns nothing.
func (p *commitProbe) finish() ([]time.Duration, error) {
	if p == nil {
		return nil, nil
	}
	p.cancel()
	<-p.done
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.lat, p.fail
}
