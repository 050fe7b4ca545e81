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
	m.SetNotify(func() { calls++ })
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
