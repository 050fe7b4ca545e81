package finalizer_test

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/finalizer-dev/finalizer/listener"
	"github.com/finalizer-dev/finalizer/progress"
)

// streamCreated is when the fakes' event stream was created.
var streamCreated = utc("2026-01-01T00:00:00Z")

// markingBus is a fakeBus whose stream reports its last sequence and
// creation time (finalizer.StreamMarker), counting the requests.
type markingBus struct {
	*fakeBus
	mu      sync.Mutex
	last    uint64
	created time.Time
	asked   int
}

func (b *markingBus) StreamPosition(context.Context) (listener.StreamPosition, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.asked++
	return listener.StreamPosition{LastSeq: b.last, Created: b.created}, nil
}

// newMarkRig is newRig with a markingBus whose stream's last sequence is
// last.
func newMarkRig(t *testing.T, last uint64) (*rig, *markingBus) {
	t.Helper()
	mb := &markingBus{fakeBus: newFakeBus(), last: last, created: streamCreated}
	return newRigOver(t, mb, &batchFake{fakeStore: newFakeStore()}, rigOptions{}), mb
}

// rewindHeardLive rewinds each of tables to 14:00 at rewoundAt, in the
// store and as heard live by r's registry, and waits until the stream's
// state was read for every one of those rewinds.
func rewindHeardLive(t *testing.T, r *rig, rewoundAt time.Time, tables ...string) {
	t.Helper()
	for _, table := range tables {
		r.store.rewind(table, utc("2026-09-28T14:00:00Z"), rewoundAt)
		r.reg.Rewound(table, utc("2026-09-28T14:00:00Z"), rewoundAt)
	}
	eventually(t, "the stream's state read for the rewinds", func() bool {
		return r.logs.FilterMessageSnippet("the event stream's state when the rewind was heard").Len() == len(tables)
	})
}

// retainLast makes r's runs, once tracked, offered their last progress
// (at 18:10) from the stream's retained copy: posted at posted by its
// driver's clock, stored at stored with stream sequence seq.
func (r *rig) retainLast(posted, stored time.Time, seq uint64) {
	r.bus.afterSubscribe = func(runID string, box *listener.Mailbox) {
		ev := cdcProgress(runID, "2026-09-28T18:10:00")
		ev.Timestamp = posted
		box.OfferRetainedSeq(ev, stored, seq)
	}
}

// heardLiveRig is a mark rig (the stream's last sequence 100) whose
// tables were rewound to 14:00 at rewoundAt and heard live
// (rewindHeardLive), and tracked by runs A, B and C in that order, each
// offered its last progress (at 18:10) from the stream's retained copy
// as offer sets it: its driver's time, and where and when the stream
// stored it.
func heardLiveRig(t *testing.T, rewoundAt time.Time, offer func(runID string, ev *progress.Event, box *listener.Mailbox), tables ...string) (*rig, *markingBus) {
	t.Helper()
	r, mb := newMarkRig(t, 100)
	rewindHeardLive(t, r, rewoundAt, tables...)
	r.bus.afterSubscribe = func(runID string, box *listener.Mailbox) {
		offer(runID, cdcProgress(runID, "2026-09-28T18:10:00"), box)
	}
	for i, table := range tables {
		r.track(t, []string{runA, runB, runC}[i], table)
	}
	return r, mb
}

// TestARewindHeardLiveJudgesRetainedProgressByTheStreamsOwnClock (ADR
// 0019, addendum of 2026-12-06): the usual reset is a script (stop the
// old query, rewind, start the new one at once), and the new run's first
// progress is often read from the stream by its tracker's catch-up, not
// heard live. Stored seconds after the rewind, within the minute's
// margin across the NATS and PostgreSQL servers' clocks, it was held as
// before_rewind until the run's next progress: an AvailableNow run that
// posts one progress and terminates left the table at the rewind for
// good. A rewind heard live is now judged on the NATS server's own clock:
// the stream's newest stored time when the service heard it. Stored
// after it: applied (t_b); stored at or before it: held, whatever the
// driver's clock says (t_a, a driver ten minutes ahead). One request per
// rewind heard.
func TestARewindHeardLiveJudgesRetainedProgressByTheStreamsOwnClock(t *testing.T) {
	rewoundAt := utc("2026-09-29T00:00:00Z") // the fake clock's now
	type retained struct {
		posted, stored time.Time
		seq            uint64
	}
	last := map[string]retained{
		// The old run: the driver's clock ten minutes ahead, stored two
		// seconds before the rewind.
		runA: {rewoundAt.Add(8 * time.Minute), rewoundAt.Add(-2 * time.Second), 99},
		// The new run, started by the script right after the rewind: its
		// first progress stored five seconds after it, read from the
		// stream by its tracker's catch-up.
		runB: {rewoundAt.Add(4 * time.Second), rewoundAt.Add(5 * time.Second), 101},
	}
	r, mb := heardLiveRig(t, rewoundAt, func(runID string, ev *progress.Event, box *listener.Mailbox) {
		l := last[runID]
		ev.Timestamp = l.posted
		box.OfferRetainedSeq(ev, l.stored, l.seq)
	}, "t_a", "t_b")
	r.movesTo18(t, "t_b", "t_b applied")
	r.staysRewound(t, "t_a", "the old run's progress held", 1,
		"a retained progress stored before the rewind heard live was applied (driver's clock ahead): verdict %s")
	mb.mu.Lock()
	asked := mb.asked
	mb.mu.Unlock()
	if asked != 2 {
		t.Errorf("the stream's state was read %d times for two rewinds heard, want 2", asked)
	}
}

// TestARewindNotHeardLiveKeepsTheMargin: a rewind read from the rows (a
// restart's recovery) has no stream state of when it committed; a
// retained progress stored within the minute after it is still held.
func TestARewindNotHeardLiveKeepsTheMargin(t *testing.T) {
	rewoundAt := utc("2026-09-28T23:00:00Z")
	r, mb := newMarkRig(t, 100)
	r.store.rewind("t_a", utc("2026-09-28T14:00:00Z"), rewoundAt)
	if err := r.reg.Recover(context.Background(), nil, nil); err != nil {
		t.Fatal(err)
	}
	r.retainLast(rewoundAt.Add(10*time.Second), rewoundAt.Add(20*time.Second), 101)
	r.track(t, runB, "t_a")
	r.staysRewound(t, "t_a", "the progress held by the margin", 1,
		"a retained progress stored within the margin after a rewind not heard live was applied: verdict %s")
	mb.mu.Lock()
	defer mb.mu.Unlock()
	if mb.asked != 0 {
		t.Errorf("the stream's state was read %d times for a rewind not heard live", mb.asked)
	}
}

// TestARetainedProgressIsJudgedAgainstTheStoredRewoundAt (ADR 0019,
// addendum of 2026-12-06): a progress's driver timestamp was judged
// against when this service heard the rewind, and join said "posted
// before the rewind" of a progress posted after the rewound_at the audit
// shows. Against the notification's rewound_at (stamped with the row
// locked, within milliseconds of the commit): posted after it, applied
// (t_a); posted before it, held, and the hold names that rewound_at
// (t_b).
func TestARetainedProgressIsJudgedAgainstTheStoredRewoundAt(t *testing.T) {
	r := newRig(t)
	heard := r.clock.Now()
	rewoundAt := heard.Add(-5 * time.Second) // heard five seconds after its commit
	for _, table := range []string{"t_a", "t_b"} {
		r.store.rewind(table, utc("2026-09-28T14:00:00Z"), rewoundAt)
		r.reg.Rewound(table, utc("2026-09-28T14:00:00Z"), rewoundAt)
	}
	posted := map[string]time.Time{runA: rewoundAt.Add(2 * time.Second), runB: rewoundAt.Add(-time.Second)}
	r.bus.afterSubscribe = func(runID string, box *listener.Mailbox) {
		ev := cdcProgress(runID, "2026-09-28T18:10:00")
		ev.Timestamp = posted[runID]
		box.OfferRetained(ev) // no stored time: judged by its timestamp
	}
	r.track(t, runA, "t_a")
	r.track(t, runB, "t_b")
	r.movesTo18(t, "t_a", "t_a applied")
	r.staysRewound(t, "t_b", "the progress posted before the rewind held", 1,
		"a progress posted before the stored rewound_at was applied: verdict %s")
	for _, st := range r.reg.Status() {
		if st.Table == "t_b" && !strings.Contains(st.Held, "before its table was rewound at "+rewoundAt.UTC().Format(time.RFC3339Nano)) {
			t.Errorf("t_b's hold %q does not name the stored rewound_at %s", st.Held, rewoundAt.UTC().Format(time.RFC3339Nano))
		}
	}
}

// TestARewindReadBeforeItsNotificationIsMarkedWhenHeard: a rewind read
// from the rows (a re-read, a recovery) before its notification came is
// judged with the margin until the notification is heard; then the
// stream's state is read as for any rewind heard live, and a progress
// stored after it is applied.
func TestARewindReadBeforeItsNotificationIsMarkedWhenHeard(t *testing.T) {
	rewoundAt := utc("2026-09-29T00:00:00Z")
	r, mb := newMarkRig(t, 100)
	r.store.rewind("t_a", utc("2026-09-28T14:00:00Z"), rewoundAt)
	if err := r.reg.Recover(context.Background(), nil, nil); err != nil {
		t.Fatal(err)
	}
	r.reg.Rewound("t_a", utc("2026-09-28T14:00:00Z"), rewoundAt) // known already
	eventually(t, "the stream's state read", func() bool {
		return r.logs.FilterMessageSnippet("the event stream's state when the rewind was heard").Len() == 1
	})
	r.retainLast(rewoundAt.Add(4*time.Second), rewoundAt.Add(5*time.Second), 101)
	r.track(t, runB, "t_a")
	r.movesTo18(t, "t_a", "t_a applied")
	mb.mu.Lock()
	defer mb.mu.Unlock()
	if mb.asked != 1 {
		t.Errorf("the stream's state was read %d times, want 1", mb.asked)
	}
}
