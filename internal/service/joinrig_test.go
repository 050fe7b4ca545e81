package service

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/nats-io/nats.go"
	"go.uber.org/zap"

	"github.com/finalizer-dev/finalizer/control"
	"github.com/finalizer-dev/finalizer/finalizer"
	"github.com/finalizer-dev/finalizer/internal/pgcluster/pgtest"
	"github.com/finalizer-dev/finalizer/progress"
)

// The rigs of the join tests (joinrace_test.go, joinbusy_test.go): a
// table's control row held by another session, Spark's events of several
// queries, and what the service's store and registry say.

// lockVerdictRow holds table's control row FOR SHARE in a transaction of
// another session (a downstream job's read left open) and returns what
// ends it (again, its error ignored, at the end of the test).
func lockVerdictRow(t *testing.T, pgURL, table string) (unlock func() error) {
	t.Helper()
	return lockIn(t, pgURL, `SELECT * FROM table_finalization WHERE table_name = $1 FOR SHARE`, table)
}

// lockIn runs stmt, which takes a lock, in a transaction of another
// session and returns what ends it (again, its error ignored, at the end
// of the test).
func lockIn(t *testing.T, pgURL, stmt string, args ...any) (unlock func() error) {
	t.Helper()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, pgURL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close(ctx) })
	tx, err := conn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tx.Rollback(ctx) })
	if _, err := tx.Exec(ctx, stmt, args...); err != nil {
		t.Fatal(err)
	}
	return func() error { return tx.Rollback(ctx) }
}

// sparkEvents publishes the listener events of any query and run, as
// Spark's listener sends them, numbering the progress batches.
type sparkEvents struct {
	t     *testing.T
	nc    *nats.Conn
	batch int
}

func (p *sparkEvents) publish(kind, query, run, body string) {
	p.t.Helper()
	if err := p.nc.Publish(fmt.Sprintf("spark.%s.%s.%s", kind, query, run), []byte(body)); err != nil {
		p.t.Fatal(err)
	}
	if err := p.nc.Flush(); err != nil {
		p.t.Fatal(err)
	}
}

// started publishes run's started event, of the query named name.
func (p *sparkEvents) started(query, run, name string) {
	p.t.Helper()
	p.publish("started", query, run, startedBody(query, run, name))
}

// progress publishes a progress of run whose source ends at commitTS.
func (p *sparkEvents) progress(query, run, name, commitTS string) {
	p.t.Helper()
	p.batch++
	p.publish("progress", query, run, fmt.Sprintf(`{"id":%q,"runId":%q,"name":%q,"timestamp":"2026-09-28T12:00:00.000Z","batchId":%d,"numInputRows":1,`+
		`"sources":[{"description":"s","startOffset":null,"endOffset":{"commit_ts":%q},"numInputRows":1}],"sink":{"description":"k"}}`,
		query, run, name, p.batch, commitTS))
}

// startedBody is a started event of run, of the query named name.
func startedBody(query, run, name string) string {
	return fmt.Sprintf(`{"id":%q,"runId":%q,"name":%q,"timestamp":"2026-09-28T12:00:00.000Z"}`, query, run, name)
}

// verdictOf is table's finalized_until, zero before its first verdict.
func verdictOf(svc *Service, table string) time.Time {
	v, err := svc.Store().Get(context.Background(), table)
	if err != nil {
		return time.Time{}
	}
	return v.FinalizedUntil
}

// feederOf returns query's row among table's feeders, if it joined.
func feederOf(t *testing.T, svc *Service, table, query string) (control.Feeder, bool) {
	t.Helper()
	fs, err := svc.Store().Feeders(context.Background(), table)
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range fs {
		if f.Feeder == query {
			return f, true
		}
	}
	return control.Feeder{}, false
}

// trackedTables is the set of tables the service's trackers write.
func trackedTables(svc *Service) map[string]bool {
	m := map[string]bool{}
	for _, st := range svc.Registry().Status() {
		m[st.Table] = true
	}
	return m
}

// lockRace is the rig of the locked-table join races: a service whose
// rule maps queries lk-* to lk.t, retrying an advance after 1 s, twice,
// and query lk-a (queryA, runA) feeding lk.t alone, at 13:00.
type lockRace struct {
	svc   *Service
	url   string
	ev    *sparkEvents
	at13  time.Time
	a, ra string
}

func startLockRace(t *testing.T, queryA, runA string) *lockRace {
	t.Helper()
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
	r := &lockRace{svc: svc, url: url, ev: &sparkEvents{t: t, nc: nc}, at13: time.Date(2026, 9, 28, 13, 0, 0, 0, time.UTC), a: queryA, ra: runA}
	r.ev.started(queryA, runA, "lk-a")
	r.ev.progress(queryA, runA, "lk-a", "2026-09-28T13:10:00")
	for deadline := time.Now().Add(10 * time.Second); !r.verdict().Equal(r.at13); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("lk.t at %v, want 13:00 from lk-a alone", r.verdict())
		}
	}
	return r
}

// verdict is lk.t's finalized_until.
func (r *lockRace) verdict() time.Time { return verdictOf(r.svc, "lk.t") }

// joined reports whether query joined lk.t's feeders.
func (r *lockRace) joined(t *testing.T, query string) bool {
	t.Helper()
	_, ok := feederOf(t, r.svc, "lk.t", query)
	return ok
}

// joinLocked waits until lk.t waits for query's join, found locked (its
// first try met the lock, after the lock wait of 1 s), and fails the
// test after within.
func (r *lockRace) joinLocked(t *testing.T, query string, within time.Duration) {
	t.Helper()
	var waits []finalizer.JoinWait
	for deadline := time.Now().Add(within); ; time.Sleep(20 * time.Millisecond) {
		waits = r.svc.Registry().JoinWaits()
		if len(waits) == 1 && waits[0].Table == "lk.t" && waits[0].QueryID == query && strings.Contains(waits[0].LastError, "locked") {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("join waits %+v after %v, want lk.t waiting for %s's join, locked", waits, within, query)
		}
	}
}

// progressA publishes lk-a's progress to commitTS.
func (r *lockRace) progressA(commitTS string) { r.ev.progress(r.a, r.ra, "lk-a", commitTS) }

// reportThroughTheLock has lk-a report 15:10 while the lock holds (its
// advance tried and retried), ends the lock, and has lk-a report 15:20,
// its next batch, as the lock goes.
func (r *lockRace) reportThroughTheLock(t *testing.T, unlock func() error) {
	t.Helper()
	r.progressA("2026-09-28T15:10:00")
	time.Sleep(300 * time.Millisecond) // lk-a's advance tried and retried
	if err := unlock(); err != nil {
		t.Fatal(err)
	}
	r.progressA("2026-09-28T15:20:00") // lk-a's next batch, as the lock goes
}

// stillAt13 checks, after lk-a's retries (retries), that lk.t stayed at
// 13:00, where it stood when lk-b started.
func (r *lockRace) stillAt13(t *testing.T, retries time.Duration) {
	t.Helper()
	time.Sleep(retries)
	if v := r.verdict(); !v.Equal(r.at13) {
		t.Fatalf("lk.t at %v after the lock went, want 13:00: lk-a moved it before lk-b joined", v)
	}
}
