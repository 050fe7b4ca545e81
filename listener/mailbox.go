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
	progress   *progress.Event
	idle       bool
	terminated *progress.Event
	wake       chan struct{}
}

// Mail is what a worker takes out of a Mailbox at once.
type Mail struct {
	// Progress is the newest progress not yet taken, or nil.
	Progress *progress.Event
	// Idle is true when an idle event (or a progress that was not newer than
	// one already taken) arrived since the last Take: a chance to retry.
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
// progress.Event.Newer), so a message recovered from JetStream never
// replaces a newer live one. Started events are ignored.
func (m *Mailbox) Offer(ev *progress.Event) {
	m.mu.Lock()
	switch ev.Kind {
	case progress.KindProgress:
		if ev.Newer(m.progress) {
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

// Take empties the slot and returns what was in it.
func (m *Mailbox) Take() Mail {
	m.mu.Lock()
	defer m.mu.Unlock()
	mail := Mail{Progress: m.progress, Idle: m.idle, Terminated: m.terminated}
	m.progress = nil
	m.idle = false
	return mail
}
