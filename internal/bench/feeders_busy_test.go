package bench

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/finalizer-dev/finalizer/internal/pgcluster/pgtest"
)

// TestFeedersRetriesBusyAdvances: another session holds one table's row
// past the lock wait while a measured period of the feeders phase runs.
// That table's advances fail alone with control.ErrBusy while their
// batches succeed; the phase used to ignore every entry's error and
// failed at its final check ("a table of 3 feeders ended at 04:00, want
// 05:00", seen on a loaded machine in the fifth pass). Now it sends them
// again, as a tracker retries them, and every table ends at the last
// period.
func TestFeedersRetriesBusyAdvances(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	url := pgtest.URL(t)
	var log strings.Builder
	r := &runner{cfg: Config{Log: &log}.withDefaults(), pgURL: url, schema: fmt.Sprintf("bench_busy%d", time.Now().UnixNano()%1e6)}
	defer func() {
		if conn, err := pgx.Connect(context.Background(), url); err == nil {
			_, _ = conn.Exec(context.Background(), "DROP SCHEMA IF EXISTS "+pgx.Identifier{r.schema}.Sanitize()+" CASCADE")
			_ = conn.Close(context.Background())
		}
	}()
	held := make(chan error, 1)
	r.feedersPeriod = func(ctx context.Context, table string, period int) {
		if period != 2 {
			return
		}
		conn, err := pgx.Connect(ctx, url)
		if err != nil {
			t.Error(err)
			return
		}
		tx, err := conn.Begin(ctx)
		if err == nil {
			_, err = tx.Exec(ctx, "SELECT * FROM "+table+" WHERE table_name = 'bench.feeders.t00000' FOR SHARE")
		}
		if err != nil {
			t.Error(err)
			_ = conn.Close(ctx)
			return
		}
		go func() { // held past the one-second lock wait, then released
			time.Sleep(2500 * time.Millisecond)
			err := tx.Rollback(context.Background())
			_ = conn.Close(context.Background())
			held <- err
		}()
	}
	out, err := r.feeders(ctx, 8, 3, 4)
	t.Log(log.String())
	if err != nil {
		t.Fatal(err)
	}
	if err := <-held; err != nil {
		t.Fatal(err)
	}
	// Every (table, period) moved its table's row once: the held table's
	// period 2 too (ignored, its move was missing, and only a held last
	// period was caught, by the final check).
	if out.MovesPerPeriod != 1 {
		t.Errorf("%.3f moves of the table's row per (table, period), want 1.00", out.MovesPerPeriod)
	}
	if out.BusyRetries == 0 {
		t.Errorf("no advance sent again; want the held table's (the lock was held past the lock wait)")
	}
}
