package listener_test

import (
	"sync"
	"testing"

	"github.com/finalizer-dev/finalizer/listener"
)

// The events of a tracked run are routed on the connection's read loop:
// one at a time, as at the idle rhythm, none wakes the router goroutine
// (ADR 0022, addendum 11: before, every message woke the subscription's
// goroutine). A run that discovery must see is routed by the router
// goroutine, in the order the messages were sent.
func TestTrackedRunsAreRoutedOnTheReadLoop(t *testing.T) {
	srv := startNATS(t)
	events := newCounter()
	l := dial(t, srv.ClientURL(), listener.Options{OnEvent: events.onEvent})
	q, run := uuid(7, 0), uuid(7, 1)
	box := listener.NewMailbox()
	sub, err := l.Subscribe(q, run, box)
	if err != nil {
		t.Fatalf("Subscribe: %v", err)
	}
	defer sub.Unsubscribe()
	var mu sync.Mutex
	var found []string
	disc, err := l.Discover(func(runID string) bool { return runID == run }, func(r listener.Run) {
		mu.Lock()
		found = append(found, r.RunID)
		mu.Unlock()
	})
	if err != nil {
		t.Fatalf("Discover: %v", err)
	}
	defer disc.Unsubscribe()

	nc := rawConn(t, srv.ClientURL())
	const n = 100
	for i := range n {
		rawPublish(t, nc, "spark.idle."+q+"."+run, idleJSON(q, run))
		eventually(t, "the idle event taken in", func() bool { return events.get("idle/accepted") == i+1 })
	}
	if p := listener.RouterPasses(l); p != 0 {
		t.Errorf("the router goroutine was woken %d times for %d events of a tracked run, want 0", p, n)
	}

	// Runs nobody tracks, interleaved with the tracked one's progress,
	// sent without waiting: discovery finds them in order, the tracked
	// run's newest progress is the last taken.
	const others = 300
	for i := range others {
		oq, or := uuid(8, i), uuid(9, i)
		if err := nc.Publish("spark.progress."+oq+"."+or, progressJSON(oq, or, "other", 1)); err != nil {
			t.Fatal(err)
		}
		if err := nc.Publish("spark.progress."+q+"."+run, progressJSON(q, run, "orders", int64(i+1))); err != nil {
			t.Fatal(err)
		}
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	c := newCollector(box)
	c.waitFor(t, "the newest progress", func(c *collector) bool { return c.last() == others })
	eventually(t, "every other run found", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(found) == others
	})
	mu.Lock()
	defer mu.Unlock()
	for i, r := range found {
		if r != uuid(9, i) {
			t.Fatalf("found %d: %s, want %s (in the order sent)", i, r, uuid(9, i))
		}
	}
	if listener.RouterPasses(l) == 0 {
		t.Errorf("the runs discovery had to see were not routed by the router goroutine")
	}
}
