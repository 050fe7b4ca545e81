package service

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/nats-io/nats.go"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/finalizer-dev/finalizer/control"
	"github.com/finalizer-dev/finalizer/internal/embeddednats"
	"github.com/finalizer-dev/finalizer/internal/pgcluster/pgtest"
	"github.com/finalizer-dev/finalizer/listener"
)

// TestMain starts one throwaway PostgreSQL cluster for the package and
// checks for leaked goroutines after the run.
func TestMain(m *testing.M) { pgtest.Main(m) }

const (
	testQuery = "8d268dc2-bc9c-4be8-97a9-b135d2943028"
	oldRun    = "e225d92f-2545-48f8-87a2-9c0309580f8a"
	newRun    = "11111111-2222-4333-8444-555555555555"
)

// startTest starts the service on an embedded NATS server and a fresh
// database, and returns it with a plain NATS connection for publishing.
func startTest(t *testing.T) (*Service, *nats.Conn) {
	t.Helper()
	return startTestWith(t, Options{})
}

// startTestWith is startTest with opts, whose data directory, NATS server
// and database (unless opts names them: NATS.URL, PostgresURL) it fills in.
func startTestWith(t *testing.T, opts Options) (*Service, *nats.Conn) {
	t.Helper()
	opts.DataDir = t.TempDir()
	if opts.NATS.URL == "" {
		opts.EmbeddedNATS = &embeddednats.Options{Host: "127.0.0.1", Port: embeddednats.RandomPort}
	}
	if opts.PostgresURL == "" {
		opts.PostgresURL = pgtest.URL(t)
	}
	svc, err := Start(context.Background(), opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { svc.Stop(context.Background()) })
	nc, err := nats.Connect(svc.NATSURL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	return svc, nc
}

func publish(t *testing.T, nc *nats.Conn, kind, run, payload string) {
	t.Helper()
	if err := nc.Publish(fmt.Sprintf("spark.%s.%s.%s", kind, testQuery, run), []byte(payload)); err != nil {
		t.Fatal(err)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
}

func startedAt(run, ts string) string {
	return fmt.Sprintf(`{"id":%q,"runId":%q,"name":"orders","timestamp":"%s.000Z"}`, testQuery, run, ts)
}

func progressAt(run string, batch int64, commitTS string) string {
	return fmt.Sprintf(`{"id":%q,"runId":%q,"name":"orders","timestamp":"2026-09-28T15:00:00.000Z","batchId":%d,`+
		`"sources":[{"description":"s","startOffset":null,"endOffset":{"commit_ts":%q}}],"eventTime":{}}`, testQuery, run, batch, commitTS)
}

func track(t *testing.T, svc *Service, run string) {
	t.Helper()
	rep := svc.handleTrack(context.Background(), listener.TrackRequest{QueryID: testQuery, RunID: run, Table: "t"})
	if !rep.OK {
		t.Fatalf("track %s: %+v", run, rep)
	}
}

func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// Issue 18, bug 2, through the track API: a retried `finalizer track` of
// the old run never stops the new run's tracker.
func TestRetriedTrackOfTheOldRunKeepsTheNewRun(t *testing.T) {
	svc, nc := startTest(t)
	publish(t, nc, "started", oldRun, startedAt(oldRun, "2026-09-28T12:00:00"))
	publish(t, nc, "started", newRun, startedAt(newRun, "2026-09-28T13:00:00"))
	track(t, svc, newRun)
	track(t, svc, oldRun) // the retry
	eventually(t, "only the new run tracked", func() bool {
		st := svc.Registry().Status()
		return len(st) == 1 && st[0].RunID == newRun
	})
	publish(t, nc, "progress", newRun, progressAt(newRun, 1, "2026-09-28T14:05:00"))
	eventually(t, "the new run's verdict", func() bool {
		v, err := svc.Store().Get(context.Background(), "t")
		return err == nil && v.FinalizedUntil.Equal(time.Date(2026, 9, 28, 14, 0, 0, 0, time.UTC))
	})
}

// Issue 18, bug 3: a join that the service's shutdown ends does not say
// done while the run is live.
func TestJoinIsNotDoneWhenTheServiceStops(t *testing.T) {
	svc, nc := startTest(t)
	track(t, svc, newRun)
	publish(t, nc, "progress", newRun, progressAt(newRun, 1, "2026-09-28T14:05:00"))
	got := make(chan listener.JoinReply, 1)
	go func() {
		got <- svc.handleJoin(context.Background(), listener.JoinRequest{RunID: newRun, Timeout: 20 * time.Second})
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	svc.registry.Close(ctx)
	if rep := <-got; rep.Done {
		t.Fatalf("join = %+v during a shutdown, want not done", rep)
	}
}

// Issue 18: a track request has a deadline. While the control database
// does not answer (the tracks table locked by another session), the
// handler replies with an error within Options.TrackTimeout instead of
// holding its request slot until the lock goes.
func TestTrackOnAStuckStoreEndsAtItsDeadline(t *testing.T) {
	svc, _ := startTestWith(t, Options{TrackTimeout: 300 * time.Millisecond})
	ctx := context.Background()
	unlock := lockTracksTable(t, svc.pgURL)
	got := make(chan listener.TrackReply, 1)
	go func() {
		got <- svc.handleTrack(ctx, listener.TrackRequest{QueryID: testQuery, RunID: newRun, Table: "t"})
	}()
	select {
	case rep := <-got:
		if rep.OK || rep.Error == "" {
			t.Fatalf("track on a stuck store: %+v, want an error", rep)
		}
		t.Logf("reply: %+v", rep)
	case <-time.After(10 * time.Second):
		unlock() // frees the handler, so that the service stops
		<-got
		t.Fatal("track on a stuck store still running after 10s")
	}
	if st := svc.Registry().Status(); len(st) != 0 {
		t.Errorf("a failed track left trackers: %+v", st)
	}
}

// An announcement on the notification channel that cannot be read (anyone
// who may NOTIFY in the database can send one) is no reconnect of the
// control database: the trackers do not re-assert (one write per tracker
// each time, which the bench counted as extra writes per period).
func TestUnreadableAnnouncementIsNoReconnect(t *testing.T) {
	core, logs := observer.New(zapcore.InfoLevel)
	svc, nc := startTestWith(t, Options{Logger: zap.New(core)})
	publish(t, nc, "started", newRun, startedAt(newRun, "2026-09-28T13:00:00"))
	track(t, svc, newRun)
	publish(t, nc, "progress", newRun, progressAt(newRun, 1, "2026-09-28T14:05:00"))
	eventually(t, "the verdict", func() bool {
		v, err := svc.Store().Get(context.Background(), "t")
		return err == nil && !v.FinalizedUntil.IsZero()
	})
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, svc.pgURL)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	for _, payload := range []string{"not json", `{"finalized_until":"2026-09-28T14:00:00Z"}`, `{"table":"t","finalized_until":"yesterday"}`} {
		if _, err := conn.Exec(ctx, "SELECT pg_notify($1, $2)", control.NotifyChannel, payload); err != nil {
			t.Fatal(err)
		}
	}
	// A move announced after them proves they were dispatched.
	publish(t, nc, "progress", newRun, progressAt(newRun, 2, "2026-09-28T15:05:00"))
	eventually(t, "the next verdict", func() bool {
		v, err := svc.Store().Get(context.Background(), "t")
		return err == nil && v.FinalizedUntil.Equal(time.Date(2026, 9, 28, 15, 0, 0, 0, time.UTC))
	})
	time.Sleep(200 * time.Millisecond)
	if n := logs.FilterMessage("control database connection re-established; every tracker re-asserts its last verdict").Len(); n != 0 {
		t.Fatalf("%d re-asserts of every tracker after unreadable announcements, want 0", n)
	}
}

// lockTracksTable locks the persisted tracks' table in a transaction of
// another session, so that the control database does not answer for it,
// and returns what releases the lock (again at the end of the test).
func lockTracksTable(t *testing.T, pgURL string) (unlock func()) {
	t.Helper()
	end := lockIn(t, pgURL, `LOCK TABLE public.table_finalization_tracks IN ACCESS EXCLUSIVE MODE`)
	return func() { _ = end() }
}
