package listener_test

import (
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/finalizer-dev/finalizer/listener"
	"github.com/finalizer-dev/finalizer/progress"
)

// A progress from the stream's retained copy carries when the stream
// stored it (ADR 0019, addendum of 2026-12-06): a tracker judges it
// against its table's last rewind by that time, the server's, not by its
// driver's timestamp. The last retained progress to enter the slot gives
// the time; a live one does not, nor does a retained one without it; the
// Take clears it.
func TestMailboxSaysWhenARetainedProgressWasStored(t *testing.T) {
	m := listener.NewMailbox()
	stored := time.Date(2026, 12, 6, 1, 0, 0, 0, time.UTC)
	m.OfferRetainedAt(&progress.Event{Kind: progress.KindProgress, BatchID: 3, Timestamp: stored.Add(time.Hour)}, stored)
	// An older copy does not enter the slot, and does not change the time.
	m.OfferRetainedAt(&progress.Event{Kind: progress.KindProgress, BatchID: 2, Timestamp: stored}, stored.Add(time.Minute))
	mail := m.Take()
	if mail.Progress == nil || mail.Progress.BatchID != 3 || !mail.ProgressRetained || mail.ProgressStored != stored.UnixNano() {
		t.Fatalf("take: %+v, want batch 3, retained, stored at %d", mail, stored.UnixNano())
	}
	if mail := m.Take(); mail.ProgressStored != 0 || mail.ProgressRetained {
		t.Fatalf("a second take: %+v, want nothing stored", mail)
	}
	// A newer live progress after a retained one: still the retained
	// one's time (the earlier, so the stricter).
	m.OfferRetainedAt(&progress.Event{Kind: progress.KindProgress, BatchID: 4, Timestamp: stored}, stored)
	m.Offer(&progress.Event{Kind: progress.KindProgress, BatchID: 5, Timestamp: stored})
	if mail := m.Take(); mail.Progress.BatchID != 5 || !mail.ProgressRetained || mail.ProgressStored != stored.UnixNano() {
		t.Fatalf("live after retained: %+v", mail)
	}
	// A retained progress whose time is not known: none.
	m.OfferRetainedAt(&progress.Event{Kind: progress.KindProgress, BatchID: 6, Timestamp: stored}, stored)
	m.OfferRetained(&progress.Event{Kind: progress.KindProgress, BatchID: 7, Timestamp: stored})
	if mail := m.Take(); mail.Progress.BatchID != 7 || !mail.ProgressRetained || mail.ProgressStored != 0 {
		t.Fatalf("retained without a time: %+v", mail)
	}
	m.Offer(&progress.Event{Kind: progress.KindProgress, BatchID: 8, Timestamp: stored})
	if mail := m.Take(); mail.ProgressRetained || mail.ProgressStored != 0 {
		t.Fatalf("live only: %+v", mail)
	}
}

// Every catch-up from the stream gives the run's retained progress the
// time the stream stored it, as the server's metadata says: a run's own
// catch-up (one lookup per subject), the release of a hold of catch-ups
// (one scan of the stream) and a restart's early offer from the listing's
// snapshot.
func TestCatchUpsSayWhenTheStreamStoredTheProgress(t *testing.T) {
	srv := startNATS(t)
	l := dial(t, srv.ClientURL(), listener.Options{})
	ctx := ctxT(t)
	if err := l.EnsureStream(ctx); err != nil {
		t.Fatal(err)
	}
	n := listener.BatchCatchUpMin
	publishRuns(t, srv.ClientURL(), n+1)
	js, err := jetstream.New(rawConn(t, srv.ClientURL()))
	if err != nil {
		t.Fatal(err)
	}
	st, err := js.Stream(ctx, listener.DefaultStream)
	if err != nil {
		t.Fatal(err)
	}
	stored := func(i int) *jetstream.RawStreamMsg {
		t.Helper()
		msg, err := st.GetLastMsgForSubject(ctx, "spark.progress."+uuid(i, 0)+"."+uuid(i, 1))
		if err != nil {
			t.Fatal(err)
		}
		if msg.Time.IsZero() || msg.Sequence == 0 {
			t.Fatal("the stream's message has no time or no sequence")
		}
		return msg
	}
	storedAt := func(i int) int64 { return stored(i).Time.UnixNano() }
	check := func(how string, i int, mail listener.Mail) {
		t.Helper()
		if mail.Progress == nil || !mail.ProgressRetained || mail.ProgressStored != storedAt(i) {
			t.Fatalf("%s, run %d: %+v, want its retained progress stored at %d", how, i, mail, storedAt(i))
		}
		// And its stream sequence, by which a rewind judges it (ADR
		// 0019, addendum of 2026-12-06, "judged by sequence").
		if mail.ProgressSeq != stored(i).Sequence {
			t.Fatalf("%s, run %d: sequence %d, want the stream's %d", how, i, mail.ProgressSeq, stored(i).Sequence)
		}
	}

	// A run subscribed on its own: its catch-up.
	box := listener.NewMailbox()
	s, err := l.Subscribe(uuid(n, 0), uuid(n, 1), box)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Unsubscribe() })
	eventually(t, "the catch-up", func() bool {
		mail := box.Take()
		if mail.Progress != nil {
			check("catch-up", n, mail)
		}
		return mail.Progress != nil
	})

	// A hold's release: one scan for BatchCatchUpMin runs.
	release := l.HoldCatchUps()
	boxes := subscribeRuns(t, l, n)
	if err := release(ctx); err != nil {
		t.Fatal(err)
	}
	for i, b := range boxes {
		check("a hold's scan", i, b.Take())
	}

	// A restart: the listing's snapshot, offered as each run subscribes.
	release = l.HoldCatchUps()
	if _, err := l.Retained(ctx); err != nil {
		t.Fatal(err)
	}
	boxes = subscribeRuns(t, l, 2)
	for i, b := range boxes {
		check("a snapshot's early offer", i, b.Take())
	}
	if err := release(ctx); err != nil {
		t.Fatal(err)
	}
}

// TestMailboxSaysWhenAHandedOverProgressWasHeard: a progress heard
// earlier than it is offered (OfferHeardAt: a registry's pending run
// handing it to a new tracker) says when it was heard
// (Mail.ProgressHeard); a newer live one after it keeps that time (the
// earlier, so the stricter); a retained one's stored time wins; a plain
// live offer says nothing.
func TestMailboxSaysWhenAHandedOverProgressWasHeard(t *testing.T) {
	m := listener.NewMailbox()
	heard := time.Date(2026, 12, 6, 1, 0, 0, 0, time.UTC)
	m.OfferHeardAt(&progress.Event{Kind: progress.KindProgress, BatchID: 3, Timestamp: heard}, heard)
	m.Offer(&progress.Event{Kind: progress.KindProgress, BatchID: 4, Timestamp: heard})
	if mail := m.Take(); mail.Progress.BatchID != 4 || !mail.Heard || mail.ProgressRetained || mail.ProgressStored != 0 || mail.ProgressHeard != heard.UnixNano() {
		t.Fatalf("handed over, then live: %+v, want heard at %d", mail, heard.UnixNano())
	}
	m.OfferRetainedAt(&progress.Event{Kind: progress.KindProgress, BatchID: 5, Timestamp: heard}, heard.Add(-time.Minute))
	m.OfferHeardAt(&progress.Event{Kind: progress.KindProgress, BatchID: 6, Timestamp: heard}, heard)
	if mail := m.Take(); !mail.ProgressRetained || mail.ProgressStored != heard.Add(-time.Minute).UnixNano() || mail.ProgressHeard != 0 {
		t.Fatalf("retained, then handed over: %+v", mail)
	}
	m.Offer(&progress.Event{Kind: progress.KindProgress, BatchID: 7, Timestamp: heard})
	if mail := m.Take(); mail.ProgressHeard != 0 || mail.ProgressStored != 0 {
		t.Fatalf("live only: %+v", mail)
	}
}

// A retained progress carries its stream sequence with its stored time
// (ADR 0019, addendum of 2026-12-06, "judged by sequence"), as the time:
// the one that last entered the slot gives it, an older copy does not
// change it, a newer live one keeps the retained one's, the Take clears
// it. The taken progress's timestamp, kept as Unix ns to make room for
// it, still orders a repeat (not newer) from a later timestamp of the
// same batch (newer).
func TestMailboxSaysTheStreamSequenceOfARetainedProgress(t *testing.T) {
	m := listener.NewMailbox()
	stored := time.Date(2026, 12, 6, 1, 0, 0, 0, time.UTC)
	m.OfferRetainedSeq(&progress.Event{Kind: progress.KindProgress, BatchID: 3, Timestamp: stored}, stored, 41)
	m.OfferRetainedSeq(&progress.Event{Kind: progress.KindProgress, BatchID: 2, Timestamp: stored}, stored, 40)
	if mail := m.Take(); mail.Progress == nil || mail.Progress.BatchID != 3 || mail.ProgressSeq != 41 || mail.ProgressStored != stored.UnixNano() {
		t.Fatalf("take: %+v, want batch 3 at sequence 41", mail)
	}
	if mail := m.Take(); mail.ProgressSeq != 0 {
		t.Fatalf("a second take: %+v, want no sequence", mail)
	}
	m.OfferRetainedSeq(&progress.Event{Kind: progress.KindProgress, BatchID: 4, Timestamp: stored}, stored, 42)
	m.Offer(&progress.Event{Kind: progress.KindProgress, BatchID: 5, Timestamp: stored})
	if mail := m.Take(); mail.Progress.BatchID != 5 || mail.ProgressSeq != 42 {
		t.Fatalf("live after retained: %+v, want the retained one's sequence 42", mail)
	}
	m.Offer(&progress.Event{Kind: progress.KindProgress, BatchID: 5, Timestamp: stored})
	if mail := m.Take(); mail.Progress != nil || !mail.NotNewer {
		t.Fatalf("a repeat of the taken progress: %+v, want not newer", mail)
	}
	m.Offer(&progress.Event{Kind: progress.KindProgress, BatchID: 5, Timestamp: stored.Add(time.Millisecond)})
	if mail := m.Take(); mail.Progress == nil || mail.ProgressSeq != 0 || mail.ProgressRetained {
		t.Fatalf("the same batch with a later timestamp, live: %+v, want it taken, no sequence", mail)
	}
}
