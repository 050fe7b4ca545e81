package pgcluster

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// TestDetachStandbyReceivesNothingMore: once DetachStandby returns, the
// standby receives nothing more from its primary. A commit made on the
// primary straight after it (no sleep) never reaches the standby.
// pg_ctl reload only signals the server, which stops its WAL receiver in
// its own time: before DetachStandby waited for that, a commit made at
// once could still be streamed (TestPostgresFailover slept 500 ms for it,
// which a loaded machine may not honour).
func TestDetachStandbyReceivesNothingMore(t *testing.T) {
	needInstallation(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	base := filepath.Dir(clusterDir(t))
	settings := map[string]string{"fsync": "off", "synchronous_commit": "off", "full_page_writes": "off"}
	primary := startCluster(t, Options{Dir: filepath.Join(base, "primary"), Settings: settings})
	standby, err := primary.StartStandby(ctx, Options{Dir: filepath.Join(base, "standby"), Settings: settings})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := standby.Stop(context.Background()); err != nil {
			t.Error(err)
		}
	})
	pc, err := pgx.Connect(ctx, primary.URL())
	if err != nil {
		t.Fatal(err)
	}
	defer pc.Close(ctx)
	// Each commit's WAL is written and sent at once (the cluster's
	// synchronous_commit=off would leave it to the WAL writer's delay).
	if _, err := pc.Exec(ctx, `SET synchronous_commit = on; CREATE TABLE detach (n int); INSERT INTO detach VALUES (1)`); err != nil {
		t.Fatal(err)
	}
	count := func() (int, error) {
		sc, err := pgx.Connect(ctx, standby.URL())
		if err != nil {
			return 0, err
		}
		defer sc.Close(ctx)
		var n int
		err = sc.QueryRow(ctx, `SELECT count(*) FROM detach`).Scan(&n)
		return n, err
	}
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(20 * time.Millisecond) {
		if n, err := count(); err == nil && n == 1 {
			break
		} else if time.Now().After(deadline) {
			t.Fatalf("the standby did not replay the first row: %d rows, %v", n, err)
		}
	}

	if err := standby.DetachStandby(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := pc.Exec(ctx, `INSERT INTO detach VALUES (2)`); err != nil {
		t.Fatal(err)
	}
	// Streamed, the row would be replayed in milliseconds.
	for end := time.Now().Add(time.Second); time.Now().Before(end); time.Sleep(50 * time.Millisecond) {
		n, err := count()
		if err != nil {
			t.Fatal(err)
		}
		if n != 1 {
			t.Fatalf("the detached standby has %d rows, want 1: it received a commit made after DetachStandby returned", n)
		}
	}
}
