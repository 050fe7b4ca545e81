package listener

import (
	"sync"

	"github.com/finalizer-dev/finalizer/progress"
)

// Mailbox is the one-slot mailbox of one tracked run. It keeps the newest
// progress of the run (a newer one replaces one still waiting), remembers
// that an idle event or the termination arrived, and wakes one worker. Offer
// never blocks, so it is safe to call from a NATS callback. The zero value is
// not usable; call NewMailbox.
type Mailbox struct {
	mu         sync.Mutex
	progress   *progress.Event // waiting, not taken yet
	taken      *progress.Event // the newest progress already taken
	idle       bool
	terminated *progress.Event
	wake       chan struct{}
}

// Mail is what a worker takes out of a Mailbox at once.
type Mail struct {
	// Progress is the newest progress not yet taken, or nil.
	Progress *progress.Event
	// Idle is true when an idle event, or a progress that was put in no slot
	// because it was not newer (than the waiting one, or than one already
	// taken), arrived since the last Take: a chance to retry.
	Idle bool
	// Terminated is the run's termination event, or nil. Once set it is
	// returned by every later Take.
	Terminated *progress.Event
}

// NewMailbox returns an empty Mailbox.
func NewMailbox() *Mailbox {
	return &Mailbox{wake: make(chan struct{}, 1)}
}

// Offer puts an event of the mailbox's run into the mailbox and wakes the
// worker. A progress replaces the waiting one only when it is newer (see
// progress.Event.Newer), and it is put in the slot only when it is strictly
// newer than the last progress already taken; otherwise it counts as an idle
// event. So a message recovered from JetStream, or delivered twice, never
// replaces or repeats a newer one. Started events and nil are ignored.
func (m *Mailbox) Offer(ev *progress.Event) {
	if ev == nil {
		return
	}
	m.mu.Lock()
	switch ev.Kind {
	case progress.KindProgress:
		if ev.Newer(m.progress) && (m.taken == nil || strictlyNewer(ev, m.taken)) {
			m.progress = ev
		} else {
			m.idle = true
		}
	case progress.KindIdle:
		m.idle = true
	case progress.KindTerminated:
		if m.terminated == nil {
			m.terminated = ev
		}
	default:
		m.mu.Unlock()
		return
	}
	m.mu.Unlock()
	select {
	case m.wake <- struct{}{}:
	default:
	}
}

// Wake returns the channel that receives a value when mail is waiting. A
// worker selects on it and then calls Take.
func (m *Mailbox) Wake() <-chan struct{} { return m.wake }

// Take empties the slot and returns what was in it. It never blocks; a
// Take after a wake that an earlier Take already served returns empty Mail
// (apart from a sticky Terminated).
func (m *Mailbox) Take() Mail {
	m.mu.Lock()
	defer m.mu.Unlock()
	mail := Mail{Progress: m.progress, Idle: m.idle, Terminated: m.terminated}
	if m.progress != nil {
		m.taken = m.progress
	}
	m.progress = nil
	m.idle = false
	return mail
}

// strictlyNewer reports whether e is newer than old: a later batch, or the
// same batch with a later timestamp. A duplicate is not newer.
func strictlyNewer(e, old *progress.Event) bool {
	if e.BatchID != old.BatchID {
		return e.BatchID > old.BatchID
	}
	return e.Timestamp.After(old.Timestamp)
}
