package service

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/finalizer-dev/finalizer/control"
	"github.com/finalizer-dev/finalizer/finalizer"
	"github.com/finalizer-dev/finalizer/internal/embeddednats"
	"github.com/finalizer-dev/finalizer/internal/pgcluster/pgtest"
	"github.com/finalizer-dev/finalizer/progress"
)

// TestRunsTrackedTogetherEachJoinAndPersist (ADR 0023): runs tracked at
// the same moment, explicitly and by a rule, are saved and joined to their
// tables' feeders in groups, and each one is still what it was alone: its
// explicit track persisted, its query a feeder of its table from the
// moment it is tracked (before any progress), and one run whose join
// PostgreSQL refuses (a query name with a NUL byte) fails only its own
// join, not its group's, and is tracked all the same. A restart recovers
// every run, joining them again in groups (a read: nothing is written
// again).
func TestRunsTrackedTogetherEachJoinAndPersist(t *testing.T) {
	const n = 150
	spec, err := progress.ParseSpec(progress.SpecOptions{})
	if err != nil {
		t.Fatal(err)
	}
	core, logs := observer.New(zap.WarnLevel)
	opts := Options{DataDir: t.TempDir(), PostgresURL: pgtest.URL(t), Logger: zap.New(core),
		EmbeddedNATS: &embeddednats.Options{Host: "127.0.0.1", Port: embeddednats.RandomPort},
		Registry:     finalizer.RegistryConfig{Rules: []finalizer.Rule{{Table: "ruled.{id}", Query: "ruled-*", Spec: spec}}}}
	svc, err := Start(context.Background(), opts)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { svc.Stop(context.Background()) }()
	nc, err := nats.Connect(svc.NATSURL())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()

	query := func(kind string, i int) string {
		return fmt.Sprintf("%08d-0000-4000-8000-%012d", map[string]int{"x": 1, "r": 2}[kind], i)
	}
	run := func(kind string, i int) string {
		return fmt.Sprintf("%08d-1111-4000-8000-%012d", map[string]int{"x": 1, "r": 2}[kind], i)
	}
	const bad = 7 // the ruled run whose name PostgreSQL refuses
	name := func(i int) string {
		if i == bad {
			return fmt.Sprintf("ruled-%03d\\u0000", i) // JSON for a NUL byte
		}
		return fmt.Sprintf("ruled-%03d", i)
	}
	// The ruled runs are discovered while the explicit ones are tracked.
	for i := range n {
		body := fmt.Sprintf(`{"id":%q,"runId":%q,"name":"%s","timestamp":"2026-09-28T12:00:00.000Z"}`, query("r", i), run("r", i), name(i))
		if err := nc.Publish(fmt.Sprintf("spark.started.%s.%s", query("r", i), run("r", i)), []byte(body)); err != nil {
			t.Fatal(err)
		}
	}
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i := range n {
		wg.Go(func() {
			if _, err := svc.Registry().Track(context.Background(), finalizer.Request{QueryID: query("x", i), RunID: run("x", i),
				Table: fmt.Sprintf("explicit.t%03d", i), Spec: spec, Explicit: true}); err != nil {
				errs <- err
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(20 * time.Second)
	for len(svc.Registry().Status()) != 2*n {
		if time.Now().After(deadline) {
			t.Fatalf("%d runs tracked, want %d", len(svc.Registry().Status()), 2*n)
		}
		time.Sleep(10 * time.Millisecond)
	}

	check := func(when string) {
		t.Helper()
		ctx := context.Background()
		tracks, err := svc.Store().Tracks(ctx)
		if err != nil {
			t.Fatal(err)
		}
		saved := map[string]bool{}
		for _, tr := range tracks {
			saved[tr.RunID+" "+tr.Table] = true
		}
		fs, err := svc.Store().Feeders(ctx, "")
		if err != nil {
			t.Fatal(err)
		}
		joined := map[string]control.Feeder{}
		for _, f := range fs {
			joined[f.Table] = f
		}
		for i := range n {
			table := fmt.Sprintf("explicit.t%03d", i)
			if !saved[run("x", i)+" "+table] {
				t.Errorf("%s: the explicit track of run %d is not persisted", when, i)
			}
			if f, ok := joined[table]; !ok || f.Feeder != query("x", i) || f.Retired() {
				t.Errorf("%s: %s: feeder %+v (%v), want query %s before its first progress", when, table, f, ok, query("x", i))
			}
			if i == bad {
				continue
			}
			table = "ruled." + query("r", i)
			if f, ok := joined[table]; !ok || f.Feeder != query("r", i) || f.QueryName != name(i) {
				t.Errorf("%s: %s: feeder %+v (%v), want query %s named %s", when, table, f, ok, query("r", i), name(i))
			}
		}
		if len(tracks) != n {
			t.Errorf("%s: %d tracks persisted, want %d", when, len(tracks), n)
		}
	}
	check("tracked")
	if logs.FilterMessageSnippet("refused the query as a feeder").Len() == 0 {
		t.Error("the refused join was not logged")
	}

	// A restart recovers every run, and joins them again.
	svc.Stop(context.Background())
	opts.EmbeddedNATS = &embeddednats.Options{Host: "127.0.0.1", Port: embeddednats.RandomPort}
	start := time.Now()
	if svc, err = Start(context.Background(), opts); err != nil {
		t.Fatal(err)
	}
	if n := len(svc.Registry().Status()); n != 2*150 {
		t.Fatalf("%d runs recovered after a restart, want %d", n, 2*150)
	}
	t.Logf("restart with %d runs: %s", 2*n, time.Since(start).Round(time.Millisecond))
	check("recovered")
}
