package listener

import (
	"testing"
	"time"
	"unsafe"

	"github.com/finalizer-dev/finalizer/progress"
)

// A mailbox whose tracker is told by notify (every tracker on the
// registry's pool) makes no wake channel: 96 bytes per tracked run that
// nobody read (issue 12). One that is asked for its channel after mail
// arrived still finds a signal in it.
func TestMailboxWakeOnDemand(t *testing.T) {
	m := NewMailbox()
	calls := 0
	m.SetNotify(func(bool) { calls++ })
	m.Offer(&progress.Event{Kind: progress.KindProgress, BatchID: 1, Timestamp: time.Unix(1, 0)})
	if calls != 1 || m.wake != nil {
		t.Fatalf("notify called %d times, wake channel %v; want 1 and none made", calls, m.wake)
	}
	// Without notify: the signal before the first Wake is not lost.
	m.SetNotify(nil)
	m.Offer(&progress.Event{Kind: progress.KindProgress, BatchID: 2, Timestamp: time.Unix(2, 0)})
	select {
	case <-m.Wake():
	default:
		t.Fatal("a signal sent before the first Wake was lost")
	}
	if got := m.Take(); got.Progress == nil || got.Progress.BatchID != 2 {
		t.Fatalf("Take = %+v, want batch 2", got)
	}
	m.Offer(&progress.Event{Kind: progress.KindProgress, BatchID: 3, Timestamp: time.Unix(3, 0)})
	select {
	case <-m.Wake():
	default:
		t.Fatal("no signal after an Offer")
	}
	// A fresh mailbox asked for Wake before any mail has nothing in it.
	if len(NewMailbox().Wake()) != 0 {
		t.Error("an empty mailbox's wake holds a signal")
	}
	// The mailbox stays in the allocator's 160-byte size class.
	if n := unsafe.Sizeof(Mailbox{}); n > 160 {
		t.Errorf("Mailbox is %d bytes: above the 160-byte size class", n)
	}
}

// A tracker's notifier costs the mailbox nothing: SetNotifier stores the
// caller's pointer (SetNotify's method value and its pointer were two
// heap objects per tracked run, issue 12), and every Offer calls it.
func TestSetNotifierAllocatesNothing(t *testing.T) {
	m := NewMailbox()
	calls := 0
	var n Notifier = countNotifier{&calls}
	if allocs := testing.AllocsPerRun(10, func() { m.SetNotifier(&n) }); allocs != 0 {
		t.Errorf("SetNotifier allocated %v times", allocs)
	}
	m.Offer(&progress.Event{Kind: progress.KindProgress, BatchID: 1, Timestamp: time.Unix(1, 0)})
	m.Offer(&progress.Event{Kind: progress.KindIdle, BatchID: -1, Timestamp: time.Unix(2, 0)})
	if calls != 2 || m.wake != nil {
		t.Fatalf("notified %d times, wake channel %v; want 2 and none made", calls, m.wake)
	}
	m.SetNotifier(nil)
	m.Offer(&progress.Event{Kind: progress.KindProgress, BatchID: 3, Timestamp: time.Unix(3, 0)})
	select {
	case <-m.Wake():
	default:
		t.Fatal("no signal after SetNotifier(nil) and an Offer")
	}
	if calls != 2 {
		t.Errorf("notified %d times after SetNotifier(nil)", calls)
	}
}

type countNotifier struct{ n *int }

func (c countNotifier) Notify(bool) { *c.n++ }

// The router's list of a run's only subscription is the subscription's
// own self array, made without an allocation; a second subscription of
// the run and the removal of either leave each list right without
// writing into another subscription's array.
func TestRouteOfOneSubscriptionIsItsOwn(t *testing.T) {
	l := &Listener{routes: map[string][]*RunSubscription{}}
	a := &RunSubscription{runID: "r"}
	b := &RunSubscription{runID: "r"}
	c := &RunSubscription{runID: "r2"}
	if allocs := testing.AllocsPerRun(10, func() { l.routeRun(c); l.unrouteRun(c) }); allocs != 0 {
		t.Errorf("routing a run's only subscription and removing it allocated %v times", allocs)
	}
	l.routeRun(a)
	if got := l.routes["r"]; len(got) != 1 || &got[0] != &a.self[0] {
		t.Fatalf("the route of one subscription is %p, not its self", got)
	}
	l.routeRun(b)
	if got := l.routes["r"]; len(got) != 2 || got[0] != a || got[1] != b || a.self[0] != a {
		t.Fatalf("routes[r] = %v, a.self = %v", got, a.self)
	}
	l.unrouteRun(a)
	if got := l.routes["r"]; len(got) != 1 || got[0] != b || a.self[0] != a {
		t.Fatalf("after removing a: routes[r] = %v, a.self = %v", got, a.self)
	}
	l.unrouteRun(b)
	if _, ok := l.routes["r"]; ok {
		t.Fatalf("routes = %v after removing both", l.routes)
	}
}
