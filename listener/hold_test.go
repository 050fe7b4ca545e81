package listener_test

import (
	"context"
	"errors"
	"fmt"
	neturl "net/url"
	"strconv"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/finalizer-dev/finalizer/internal/embeddednats"
	"github.com/finalizer-dev/finalizer/listener"
	"github.com/finalizer-dev/finalizer/progress"
)

// publishRuns stores, for runs i in [0, n), a started event and a progress
// of batch 7 in the stream, acknowledged.
func publishRuns(t *testing.T, url string, n int) {
	t.Helper()
	js, err := jetstream.New(rawConn(t, url))
	if err != nil {
		t.Fatal(err)
	}
	for i := range n {
		q, r := uuid(i, 0), uuid(i, 1)
		if _, err := js.PublishAsync("spark.started."+q+"."+r, startedJSON(q, r, "held")); err != nil {
			t.Fatal(err)
		}
		if _, err := js.PublishAsync("spark.progress."+q+"."+r, progressJSON(q, r, "held", 7)); err != nil {
			t.Fatal(err)
		}
		if i%500 == 499 {
			<-js.PublishAsyncComplete()
		}
	}
	select {
	case <-js.PublishAsyncComplete():
	case <-time.After(waitTimeout):
		t.Fatal("publish: no acknowledgement")
	}
}

// Issue 18 (recovery made three lookups per run, one after another): under
// HoldCatchUps, runs are caught up at release, with one scan of the stream
// for many and a lookup each for a few; what was published between a run's
// subscription and the release is not lost, the termination comes with
// the last progress, and a run unsubscribed meanwhile gets nothing.
func TestHoldCatchUps(t *testing.T) {
	for _, n := range []int{listener.BatchCatchUpMin - 1, 3 * listener.BatchCatchUpMin} {
		t.Run(map[bool]string{true: "one scan", false: "one lookup each"}[n >= listener.BatchCatchUpMin], func(t *testing.T) {
			srv := startNATS(t)
			l := dial(t, srv.ClientURL(), listener.Options{})
			if err := l.EnsureStream(ctxT(t)); err != nil {
				t.Fatal(err)
			}
			publishRuns(t, srv.ClientURL(), n)
			// Run 0 terminated; run 1 will post batch 8 while held.
			publish(t, l, progress.KindTerminated, uuid(0, 0), uuid(0, 1), "", 0)

			release := l.HoldCatchUps()
			boxes := make([]*listener.Mailbox, n)
			for i := range n {
				boxes[i] = listener.NewMailbox()
				s, err := l.Subscribe(uuid(i, 0), uuid(i, 1), boxes[i])
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { _ = s.Unsubscribe() })
				if i == n-1 {
					if err := s.Unsubscribe(); err != nil {
						t.Fatal(err)
					}
				}
			}
			if m := boxes[2].Take(); m.Progress != nil {
				t.Fatalf("caught up before the release: %+v", m)
			}
			publish(t, l, progress.KindProgress, uuid(1, 0), uuid(1, 1), "held", 8)
			if err := release(ctxT(t)); err != nil {
				t.Fatalf("release: %v", err)
			}
			for i, b := range boxes[:n-1] {
				want := int64(7)
				if i == 1 {
					want = 8
					eventually(t, "run 1's live progress", func() bool {
						m := b.Take()
						return m.Progress != nil && m.Progress.BatchID == 8
					})
					continue
				}
				m := b.Take()
				if m.Progress == nil || m.Progress.BatchID != want || m.Started == nil {
					t.Fatalf("run %d: took %+v, want its started event and batch %d", i, m, want)
				}
				if (m.Terminated != nil) != (i == 0) {
					t.Fatalf("run %d: terminated %v", i, m.Terminated != nil)
				}
			}
			if m := boxes[n-1].Take(); m.Progress != nil || m.Started != nil {
				t.Fatalf("an unsubscribed run was caught up: %+v", m)
			}
		})
	}
}

// Issue 18 (a large stream failed recovery as a whole): listing the
// retained runs has no overall deadline of a few request timeouts; each
// read is bounded on its own. Before, 10,000 runs took two lookups each
// under 4 x RequestTimeout and failed.
func TestRetainedLargeStreamNoOverallDeadline(t *testing.T) {
	const n = 10000
	srv := startNATS(t)
	l := dial(t, srv.ClientURL(), listener.Options{RequestTimeout: 250 * time.Millisecond})
	if err := l.EnsureStream(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	publishRuns(t, srv.ClientURL(), n)
	runs, err := l.Retained(context.Background())
	if err != nil {
		t.Fatalf("Retained: %v", err)
	}
	if len(runs) != n {
		t.Fatalf("Retained: %d runs, want %d", len(runs), n)
	}
	for _, r := range runs {
		if r.Name != "held" || r.Kind != progress.KindProgress {
			t.Fatalf("run %s: name %q kind %s, want held, progress", r.RunID, r.Name, r.Kind)
		}
	}
}

// Issue 18: a reconnect caught every run up with three lookups per run,
// one run after another, and then once more each: with many runs, one
// scan of the stream does it. Progress published by another client while
// the listener was away reaches every run's mailbox.
func TestReconnectCatchesManyRunsUp(t *testing.T) {
	n := 2 * listener.BatchCatchUpMin
	dir := t.TempDir()
	srv, err := embeddednats.Start(embeddednats.Options{Port: embeddednats.RandomPort, StoreDir: dir})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { srv.Shutdown() }()
	url := srv.ClientURL()
	u, _ := neturl.Parse(url)
	port, _ := strconv.Atoi(u.Port())
	l := dial(t, url, listener.Options{ReconnectWait: 300 * time.Millisecond})
	if err := l.EnsureStream(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	boxes := subscribeRuns(t, l, n)
	srv.Shutdown()
	eventually(t, "disconnected", func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
		defer cancel()
		return errors.Is(l.Ready(ctx), listener.ErrNotConnected)
	})
	if srv, err = embeddednats.Start(embeddednats.Options{Port: port, StoreDir: dir}); err != nil {
		t.Fatal(err)
	}
	publishRuns(t, url, n) // batch 7 of every run, while the listener is away
	for i, b := range boxes {
		eventually(t, fmt.Sprintf("run %d caught up", i), func() bool {
			m := b.Take()
			return m.Progress != nil && m.Progress.BatchID == 7
		})
	}
}
