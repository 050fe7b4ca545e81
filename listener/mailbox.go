package listener

import (
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/finalizer-dev/finalizer/progress"
)

// Mailbox is the one-slot mailbox of one tracked run. It keeps the newest
// progress of the run (a newer one replaces one still waiting), remembers
// that an idle event or the termination arrived, and wakes one worker. Offer
// never blocks, so it is safe to call from a NATS callback. The zero value is
// not usable; call NewMailbox.
//
// A progress that arrives through the run's subscription waits in the slot
// as it arrived, unparsed, and is parsed by Take, so that of a burst only the
// newest is parsed (ADR 0011); one that another waiting or newer progress
// makes useless is counted as superseded and never parsed.
type Mailbox struct {
	mu       sync.Mutex
	progress *progress.Event // waiting, parsed; nil when raw waits or none
	raw      *rawProgress    // waiting, not parsed yet; nil when progress waits or none
	// The waiting progress that raw replaced, kept until Take so that a
	// raw one that peeked well but fails its parse does not lose it: the
	// newest parsed one, and the unparsed ones raw replaced since (oldest
	// first, at most maxFallbacks), which are newer than it.
	fbEvent    *progress.Event
	fbRaws     []*rawProgress
	taken      mark      // the newest progress already taken
	idleAt     time.Time // the newest idle event's timestamp since the last Take
	started    *progress.Event
	terminated *progress.Event
	// stored is when the stream stored the retained progress that last
	// entered the slot (OfferRetainedAt: Unix ns, the NATS server's
	// clock), 0 when none did since the last Take or its time is not
	// known (Mail.ProgressStored). Below 0, it is instead when the
	// progress that entered the slot was heard live, earlier than its
	// offer (OfferHeardAt: -Unix ns, Mail.ProgressHeard).
	stored int64
	// seq is the stream sequence of the retained progress that last
	// entered the slot (OfferRetainedSeq; Mail.ProgressSeq), 0 when none
	// did since the last Take or it is not known. A retained progress is
	// judged against a rewind by it, never by a clock (ADR 0019, addendum
	// of 2026-12-06, "judged by sequence"). Its 8 bytes come out of
	// taken's timestamp, kept as Unix ns (mark): the mailbox stays in its
	// 160-byte size class (TestMailboxWakeOnDemand).
	seq uint64
	// The flags sit together, in one word (the mailbox stays in its
	// 160-byte size class, issue 12).
	hasTaken bool
	idle     bool // an idle event arrived since the last Take
	notNewer bool // a progress not newer than the waiting or taken one arrived since the last Take
	// zero: a progress of batch 0 arrived before any was taken, though a
	// newer one may have replaced it in the slot (Mail.BatchZero).
	zero bool
	// missed: a signal came before anyone asked for wake.
	missed bool
	// heard: an event was offered live (Offer, not OfferRetained) since
	// the last Take (Mail.Heard).
	heard bool
	// retained: a progress from the stream's retained copy
	// (OfferRetained) entered the slot since the last Take
	// (Mail.ProgressRetained).
	retained bool
	// quiet: the tracker said, after its last step, that an idle event
	// or a progress not newer than the one taken changes nothing for it
	// (SetQuiet); such an event is stamped (notify(true)) instead of
	// waking it. Take clears it.
	quiet bool
	// wake is made by the first Wake: a tracker on the registry's pool is
	// told by notify and never reads it (issue 12: 96 bytes per run).
	wake chan struct{}
	// notify, when set, is called after every Offer instead of the signal
	// on wake: the tracker's scheduling (SetNotify, SetNotifier).
	notify atomic.Pointer[Notifier]
}

// maxFallbacks is how many unparsed progress messages, replaced by newer
// ones before a Take, the slot keeps in case the newer ones fail their
// parse. Beyond it the oldest is dropped; the parsed fallback is kept.
const maxFallbacks = 8

// mark is what the slot remembers of a progress already taken: enough to
// order a later one (progress.Event.Newer reads only these). ts is the
// progress's timestamp as Unix ns (tsKey): 8 bytes where a time.Time took
// 24, which made room for the stream sequence (Mailbox.seq).
type mark struct {
	batch int64
	ts    int64
}

// tsKey is t as Unix ns for mark, ordered as t is: math.MinInt64 for the
// zero time (before every other), and clamped to the range Unix ns can
// hold (years 1678 to 2262; two timestamps beyond it compare equal, so
// the later of them is taken as a repeat, not as newer).
func tsKey(t time.Time) int64 {
	switch {
	case t.IsZero():
		return math.MinInt64
	case t.Before(minKeyTime):
		return math.MinInt64 + 1
	case t.After(maxKeyTime):
		return math.MaxInt64
	}
	return t.UnixNano()
}

var (
	minKeyTime = time.Unix(0, math.MinInt64+1)
	maxKeyTime = time.Unix(0, math.MaxInt64)
)

// rawProgress is a progress message of a tracked run, not parsed yet. Its
// batch id was read from the payload by peekProgress, without parsing.
//
// Its records come from rawPool and go back once the slot is done with
// them: parsed (parseRaw) or superseded, the only two ends of one (issue
// 12, third session: the router's delivery then allocates nothing, where
// it allocated 112 bytes per event). A record dropped with its mailbox
// (the run stopped) is collected as before. Nothing keeps the pointer
// past its end: the Event a parse returns shares no memory with it.
type rawProgress struct {
	sub     *RunSubscription
	subject string
	es      eventSubject
	data    []byte
	batch   int64
}

var rawPool = sync.Pool{New: func() any { return new(rawProgress) }}

// newRawProgress returns a record of rawPool holding the message.
func newRawProgress(sub *RunSubscription, subject string, es eventSubject, data []byte, batch int64) *rawProgress {
	r := rawPool.Get().(*rawProgress)
	*r = rawProgress{sub: sub, subject: subject, es: es, data: data, batch: batch}
	return r
}

// free clears r (it holds the message's payload) and returns it to
// rawPool. r is not used after.
func (r *rawProgress) free() {
	*r = rawProgress{}
	rawPool.Put(r)
}

// parse parses and checks the message, counting its outcome as the
// subscription's eager path does, and frees r; nil when it is not a
// usable progress.
func (r *rawProgress) parse() *progress.Event {
	l := r.sub.l
	ev, outcome, err := l.check(r.es, r.data)
	if err != nil {
		l.drop(r.es, r.subject, outcome, err)
		r.free()
		return nil
	}
	l.event(progress.KindProgress, OutcomeAccepted)
	r.free()
	return ev
}

// superseded counts a raw progress that will never be parsed, and frees
// r.
func (r *rawProgress) superseded() {
	r.sub.l.event(progress.KindProgress, OutcomeSuperseded)
	r.free()
}

// Mail is what a worker takes out of a Mailbox at once.
type Mail struct {
	// Progress is the newest progress not yet taken, or nil.
	Progress *progress.Event
	// Idle is true when an idle event (QueryIdleEvent) arrived since the
	// last Take: a chance to retry.
	Idle bool
	// NotNewer is true when a progress arrived since the last Take that was
	// put in no slot because it was not newer than the waiting one or the
	// one already taken (a repeat, or a catch-up's older copy): also a
	// chance to retry.
	NotNewer bool
	// IdleAt is the newest timestamp of an idle event (QueryIdleEvent)
	// since the last Take; zero when none carried one.
	IdleAt time.Time
	// Terminated is the run's termination event, or nil. Once set it is
	// returned by every later Take.
	Terminated *progress.Event
	// Started is the run's started event if one arrived since the last
	// Take, or nil. It says when the run started (ADR 0017).
	Started *progress.Event
	// BatchZero is true when a progress of batch 0 arrived before any
	// progress was taken, even when a newer one replaced it in the slot:
	// the run started a checkpoint (a reset on a table with a verdict of
	// another query, ADR 0019), which the coalescing must not hide.
	BatchZero bool
	// Heard is true when an event was offered live since the last Take
	// (Offer); false when all came from the stream's retained copy
	// (OfferRetained: a catch-up, a restart's recovery).
	Heard bool
	// ProgressRetained is true when a progress read from the stream's
	// retained copy (OfferRetained) entered the slot since the last Take:
	// Progress may be that one, not one heard now (a newer live one may
	// have replaced it; a bad live one may have fallen back to it).
	ProgressRetained bool
	// ProgressStored is when the stream stored the retained progress that
	// last entered the slot since the last Take (OfferRetainedAt: Unix
	// ns, the NATS server's clock, from the message's metadata); 0 when
	// none did or its time is not known (OfferRetained). Progress is
	// that progress, or a newer one offered after it (a live one, which
	// reached the stream after it): judged by this time, it is judged no
	// later than it came.
	ProgressStored int64
	// ProgressSeq is the stream sequence of the retained progress that
	// last entered the slot since the last Take (OfferRetainedSeq: from
	// the message's metadata, assigned by the stream's leader, increasing
	// within one stream); 0 when none did or it is not known. A tracker
	// judges a retained progress against its table's rewind by it, against
	// the stream's last sequence read after the rewind committed, never by
	// a clock (ADR 0019, addendum of 2026-12-06, "judged by sequence").
	ProgressSeq uint64
	// ProgressHeard is when the progress that entered the slot since the
	// last Take was heard live, when that was earlier than its offer
	// (OfferHeardAt: Unix ns, this process's clock); 0 otherwise (heard
	// as offered, or retained). Progress is that progress or a newer one:
	// judged by this time, it is judged no later than it came.
	ProgressHeard int64
}

// NewMailbox returns an empty Mailbox.
func NewMailbox() *Mailbox {
	return &Mailbox{}
}

// Offer puts an event of the mailbox's run into the mailbox and wakes the
// worker. A progress replaces the waiting one only when it is newer (see
// progress.Event.Newer), and it is put in the slot only when it is strictly
// newer than the last progress already taken; otherwise it is only noted
// (Mail.NotNewer). So a message recovered from JetStream, or delivered twice, never
// replaces or repeats a newer one. A started event is handed out once by
// the next Take. nil is ignored.
func (m *Mailbox) Offer(ev *progress.Event) { m.offer(ev, true, 0, 0) }

// OfferRetained is Offer for an event read from the stream's retained
// copy (a catch-up, a restart's recovery) rather than heard live: the
// next Take says so (Mail.Heard false when nothing else came), and a
// quiet mailbox does not stamp it (the run was not heard from now).
func (m *Mailbox) OfferRetained(ev *progress.Event) { m.offer(ev, false, 0, 0) }

// OfferRetainedAt is OfferRetained for an event the stream stored at
// stored (the server's clock, from the message's metadata): the next
// Take says when a retained progress that entered the slot was stored
// (Mail.ProgressStored), which a tracker judges against its table's
// last rewind instead of the progress's driver's timestamp. A zero stored
// is OfferRetained. Every read of the stream has the message's sequence
// too: OfferRetainedSeq.
func (m *Mailbox) OfferRetainedAt(ev *progress.Event, stored time.Time) {
	m.offer(ev, false, unixNanos(stored), 0)
}

// OfferRetainedSeq is OfferRetainedAt for an event the stream stored at
// stored with stream sequence seq (both from the message's metadata):
// the next Take also says the sequence of a retained progress that
// entered the slot (Mail.ProgressSeq), by which a tracker judges it
// against its table's last rewind. A zero seq is not known.
func (m *Mailbox) OfferRetainedSeq(ev *progress.Event, stored time.Time, seq uint64) {
	m.offer(ev, false, unixNanos(stored), seq)
}

// OfferHeardAt is Offer for a progress heard live at heard, earlier than
// now (this process's clock): one a registry held for a run waiting for
// its decision (discovery's pending run) and hands to the run's new
// tracker. The next Take says when it was heard (Mail.ProgressHeard), so
// that a tracker judges it against a rewind that came meanwhile by when
// it was heard, not by when it was handed over. A zero heard is Offer.
// A retained progress's stored time, when one entered the slot, is kept
// instead (the earlier-judged of the two).
func (m *Mailbox) OfferHeardAt(ev *progress.Event, heard time.Time) {
	m.offer(ev, true, -unixNanos(heard), 0)
}

// unixNanos is t in Unix ns, 0 for the zero time.
func unixNanos(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixNano()
}

// offer puts ev in the mailbox: heard now (live), or read from the
// stream's retained copy, stored at stored (Unix ns; 0 when not known)
// with stream sequence seq (0 when not known).
func (m *Mailbox) offer(ev *progress.Event, live bool, stored int64, seq uint64) {
	if ev == nil {
		return
	}
	stamped := false
	m.mu.Lock()
	if live {
		m.heard = true
	}
	switch ev.Kind {
	case progress.KindProgress:
		if ev.BatchID == 0 && !m.hasTaken {
			m.zero = true
		}
		if r := m.raw; r != nil {
			if r.batch > ev.BatchID {
				// ev loses to a message nobody has checked yet: check it.
				m.progress = m.admit(m.parseRaw())
			} else {
				m.raw = nil
				r.superseded()
				m.dropFallbacks()
			}
		}
		if ev.Newer(m.progress) && m.admit(ev) != nil {
			m.progress = ev
			switch {
			case !live:
				m.retained, m.stored, m.seq = true, stored, seq
			case stored < 0 && m.stored == 0:
				m.stored = stored // heard earlier (OfferHeardAt)
			}
		} else if stamped = m.stampQuiet(live); !stamped {
			m.notNewer = true
		}
	case progress.KindIdle:
		if stamped = m.stampQuiet(live); stamped {
			break
		}
		m.idle = true
		if ev.Timestamp.After(m.idleAt) {
			m.idleAt = ev.Timestamp
		}
	case progress.KindTerminated:
		if m.terminated == nil {
			m.terminated = ev
		}
	case progress.KindStarted:
		m.started = ev
	default:
		m.mu.Unlock()
		return
	}
	m.mu.Unlock()
	if !stamped {
		m.signal()
	}
}

// offerRaw puts a progress message into the slot without parsing it. It
// keeps the message with the higher batch id, the later arrival on a tie
// (a run's messages arrive in the order they were posted). A message that
// would lose to one waiting unchecked makes Offer check that one first, so
// that a bad message cannot hide a good one that arrived later; a message
// older than the progress already taken is only noted (Mail.NotNewer).
func (m *Mailbox) offerRaw(r *rawProgress) {
	stamped := false
	m.mu.Lock()
	m.heard = true // only the live router offers raw
	if r.batch == 0 && !m.hasTaken {
		m.zero = true
	}
	switch {
	case m.hasTaken && r.batch < m.taken.batch:
		r.superseded()
		if stamped = m.stampQuiet(true); !stamped {
			m.notNewer = true
		}
	case m.progress != nil:
		if r.batch >= m.progress.BatchID {
			m.dropFallbacks()
			m.fbEvent = m.progress
			m.progress, m.raw = nil, r
		} else {
			m.notNewer = true
			r.superseded()
		}
	case m.raw != nil:
		if r.batch >= m.raw.batch {
			m.keepRaw(m.raw)
			m.raw = r
			break
		}
		if m.progress = m.admit(m.parseRaw()); m.progress != nil {
			m.notNewer = true
			r.superseded()
		} else {
			m.raw = r
		}
	default:
		m.raw = r
	}
	m.mu.Unlock()
	if !stamped {
		m.signal()
	}
}

// parseRaw takes the waiting raw progress out of the slot and parses it;
// when it fails its parse (it peeked well but is malformed elsewhere), the
// progress it replaced is used instead, the newest usable fallback first,
// so bad messages lose no good one. It returns nil when none is usable.
// m.mu held; m.raw set.
func (m *Mailbox) parseRaw() *progress.Event {
	r := m.raw
	m.raw = nil
	ev := r.parse()
	for i := len(m.fbRaws) - 1; ev == nil && i >= 0; i-- {
		ev = m.fbRaws[i].parse()
		m.fbRaws = m.fbRaws[:i]
	}
	if ev == nil {
		ev = m.fbEvent
	}
	m.dropFallbacks()
	return ev
}

// keepRaw keeps r, replaced by a newer unparsed progress, as a fallback,
// dropping the oldest unparsed fallback beyond maxFallbacks. m.mu held.
func (m *Mailbox) keepRaw(r *rawProgress) {
	if len(m.fbRaws) == maxFallbacks {
		m.fbRaws[0].superseded()
		m.fbRaws = append(m.fbRaws[:0], m.fbRaws[1:]...)
	}
	m.fbRaws = append(m.fbRaws, r)
}

// dropFallbacks forgets every fallback: a usable progress newer than all
// of them is in hand. m.mu held.
func (m *Mailbox) dropFallbacks() {
	for _, r := range m.fbRaws {
		r.superseded()
	}
	m.fbEvent, m.fbRaws = nil, nil
}

// admit returns ev when it may go into the slot: strictly newer than the
// progress already taken. It returns nil otherwise, and for nil. m.mu held.
func (m *Mailbox) admit(ev *progress.Event) *progress.Event {
	if ev == nil || (m.hasTaken && !m.taken.before(ev)) {
		return nil
	}
	return ev
}

// SetNotify makes every later Offer call f(false) (outside the mailbox's
// lock, on the offering goroutine) instead of signalling Wake: a worker
// pool schedules the run's worker with it (ADR 0022). While the mailbox
// is quiet (SetQuiet), an idle event or a progress not newer than the one
// taken calls f(true) instead, under the mailbox's lock, and leaves
// nothing for Take: the tracker stamps when its run was last heard of,
// and that it is idle, without a step (ADR 0022, addendum 6). f must not
// block nor call the mailbox. nil goes back to Wake. It allocates;
// SetNotifier does not.
func (m *Mailbox) SetNotify(f func(stampOnly bool)) {
	if f == nil {
		m.mu.Lock()
		m.notify.Store(nil)
		m.quiet = false
		m.mu.Unlock()
		return
	}
	var n Notifier = notifyFunc(f)
	m.notify.Store(&n)
}

// Notifier is told of every Offer (see SetNotify, SetNotifier):
// Notify(false) when there is mail, Notify(true) when a quiet mailbox
// only stamps an event (SetQuiet).
type Notifier interface{ Notify(stampOnly bool) }

type notifyFunc func(stampOnly bool)

func (f notifyFunc) Notify(stampOnly bool) { f(stampOnly) }

// SetNotifier is SetNotify with n's Notify, where n points at a Notifier
// its caller keeps (a field of the tracker): nothing is allocated, where
// SetNotify's method value and its pointer were two heap objects per
// tracked run for the collector to mark (issue 12). nil goes back to Wake
// (and ends the quiet state).
func (m *Mailbox) SetNotifier(n *Notifier) {
	if n == nil {
		m.SetNotify(nil)
		return
	}
	m.notify.Store(n)
}

// SetQuiet says whether an idle event, or a progress not newer than the
// one taken, changes nothing for the mailbox's tracker (nothing pending
// to retry, no retry armed, no re-assert wanted, no quiet rule reading the
// idle time, not stopping). While it is quiet such an event only calls
// Notify(true); any other event (a newer progress, a started event, the
// termination) still calls Notify(false), and Take makes it not quiet
// again: the tracker says it once more after each step. Without a
// notifier it has no effect.
func (m *Mailbox) SetQuiet(quiet bool) {
	m.mu.Lock()
	m.quiet = quiet
	m.mu.Unlock()
}

// stampQuiet stamps an idle event, or a progress not newer than the one
// taken, with Notify(true) when the mailbox is quiet; it reports whether
// it did (then the event wakes nobody). A retained event (not live) is
// not stamped: it changes nothing, and the run was not heard from now.
// m.mu held.
func (m *Mailbox) stampQuiet(live bool) bool {
	if !m.quiet {
		return false
	}
	n := m.notify.Load()
	if n == nil {
		return false
	}
	if live {
		(*n).Notify(true)
	}
	return true
}

// signal wakes the worker without blocking.
func (m *Mailbox) signal() {
	if n := m.notify.Load(); n != nil {
		(*n).Notify(false)
		return
	}
	m.mu.Lock()
	w := m.wake
	m.missed = w == nil
	m.mu.Unlock()
	if w != nil {
		select {
		case w <- struct{}{}:
		default:
		}
	}
}

// Wake returns the channel that receives a value when mail is waiting. A
// worker selects on it and then calls Take.
func (m *Mailbox) Wake() <-chan struct{} {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.wake == nil {
		m.wake = make(chan struct{}, 1)
		if m.missed {
			m.wake <- struct{}{}
		}
	}
	return m.wake
}

// Take empties the slot and returns what was in it. A progress waiting
// unparsed is parsed now (on the caller's goroutine): a bad one is counted
// and dropped, one not strictly newer than the last taken is only noted
// (Mail.NotNewer). It never blocks on I/O; a Take after a wake that an earlier Take
// already served returns empty Mail (apart from a sticky Terminated).
func (m *Mailbox) Take() Mail {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.raw != nil {
		if ev := m.parseRaw(); ev != nil {
			if m.progress = m.admit(ev); m.progress == nil {
				m.notNewer = true
			}
		}
	}
	mail := Mail{Progress: m.progress, Idle: m.idle, NotNewer: m.notNewer, IdleAt: m.idleAt, Terminated: m.terminated, Started: m.started, BatchZero: m.zero, Heard: m.heard,
		ProgressRetained: m.retained, ProgressSeq: m.seq}
	if m.stored > 0 {
		mail.ProgressStored = m.stored
	} else {
		mail.ProgressHeard = -m.stored
	}
	m.idleAt, m.started, m.zero, m.heard, m.retained, m.stored, m.seq = time.Time{}, nil, false, false, false, 0, 0
	if m.progress != nil {
		m.taken, m.hasTaken = mark{batch: m.progress.BatchID, ts: tsKey(m.progress.Timestamp)}, true
	}
	m.progress = nil
	m.idle, m.notNewer, m.quiet = false, false, false
	return mail
}

// before reports whether e is strictly newer than the progress m marks: a
// later batch, or the same batch with a later timestamp. A duplicate is not
// newer.
func (mk mark) before(e *progress.Event) bool {
	if e.BatchID != mk.batch {
		return e.BatchID > mk.batch
	}
	return tsKey(e.Timestamp) > mk.ts
}
