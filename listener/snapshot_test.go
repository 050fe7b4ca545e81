package listener_test

import (
	"sync"
	"testing"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/finalizer-dev/finalizer/listener"
	"github.com/finalizer-dev/finalizer/progress"
)

// Issue 12 (a restart read the stream twice: once to list the runs, once
// more to catch them up): a Retained made under a hold keeps what it read,
// and the release catches the held runs up from it and from what the
// stream stored after it. Every run gets its newest retained events,
// whether the listing saw them (started, progress, termination) or they
// were stored after it (a newer progress of a listed run, a run the
// listing never saw); a malformed message in the snapshot is counted as a
// catch-up would count it and stalls no other run.
func TestHoldCatchUpsFromRetained(t *testing.T) {
	n := 2 * listener.BatchCatchUpMin
	srv := startNATS(t)
	c := newCounter()
	l := dial(t, srv.ClientURL(), listener.Options{OnEvent: c.onEvent})
	ctx := ctxT(t)
	if err := l.EnsureStream(ctx); err != nil {
		t.Fatal(err)
	}
	publishRuns(t, srv.ClientURL(), n)
	js, err := jetstream.New(rawConn(t, srv.ClientURL()))
	if err != nil {
		t.Fatal(err)
	}
	store := func(kind progress.Kind, q, r string, data []byte) {
		t.Helper()
		if _, err := js.Publish(ctx, "spark."+kind.String()+"."+q+"."+r, data); err != nil {
			t.Fatal(err)
		}
	}
	// Run 0 terminated; run 2's progress replaced by a malformed one.
	store(progress.KindTerminated, uuid(0, 0), uuid(0, 1), terminatedJSON(uuid(0, 0), uuid(0, 1)))
	store(progress.KindProgress, uuid(2, 0), uuid(2, 1), []byte(`{"id": "not a progress`))

	release := l.HoldCatchUps()
	runs, err := l.Retained(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(runs) != n {
		t.Fatalf("Retained: %d runs, want %d", len(runs), n)
	}
	// After the listing, before the subscriptions: a newer progress of
	// run 1, and a run the listing did not see.
	store(progress.KindProgress, uuid(1, 0), uuid(1, 1), progressJSON(uuid(1, 0), uuid(1, 1), "held", 8))
	store(progress.KindStarted, uuid(n, 0), uuid(n, 1), startedJSON(uuid(n, 0), uuid(n, 1), "held"))
	store(progress.KindProgress, uuid(n, 0), uuid(n, 1), progressJSON(uuid(n, 0), uuid(n, 1), "held", 5))

	boxes := subscribeRuns(t, l, n+1)
	// Issue 12, sixth pass: a run subscribed under the hold is offered its
	// snapshot's started event and progress at once (its tracker steps
	// while the others are started), not its termination, which waits for
	// the stream's newer progress at the release; a run the snapshot does
	// not hold gets nothing before the release.
	early := map[int]bool{3: true, 0: true}
	for i := range early {
		m := boxes[i].Take()
		if m.Progress == nil || m.Progress.BatchID != 7 || m.Started == nil || m.Terminated != nil {
			t.Fatalf("run %d before the release: took %+v, want its snapshot's started event and batch 7, no termination", i, m)
		}
	}
	if m := boxes[n].Take(); m.Progress != nil || m.Started != nil {
		t.Fatalf("run %d, not in the snapshot, caught up before the release: %+v", n, m)
	}
	if err := release(ctx); err != nil {
		t.Fatalf("release: %v", err)
	}
	for i, b := range boxes {
		m := b.Take()
		want := int64(7)
		switch i {
		case 1:
			want = 8
		case 2:
			want = -1
		case n:
			want = 5
		}
		got := int64(-1)
		if m.Progress != nil {
			got = m.Progress.BatchID
		}
		switch {
		case early[i]:
			// Taken before the release; the release offers the
			// snapshot's termination only, not its progress again.
			if m.Progress != nil || m.Started != nil {
				t.Fatalf("run %d: offered the snapshot again at the release: %+v", i, m)
			}
		case got != want || m.Started == nil:
			t.Fatalf("run %d: took %+v, want its started event and batch %d", i, m, want)
		}
		if (m.Terminated != nil) != (i == 0) {
			t.Fatalf("run %d: terminated %v", i, m.Terminated != nil)
		}
	}
	if got := c.get("progress/" + listener.OutcomeMalformed); got != 1 {
		t.Errorf("malformed progress counted %d times, want 1 (%s)", got, c)
	}
	// Every run's progress counted once but run 2's (malformed) and run
	// 1's, twice: batch 7 from the snapshot, then batch 8 from the stream
	// after it. A whole scan at the release would have found batch 8 only
	// (the stream keeps one message per subject): n+1 shows the snapshot
	// was used.
	if got := c.get("progress/" + listener.OutcomeAccepted); got != n+1 {
		t.Errorf("accepted progress counted %d times, want %d (%s)", got, n+1, c)
	}
}

// Issue 12: a snapshot read before a purge of the stream is not used;
// the release reads the whole stream instead, so that nothing the purge
// removed is offered.
func TestHoldCatchUpsSnapshotAfterPurge(t *testing.T) {
	n := 2 * listener.BatchCatchUpMin
	srv := startNATS(t)
	var (
		mu     sync.Mutex
		purged int
	)
	l := dial(t, srv.ClientURL(), listener.Options{OnStreamIncident: func(kind string) {
		mu.Lock()
		defer mu.Unlock()
		if kind == listener.StreamPurged {
			purged++
		}
	}})
	ctx := ctxT(t)
	if err := l.EnsureStream(ctx); err != nil {
		t.Fatal(err)
	}
	if err := l.StreamReady(ctx); err != nil {
		t.Fatal(err)
	}
	publishRuns(t, srv.ClientURL(), n)
	release := l.HoldCatchUps()
	if _, err := l.Retained(ctx); err != nil {
		t.Fatal(err)
	}
	js, err := jetstream.New(rawConn(t, srv.ClientURL()))
	if err != nil {
		t.Fatal(err)
	}
	st, err := js.Stream(ctx, listener.DefaultStream)
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Purge(ctx); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the purge noticed", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return purged == 1
	})
	if _, err := js.Publish(ctx, "spark.progress."+uuid(0, 0)+"."+uuid(0, 1), progressJSON(uuid(0, 0), uuid(0, 1), "held", 9)); err != nil {
		t.Fatal(err)
	}
	boxes := subscribeRuns(t, l, n)
	if err := release(ctx); err != nil {
		t.Fatalf("release: %v", err)
	}
	if m := boxes[0].Take(); m.Progress == nil || m.Progress.BatchID != 9 || m.Started != nil {
		t.Fatalf("run 0: took %+v, want only batch 9, stored after the purge", m)
	}
	for i, b := range boxes[1:] {
		if m := b.Take(); m.Progress != nil || m.Started != nil {
			t.Fatalf("run %d: took %+v from before the purge", i+1, m)
		}
	}
}

// Issue 12, sixth pass: runs offered their snapshot's events when
// subscribed, then a purge before the release: the release does not use
// the snapshot (it reads the stream, which holds only what was stored
// after the purge) and offers nothing from before the purge again.
func TestHoldCatchUpsEarlyOfferThenPurge(t *testing.T) {
	n := 2 * listener.BatchCatchUpMin
	srv := startNATS(t)
	var (
		mu     sync.Mutex
		purged int
	)
	l := dial(t, srv.ClientURL(), listener.Options{OnStreamIncident: func(kind string) {
		mu.Lock()
		defer mu.Unlock()
		if kind == listener.StreamPurged {
			purged++
		}
	}})
	ctx := ctxT(t)
	if err := l.EnsureStream(ctx); err != nil {
		t.Fatal(err)
	}
	if err := l.StreamReady(ctx); err != nil {
		t.Fatal(err)
	}
	publishRuns(t, srv.ClientURL(), n)
	release := l.HoldCatchUps()
	if _, err := l.Retained(ctx); err != nil {
		t.Fatal(err)
	}
	boxes := subscribeRuns(t, l, n)
	for i, b := range boxes {
		if m := b.Take(); m.Progress == nil || m.Progress.BatchID != 7 {
			t.Fatalf("run %d: took %+v when subscribed, want its snapshot's batch 7", i, m)
		}
	}
	js, err := jetstream.New(rawConn(t, srv.ClientURL()))
	if err != nil {
		t.Fatal(err)
	}
	st, err := js.Stream(ctx, listener.DefaultStream)
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Purge(ctx); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the purge noticed", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return purged == 1
	})
	// Stored after the purge (and routed live to the subscribed run).
	if _, err := js.Publish(ctx, "spark.progress."+uuid(0, 0)+"."+uuid(0, 1), progressJSON(uuid(0, 0), uuid(0, 1), "held", 9)); err != nil {
		t.Fatal(err)
	}
	if err := release(ctx); err != nil {
		t.Fatalf("release: %v", err)
	}
	if m := boxes[0].Take(); m.Progress == nil || m.Progress.BatchID != 9 {
		t.Fatalf("run 0: took %+v, want batch 9, stored after the purge", m)
	}
	for i, b := range boxes[1:] {
		if m := b.Take(); m.Progress != nil || m.Started != nil {
			t.Fatalf("run %d: took %+v at the release, from before the purge", i+1, m)
		}
	}
}
