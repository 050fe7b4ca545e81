package bench

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// flushBeforeLatency does, before a latency phase, what the phases
// before it left for the database and the disk: the vacuum and analyze
// of the bench's tables that autovacuum would start within its minute's
// nap (after N first verdicts, N dead rows of the control table),
// PostgreSQL's dirty buffers (CHECKPOINT), then every dirty page of the
// machine's page cache (sync(2)), the embedded NATS server's stream
// files among them, which it does not fsync for two minutes. Tracking N runs, their N first verdicts and the
// ingest write hundreds of megabytes at 100,000 runs; left dirty, the
// kernel writes them back 30 s later, in 5 s ticks of up to 200 MB that
// land in the phase, and every commit's WAL flush waits behind them
// (BENCHMARKS.md, "The latency tail at 100,000 (ninth pass, 2026-12-06,
// fourth session)"). That is the bench's own writes, in proportion to N,
// on the one disk it shares with PostgreSQL; the phase measures the
// service at its rate. What it flushed and how long it took are in out;
// NoFlush skips it. A CHECKPOINT refused (a PostgreSQL given by URL
// whose user may not) is said and the phase goes on.
func (r *runner) flushBeforeLatency(ctx context.Context, out *Latency) {
	if r.cfg.NoFlush {
		return
	}
	start := time.Now()
	dirty := dirtyBytes()
	if err := r.vacuumAndCheckpoint(ctx); err != nil {
		r.say("before the latency phase: %v; the bench's tables and PostgreSQL's dirty buffers may be left as they are", err)
	}
	syncDisks()
	out.FlushS = time.Since(start).Seconds()
	if dirty >= 0 {
		out.FlushDirtyMiB = float64(dirty) / (1 << 20)
	}
	was := "the page cache's dirty data not known on this system"
	if dirty >= 0 {
		was = fmt.Sprintf("%.0f MiB of the page cache was dirty", float64(dirty)/(1<<20))
	}
	r.say("before the latency phase: VACUUM ANALYZE of the bench's tables, a CHECKPOINT and sync(2) in %s (%s)",
		time.Since(start).Round(time.Millisecond), was)
}

// vacuumAndCheckpoint runs VACUUM ANALYZE on every table of the bench's schema,
// then CHECKPOINT, on a connection of its own to the bench's PostgreSQL.
func (r *runner) vacuumAndCheckpoint(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	conn, err := pgx.Connect(ctx, r.pgURL)
	if err != nil {
		return fmt.Errorf("checkpoint: %w", err)
	}
	defer func() { _ = conn.Close(context.Background()) }()
	rows, err := conn.Query(ctx, "SELECT tablename FROM pg_tables WHERE schemaname = $1 ORDER BY tablename", r.schema)
	if err != nil {
		return fmt.Errorf("vacuum: the bench's tables: %w", err)
	}
	tables, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return fmt.Errorf("vacuum: the bench's tables: %w", err)
	}
	for _, t := range tables {
		if _, err := conn.Exec(ctx, "VACUUM (ANALYZE) "+pgx.Identifier{r.schema, t}.Sanitize()); err != nil {
			return fmt.Errorf("vacuum %s.%s: %w", r.schema, t, err)
		}
	}
	if _, err := conn.Exec(ctx, "CHECKPOINT"); err != nil {
		return fmt.Errorf("checkpoint: %w", err)
	}
	return nil
}
