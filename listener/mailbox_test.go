package listener_test

import (
	"sync"
	"testing"
	"time"

	"github.com/finalizer-dev/finalizer/listener"
	"github.com/finalizer-dev/finalizer/progress"
)

var t0 = time.Date(2026, 9, 28, 13, 10, 0, 0, time.UTC)

func prog(batch int64, ts time.Time) *progress.Event {
	return &progress.Event{Kind: progress.KindProgress, BatchID: batch, Timestamp: ts}
}

func ofKind(k progress.Kind) *progress.Event {
	return &progress.Event{Kind: k, BatchID: -1}
}

// batchOf returns the batch id of the mail's progress, or -100 for none.
func batchOf(m listener.Mail) int64 {
	if m.Progress == nil {
		return -100
	}
	return m.Progress.BatchID
}

func TestMailboxSlot(t *testing.T) {
	tests := []struct {
		name      string
		steps     []*progress.Event // nil = Take in between
		wantBatch int64             // -100 = no progress
		wantIdle  bool              // an idle event arrived
		wantOlder bool              // Mail.NotNewer: a progress not newer arrived
	}{
		{"newer replaces waiting", []*progress.Event{prog(1, t0), prog(2, t0.Add(time.Minute)), prog(3, t0.Add(2*time.Minute))}, 3, false, false},
		{"older does not replace newer", []*progress.Event{prog(5, t0), prog(3, t0.Add(time.Hour))}, 5, false, true},
		{"same batch later timestamp replaces", []*progress.Event{prog(5, t0), prog(5, t0.Add(time.Second))}, 5, false, false},
		{"older than taken is not delivered", []*progress.Event{prog(5, t0), nil, prog(3, t0)}, -100, false, true},
		{"duplicate of taken is not delivered", []*progress.Event{prog(5, t0), nil, prog(5, t0)}, -100, false, true},
		{"newer than taken is delivered", []*progress.Event{prog(5, t0), nil, prog(6, t0)}, 6, false, false},
		{"idle only", []*progress.Event{ofKind(progress.KindIdle)}, -100, true, false},
		{"idle and progress", []*progress.Event{prog(1, t0), ofKind(progress.KindIdle)}, 1, true, false},
		{"idle taken is cleared", []*progress.Event{ofKind(progress.KindIdle), nil}, -100, false, false},
		{"started is ignored", []*progress.Event{ofKind(progress.KindStarted), ofKind(progress.KindUnknown)}, -100, false, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := listener.NewMailbox()
			for _, ev := range tt.steps {
				if ev == nil {
					m.Take()
					continue
				}
				m.Offer(ev)
			}
			mail := m.Take()
			if got := batchOf(mail); got != tt.wantBatch {
				t.Errorf("progress batch = %d, want %d", got, tt.wantBatch)
			}
			if mail.Idle != tt.wantIdle || mail.NotNewer != tt.wantOlder {
				t.Errorf("Idle, NotNewer = %v, %v, want %v, %v", mail.Idle, mail.NotNewer, tt.wantIdle, tt.wantOlder)
			}
			if again := m.Take(); again.Progress != nil || again.Idle || again.NotNewer {
				t.Errorf("second Take = %+v, want empty", again)
			}
		})
	}
}

func TestMailboxSameBatchKeepsLatestTimestamp(t *testing.T) {
	m := listener.NewMailbox()
	later := prog(5, t0.Add(time.Second))
	m.Offer(later)
	m.Offer(prog(5, t0))
	if got := m.Take().Progress; got != later {
		t.Fatalf("Take = %+v, want the later timestamp", got)
	}
}

func TestMailboxTerminatedIsSticky(t *testing.T) {
	m := listener.NewMailbox()
	first := &progress.Event{Kind: progress.KindTerminated, Exception: "first"}
	m.Offer(prog(1, t0))
	m.Offer(first)
	m.Offer(&progress.Event{Kind: progress.KindTerminated, Exception: "second"})
	mail := m.Take()
	if mail.Terminated != first || batchOf(mail) != 1 {
		t.Fatalf("Take = %+v, want batch 1 and the first termination", mail)
	}
	for i := 0; i < 2; i++ {
		if got := m.Take().Terminated; got != first {
			t.Fatalf("Take #%d: Terminated = %v, want the first termination", i+2, got)
		}
	}
}

func TestMailboxWake(t *testing.T) {
	m := listener.NewMailbox()
	m.Offer(ofKind(progress.KindStarted))
	select {
	case <-m.Wake():
		if m.Take().Started == nil {
			t.Fatal("a started event woke the worker without being handed out")
		}
	default:
		t.Fatal("a started event did not wake the worker (it says when the run started)")
	}
	for i := int64(0); i < 10; i++ {
		m.Offer(prog(i, t0))
	}
	select {
	case <-m.Wake():
	default:
		t.Fatal("no wake after offers")
	}
	select {
	case <-m.Wake():
		t.Fatal("ten offers gave more than one pending wake")
	default:
	}
	if got := batchOf(m.Take()); got != 9 {
		t.Fatalf("batch = %d, want 9", got)
	}
}

func TestMailboxOfferNeverBlocks(t *testing.T) {
	m := listener.NewMailbox()
	const n = 100_000
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := int64(0); i < n; i++ {
			m.Offer(prog(i, t0))
			m.Offer(ofKind(progress.KindIdle))
		}
		m.Offer(nil)
	}()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("Offer blocked with nobody reading Wake")
	}
	if got := batchOf(m.Take()); got != n-1 {
		t.Fatalf("batch = %d, want %d", got, n-1)
	}
}

func TestMailboxConcurrentTakeSeesIncreasingBatches(t *testing.T) {
	m := listener.NewMailbox()
	const n = 20_000
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := int64(0); i < n; i++ {
			m.Offer(prog(i, t0))
		}
		m.Offer(&progress.Event{Kind: progress.KindTerminated})
	}()
	last := int64(-1)
	deadline := time.After(10 * time.Second)
	for {
		select {
		case <-m.Wake():
		case <-deadline:
			t.Fatalf("no termination; last batch %d", last)
		}
		mail := m.Take()
		if mail.Progress != nil {
			if mail.Progress.BatchID <= last {
				t.Fatalf("batch %d after %d", mail.Progress.BatchID, last)
			}
			last = mail.Progress.BatchID
		}
		if mail.Terminated != nil && last == n-1 {
			break
		}
	}
	wg.Wait()
}

// The newest idle event's timestamp reaches the worker (quiet sources, ADR
// 0014), once: an older one arriving later does not replace it.
func TestMailboxIdleAt(t *testing.T) {
	m := listener.NewMailbox()
	at := func(s string) time.Time {
		v, err := time.Parse(time.RFC3339, s)
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	idle := func(ts string) *progress.Event {
		return &progress.Event{Kind: progress.KindIdle, BatchID: -1, Timestamp: at(ts)}
	}
	m.Offer(idle("2026-09-28T15:30:00Z"))
	m.Offer(idle("2026-09-28T16:10:00Z"))
	m.Offer(idle("2026-09-28T15:50:00Z"))
	if mail := m.Take(); !mail.Idle || !mail.IdleAt.Equal(at("2026-09-28T16:10:00Z")) {
		t.Fatalf("Take = %+v, want idle at 16:10", mail)
	}
	if mail := m.Take(); mail.Idle || !mail.IdleAt.IsZero() {
		t.Fatalf("second Take = %+v, want nothing", mail)
	}
}

// A quiet mailbox (its tracker said an idle event changes nothing for it)
// stamps an idle event, or a progress older than the one taken, with
// notify(true) and keeps nothing for Take; every other event still calls
// notify(false), and Take makes it not quiet again.
func TestMailboxQuietStampsIdleEvents(t *testing.T) {
	m := listener.NewMailbox()
	var wakes, stamps int
	m.SetNotify(func(stampOnly bool) {
		if stampOnly {
			stamps++
		} else {
			wakes++
		}
	})
	m.Offer(prog(5, t0))
	if mail := m.Take(); mail.Progress == nil || wakes != 1 {
		t.Fatalf("Take = %+v, wakes %d; want batch 5, 1", mail, wakes)
	}
	// Not quiet: an idle event wakes, and Take says so.
	m.Offer(ofKind(progress.KindIdle))
	if mail := m.Take(); !mail.Idle || wakes != 2 || stamps != 0 {
		t.Fatalf("not quiet: Take = %+v, wakes %d, stamps %d; want idle, 2, 0", mail, wakes, stamps)
	}
	m.SetQuiet(true)
	m.Offer(&progress.Event{Kind: progress.KindIdle, BatchID: -1, Timestamp: t0.Add(time.Minute)})
	m.Offer(prog(4, t0)) // older than the one taken
	m.Offer(prog(5, t0)) // the one taken again
	if mail := m.Take(); mail.Idle || mail.NotNewer || !mail.IdleAt.IsZero() || wakes != 2 || stamps != 3 {
		t.Fatalf("quiet: Take = %+v, wakes %d, stamps %d; want empty, 2, 3", mail, wakes, stamps)
	}
	// Take ended the quiet: the next idle event wakes.
	m.Offer(ofKind(progress.KindIdle))
	if wakes != 3 || stamps != 3 {
		t.Fatalf("after Take: wakes %d, stamps %d; want 3, 3", wakes, stamps)
	}
	m.Take()
	// Quiet or not, a newer progress, a started event and the
	// termination wake.
	for _, ev := range []*progress.Event{prog(6, t0), ofKind(progress.KindStarted), ofKind(progress.KindTerminated)} {
		m.SetQuiet(true)
		before := wakes
		m.Offer(ev)
		if wakes != before+1 {
			t.Fatalf("quiet: %v woke nobody", ev.Kind)
		}
	}
	if mail := m.Take(); mail.Progress == nil || mail.Started == nil || mail.Terminated == nil {
		t.Fatalf("Take = %+v, want the progress, the start and the termination", mail)
	}
	// Without notify, quiet has no effect: the wake channel gets the signal.
	m.SetNotify(nil)
	m.SetQuiet(true)
	m.Offer(ofKind(progress.KindIdle))
	select {
	case <-m.Wake():
	default:
		t.Fatal("an idle event without notify sent no signal")
	}
	if mail := m.Take(); !mail.Idle {
		t.Fatalf("Take = %+v, want idle", mail)
	}
}

// An event read from the stream's retained copy (a restart's recovery, a
// catch-up) is not one heard now: the take says so, unless a live event
// came too, and a quiet mailbox does not stamp it. Before, the tracker
// stamped every take with the clock, so that after a restart every run
// showed as heard of at the restart (LAST EVENT).
func TestOfferRetainedIsNotHeard(t *testing.T) {
	m := listener.NewMailbox()
	retained := &progress.Event{Kind: progress.KindProgress, BatchID: 3, Timestamp: time.Now().Add(-time.Hour)}
	m.OfferRetained(retained)
	if mail := m.Take(); mail.Progress != retained || mail.Heard {
		t.Fatalf("retained: %+v, want its progress, not heard", mail)
	}
	m.OfferRetained(&progress.Event{Kind: progress.KindIdle})
	m.Offer(&progress.Event{Kind: progress.KindProgress, BatchID: 4, Timestamp: time.Now()})
	if mail := m.Take(); !mail.Heard {
		t.Fatalf("a live event with a retained one: %+v, want heard", mail)
	}
	var stamps []bool
	m.SetNotify(func(stampOnly bool) { stamps = append(stamps, stampOnly) })
	m.SetQuiet(true)
	m.OfferRetained(&progress.Event{Kind: progress.KindIdle})
	if len(stamps) != 0 {
		t.Fatalf("a retained idle event in a quiet mailbox notified %v, want nothing", stamps)
	}
	m.Offer(&progress.Event{Kind: progress.KindIdle})
	if len(stamps) != 1 || !stamps[0] {
		t.Fatalf("a live idle event in a quiet mailbox notified %v, want one stamp", stamps)
	}
}
