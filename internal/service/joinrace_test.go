package service

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"go.uber.org/zap"

	"github.com/finalizer-dev/finalizer/finalizer"
	"github.com/finalizer-dev/finalizer/internal/pgcluster/pgtest"
	"github.com/finalizer-dev/finalizer/progress"
)

// TestATableWaitsForTheJoinALockHeldBack (the locked-table join race, on
// real NATS and PostgreSQL): query lk-a feeds lk.t alone (13:00); another
// session holds the table's control row FOR SHARE when query lk-b's run
// starts, so lk-b's join waits; lk-a reports 15:10 meanwhile. Once the
// lock goes, lk-b joins, and the table stays at 13:00, where it stood when
// lk-b started: lk-a's retries must not move it first, past data lk-b
// was writing since its start.
func TestATableWaitsForTheJoinALockHeldBack(t *testing.T) {
	spec, err := progress.ParseSpec(progress.SpecOptions{})
	if err != nil {
		t.Fatal(err)
	}
	url := pgtest.URL(t)
	svc, nc := startTestWith(t, Options{PostgresURL: url, Logger: zap.NewNop(),
		Registry: finalizer.RegistryConfig{
			Tracker: finalizer.TrackerOptions{RetryDelay: time.Second, Retries: 2},
			Rules:   []finalizer.Rule{{Table: "lk.t", Query: "lk-*", Spec: spec}},
		}})
	ctx := context.Background()
	const (
		queryA, runA = "0a0a0a0a-0000-4000-8000-000000000001", "0a0a0a0a-1111-4000-8000-000000000001"
		queryB, runB = "0b0b0b0b-0000-4000-8000-000000000002", "0b0b0b0b-1111-4000-8000-000000000002"
	)
	publish := func(kind, q, r, body string) {
		t.Helper()
		if err := nc.Publish(fmt.Sprintf("spark.%s.%s.%s", kind, q, r), []byte(body)); err != nil {
			t.Fatal(err)
		}
		if err := nc.Flush(); err != nil {
			t.Fatal(err)
		}
	}
	started := func(q, r, name string) {
		publish("started", q, r, fmt.Sprintf(`{"id":%q,"runId":%q,"name":%q,"timestamp":"2026-09-28T12:00:00.000Z"}`, q, r, name))
	}
	batch := 0
	progressAt := func(q, r, name, ts string) {
		batch++
		publish("progress", q, r, fmt.Sprintf(`{"id":%q,"runId":%q,"name":%q,"timestamp":"2026-09-28T12:00:00.000Z","batchId":%d,"numInputRows":1,`+
			`"sources":[{"description":"s","startOffset":null,"endOffset":{"commit_ts":%q},"numInputRows":1}],"sink":{"description":"k"}}`, q, r, name, batch, ts))
	}
	verdict := func() time.Time {
		v, err := svc.Store().Get(ctx, "lk.t")
		if err != nil {
			return time.Time{}
		}
		return v.FinalizedUntil
	}
	at13 := time.Date(2026, 9, 28, 13, 0, 0, 0, time.UTC)
	started(queryA, runA, "lk-a")
	progressAt(queryA, runA, "lk-a", "2026-09-28T13:10:00")
	for deadline := time.Now().Add(10 * time.Second); !verdict().Equal(at13); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("lk.t at %v, want 13:00 from lk-a alone", verdict())
		}
	}
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	tx, err := conn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	if _, err := tx.Exec(ctx, `SELECT * FROM table_finalization WHERE table_name = 'lk.t' FOR SHARE`); err != nil {
		t.Fatal(err)
	}
	started(queryB, runB, "lk-b")
	time.Sleep(3 * time.Second) // lk-b's join meets the lock (1 s) and waits, then sleeps between tries
	progressAt(queryA, runA, "lk-a", "2026-09-28T15:10:00")
	time.Sleep(300 * time.Millisecond) // lk-a's advance tried and retried
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	progressAt(queryA, runA, "lk-a", "2026-09-28T15:20:00") // lk-a's next batch, as the lock goes
	joined := func() bool {
		fs, err := svc.Store().Feeders(ctx, "lk.t")
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range fs {
			if f.Feeder == queryB {
				return true
			}
		}
		return false
	}
	for deadline := time.Now().Add(20 * time.Second); !joined(); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("lk-b did not join lk.t after the lock went")
		}
	}
	time.Sleep(1500 * time.Millisecond) // lk-a's retries, after the join
	if v := verdict(); !v.Equal(at13) {
		t.Fatalf("lk.t at %v after the lock went, want 13:00: lk-a moved it before lk-b joined", v)
	}
}

// TestATableWaitsForAnEarlyJoinALockHeldBack (real NATS and PostgreSQL):
// the early join of a restart's recovery (finalizer.Registry.HoldDiscovery,
// taken here as the recovery takes it) meets a lock. Query lk-a feeds
// lk.t alone (13:00); lk-b's run was seen without a name (an idle event),
// so no rule could map it; its name comes in a live progress while
// discovery is held, and its join to lk.t (made at once, its start waiting
// for the release) meets another session's FOR SHARE on the table's
// control row. lk-a reports 15:10 meanwhile, and 15:20 as the lock goes.
// The early join that failed was dropped (DEBUG): lk-a's retries moved
// the table to 15:00 before lk-b's start, after the release, joined it.
// The table now waits for the early join, retried until it succeeds,
// and stays at 13:00.
func TestATableWaitsForAnEarlyJoinALockHeldBack(t *testing.T) {
	spec, err := progress.ParseSpec(progress.SpecOptions{})
	if err != nil {
		t.Fatal(err)
	}
	url := pgtest.URL(t)
	svc, nc := startTestWith(t, Options{PostgresURL: url, Logger: zap.NewNop(),
		Registry: finalizer.RegistryConfig{
			Tracker: finalizer.TrackerOptions{RetryDelay: time.Second, Retries: 2},
			Rules:   []finalizer.Rule{{Table: "lk.t", Query: "lk-*", Spec: spec}},
		}})
	ctx := context.Background()
	const (
		queryA, runA = "0a0a0a0a-0000-4000-8000-000000000011", "0a0a0a0a-1111-4000-8000-000000000011"
		queryB, runB = "0b0b0b0b-0000-4000-8000-000000000012", "0b0b0b0b-1111-4000-8000-000000000012"
	)
	publish := func(kind, q, r, body string) {
		t.Helper()
		if err := nc.Publish(fmt.Sprintf("spark.%s.%s.%s", kind, q, r), []byte(body)); err != nil {
			t.Fatal(err)
		}
		if err := nc.Flush(); err != nil {
			t.Fatal(err)
		}
	}
	batch := 0
	progressAt := func(q, r, name, ts string) {
		batch++
		publish("progress", q, r, fmt.Sprintf(`{"id":%q,"runId":%q,"name":%q,"timestamp":"2026-09-28T12:00:00.000Z","batchId":%d,"numInputRows":1,`+
			`"sources":[{"description":"s","startOffset":null,"endOffset":{"commit_ts":%q},"numInputRows":1}],"sink":{"description":"k"}}`, q, r, name, batch, ts))
	}
	verdict := func() time.Time {
		v, err := svc.Store().Get(ctx, "lk.t")
		if err != nil {
			return time.Time{}
		}
		return v.FinalizedUntil
	}
	joined := func() bool {
		fs, err := svc.Store().Feeders(ctx, "lk.t")
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range fs {
			if f.Feeder == queryB {
				return true
			}
		}
		return false
	}
	at13 := time.Date(2026, 9, 28, 13, 0, 0, 0, time.UTC)
	publish("started", queryA, runA, fmt.Sprintf(`{"id":%q,"runId":%q,"name":"lk-a","timestamp":"2026-09-28T12:00:00.000Z"}`, queryA, runA))
	progressAt(queryA, runA, "lk-a", "2026-09-28T13:10:00")
	for deadline := time.Now().Add(10 * time.Second); !verdict().Equal(at13); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("lk.t at %v, want 13:00 from lk-a alone", verdict())
		}
	}
	// lk-b seen without a name: no rule maps it.
	publish("idle", queryB, runB, fmt.Sprintf(`{"id":%q,"runId":%q,"timestamp":"2026-09-28T12:00:10.000Z"}`, queryB, runB))
	time.Sleep(500 * time.Millisecond)
	release := svc.Registry().HoldDiscovery() // as a restart's recovery holds it
	defer release()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	tx, err := conn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	if _, err := tx.Exec(ctx, `SELECT * FROM table_finalization WHERE table_name = 'lk.t' FOR SHARE`); err != nil {
		t.Fatal(err)
	}
	progressAt(queryB, runB, "lk-b", "2026-09-28T12:30:00") // its name, live, under the hold
	time.Sleep(3 * time.Second)                             // lk-b's early join meets the lock (1 s)
	if joined() {
		t.Fatal("lk-b joined lk.t through the lock")
	}
	waits := svc.Registry().JoinWaits()
	if len(waits) != 1 || waits[0].Table != "lk.t" || waits[0].QueryID != queryB || !strings.Contains(waits[0].LastError, "locked") {
		t.Errorf("join waits %+v, want lk.t waiting for lk-b's join, locked", waits)
	}
	progressAt(queryA, runA, "lk-a", "2026-09-28T15:10:00")
	time.Sleep(300 * time.Millisecond) // lk-a's advance tried and retried
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	progressAt(queryA, runA, "lk-a", "2026-09-28T15:20:00") // lk-a's next batch, as the lock goes
	// lk-b joins before the release (retried), or at its start after it.
	for deadline := time.Now().Add(20 * time.Second); !joined(); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			release()
		}
		if time.Now().After(deadline.Add(10 * time.Second)) {
			t.Fatal("lk-b did not join lk.t after the lock went")
		}
	}
	time.Sleep(2500 * time.Millisecond) // lk-a's retries, after the join
	if v := verdict(); !v.Equal(at13) {
		t.Fatalf("lk.t at %v after the lock went, want 13:00: lk-a moved it before lk-b joined", v)
	}
}
