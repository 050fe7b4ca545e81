package listener_test

import (
	"runtime"
	"testing"

	"github.com/finalizer-dev/finalizer/listener"
)

// TestSubscriptionHeapObjects pins what a run's subscription holds on the
// heap once subscribed, when its caller keeps the subscription
// (SubscribeInto, as the registry does in the run's entry): nothing of
// its own, where Subscribe's subscription and the router's list of it
// were two heap objects per tracked run for the collector to mark at
// every collection (issue 12). The listener's maps grow by their share.
func TestSubscriptionHeapObjects(t *testing.T) {
	srv := startNATS(t)
	l := dial(t, srv.ClientURL(), listener.Options{})
	const n = 2000
	subs := make([]listener.RunSubscription, n)
	boxes := make([]listener.Mailbox, n)
	ids := make([]string, n)
	for i := range ids {
		ids[i] = uuid(2, i)
	}
	q := uuid(1, 1)
	// The router and the listener's first subscription.
	if _, err := l.Subscribe(q, uuid(3, 3), listener.NewMailbox()); err != nil {
		t.Fatal(err)
	}
	objects := func() uint64 {
		var ms runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&ms)
		return ms.HeapObjects
	}
	// Held catch-ups: no request to the stream per run, whose replies the
	// embedded server caches (its objects, not the listener's).
	release := l.HoldCatchUps()
	before := objects()
	for i := range subs {
		if err := l.SubscribeInto(&subs[i], q, ids[i], &boxes[i]); err != nil {
			t.Fatal(err)
		}
	}
	per := (float64(objects()) - float64(before)) / n
	t.Logf("%.3f heap objects per subscription", per)
	if per > 0.2 {
		t.Errorf("a subscription kept by its caller holds %.2f heap objects: want none but the maps' share", per)
	}
	if err := release(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	for i := range subs {
		if err := subs[i].Unsubscribe(); err != nil {
			t.Fatal(err)
		}
	}
	runtime.KeepAlive(boxes)
}
