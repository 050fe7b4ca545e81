package listener_test

import (
	"sync/atomic"
	"testing"

	"github.com/finalizer-dev/finalizer/listener"
	"github.com/finalizer-dev/finalizer/progress"
)

// ReserveRuns makes the listener's maps of run subscriptions again, larger
// (issue 12, ninth pass): a run subscribed before it, under a hold of
// catch-ups, still gets its live events, is caught up at the release, and
// unsubscribes; so does one subscribed after it.
func TestReserveRunsKeepsWhatWasSubscribed(t *testing.T) {
	srv := startNATS(t)
	l := dial(t, srv.ClientURL(), listener.Options{})
	ctx := ctxT(t)
	if err := l.EnsureStream(ctx); err != nil {
		t.Fatal(err)
	}
	// Retained before the hold: the release catches run 0 up with it.
	publish(t, l, progress.KindProgress, uuid(0, 0), uuid(0, 1), "before", 3)
	release := l.HoldCatchUps()
	boxes := []*listener.Mailbox{listener.NewMailbox(), listener.NewMailbox()}
	var subs []*listener.RunSubscription
	subscribe := func(i int) {
		t.Helper()
		s, err := l.Subscribe(uuid(i, 0), uuid(i, 1), boxes[i])
		if err != nil {
			t.Fatal(err)
		}
		subs = append(subs, s)
	}
	subscribe(0)
	l.ReserveRuns(1000)
	subscribe(1)
	if err := release(ctx); err != nil {
		t.Fatalf("release: %v", err)
	}
	var last [2]atomic.Int64
	take := func(i int) int64 {
		if m := boxes[i].Take(); m.Progress != nil {
			last[i].Store(m.Progress.BatchID)
		}
		return last[i].Load()
	}
	eventually(t, "run 0 caught up at the release", func() bool { return take(0) == 3 })
	for i := range boxes {
		publish(t, l, progress.KindProgress, uuid(i, 0), uuid(i, 1), "live", 9)
		eventually(t, "a live progress", func() bool { return take(i) == 9 })
	}
	for _, s := range subs {
		if err := s.Unsubscribe(); err != nil {
			t.Fatal(err)
		}
	}
}
