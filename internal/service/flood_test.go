package service

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/finalizer-dev/finalizer/finalizer"
	"github.com/finalizer-dev/finalizer/listener"
	"github.com/finalizer-dev/finalizer/progress"
)

// TestNoRunLosesItsNewestProgressToAFlood (issue 9, item 6): a flood of
// other runs' large messages made the one event subscription a slow
// consumer, and what it dropped was lost, a tracked run's newest progress
// among it (its verdict stayed behind until the run's next event, maybe
// never). Here the subscription is held up while a flood of large
// messages and then every tracked run's newest progress arrive, so the
// client drops them all; once the backlog is down, every run catches up
// from JetStream and reaches the verdict of its newest progress.
func TestNoRunLosesItsNewestProgressToAFlood(t *testing.T) {
	core, logs := observer.New(zapcore.InfoLevel)
	var hold atomic.Bool
	release := make(chan struct{})
	// A rule, so that discovery reads every message of an unknown run (as
	// a service with declarative tracking does); OnEvent runs on the
	// subscription's goroutine, for each message it refuses: while hold is
	// set, it stands for a subscriber slower than the flood.
	o := Options{Logger: zap.New(core), Registry: finalizer.RegistryConfig{
		Rules: []finalizer.Rule{{Table: "other.{name}", Query: "nothing-matches-*"}}},
		OnEvent: func(progress.Kind, string) {
			if hold.Load() {
				<-release
			}
		}}
	o.NATS.RouterPendingMsgs, o.NATS.RouterPendingBytes = 16, 64<<20
	var once sync.Once
	unhold := func() { once.Do(func() { hold.Store(false); close(release) }) }
	svc, nc := startTestWith(t, o)
	t.Cleanup(unhold) // before the service's stop, also on a failure
	ctx := context.Background()

	const runs, rounds = 20, 8
	qid := func(i int) string { return fmt.Sprintf("00000000-0000-4000-8000-%012d", 1000+i) }
	rid := func(i int) string { return fmt.Sprintf("00000000-0000-4000-8000-%012d", 2000+i) }
	for i := range runs {
		rep := svc.handleTrack(ctx, listener.TrackRequest{QueryID: qid(i), RunID: rid(i), Table: fmt.Sprintf("flood.t%d", i)})
		if !rep.OK {
			t.Fatalf("track %d: %+v", i, rep)
		}
	}
	flood := 0
	other := func(n int) {
		for range n {
			flood++
			q, r := fmt.Sprintf("00000000-0000-4000-8000-%012d", 100000+flood), fmt.Sprintf("00000000-0000-4000-8000-%012d", 900000+flood)
			big := `{"pad":"` + strings.Repeat("x", 200<<10) + `"}` // read, and refused, by discovery
			if err := nc.Publish("spark.progress."+q+"."+r, []byte(big)); err != nil {
				t.Fatal(err)
			}
		}
	}
	progressOf := func(i, round int) {
		p := fmt.Sprintf(`{"id":%q,"runId":%q,"name":"q%d","timestamp":"2026-09-28T15:00:00.000Z","batchId":%d,`+
			`"sources":[{"description":"s","startOffset":null,"endOffset":{"commit_ts":"2026-09-28T%02d:10:00"}}],"eventTime":{}}`,
			qid(i), rid(i), i, round, round)
		if err := nc.Publish(fmt.Sprintf("spark.progress.%s.%s", qid(i), rid(i)), []byte(p)); err != nil {
			t.Fatal(err)
		}
	}
	waitAll := func(hour int) {
		t.Helper()
		want := time.Date(2026, 9, 28, hour, 0, 0, 0, time.UTC)
		deadline := time.Now().Add(30 * time.Second)
		for i := range runs {
			table := fmt.Sprintf("flood.t%d", i)
			for {
				v, err := svc.Store().Get(ctx, table)
				if err == nil && v.FinalizedUntil.Equal(want) {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("%s: %v (%v), want %s: its newest progress was lost", table, v.FinalizedUntil, err, want)
				}
				time.Sleep(20 * time.Millisecond)
			}
		}
	}
	for round := 1; round < rounds; round++ {
		for i := range runs {
			other(2)
			progressOf(i, round)
		}
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	waitAll(rounds - 1)

	// The subscriber falls behind a flood; every run's newest progress
	// arrives behind it and is dropped.
	hold.Store(true)
	other(40)
	for i := range runs {
		progressOf(i, rounds)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the slow consumer reported", func() bool { return logs.FilterMessageSnippet("slow consumer").Len() > 0 })
	time.Sleep(200 * time.Millisecond) // the client drops what is left
	unhold()
	waitAll(rounds)
	t.Logf("catch-ups after drops: %d", logs.FilterMessageSnippet("caught up after the event subscription dropped").Len())
}
