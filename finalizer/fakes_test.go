package finalizer_test

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cenkalti/backoff/v4"

	"github.com/finalizer-dev/finalizer/control"
	"github.com/finalizer-dev/finalizer/finalizer"
	"github.com/finalizer-dev/finalizer/listener"
	"github.com/finalizer-dev/finalizer/progress"
)

// fakeClock is a Clock whose time moves only when a test says so. Timers
// fire when the clock passes their deadline.
type fakeClock struct {
	mu     sync.Mutex
	now    time.Time
	timers []*fakeTimer
	starts []time.Duration // every Start duration, in order
}

func newFakeClock(now time.Time) *fakeClock { return &fakeClock{now: now} }

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) NewTimer() backoff.Timer {
	return &fakeTimer{c: c, ch: make(chan time.Time, 1)}
}

// Advance moves the clock and fires the timers that are due.
func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	now := c.now
	var due []*fakeTimer
	kept := c.timers[:0]
	for _, t := range c.timers {
		if !t.at.After(now) {
			due = append(due, t)
		} else {
			kept = append(kept, t)
		}
	}
	c.timers = kept
	c.mu.Unlock()
	for _, t := range due {
		if t.fn != nil {
			t.fn()
			continue
		}
		select {
		case t.ch <- now:
		default:
		}
	}
}

// AfterFunc arms a timer that calls f when the clock passes d from now.
func (c *fakeClock) AfterFunc(d time.Duration, f func()) func() bool {
	t := &fakeTimer{c: c, fn: f}
	t.Start(d)
	return func() bool {
		c.mu.Lock()
		defer c.mu.Unlock()
		for i, o := range c.timers {
			if o == t {
				c.timers = append(c.timers[:i], c.timers[i+1:]...)
				return true
			}
		}
		return false
	}
}

// Waiting returns how many timers are armed.
func (c *fakeClock) Waiting() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.timers)
}

// Starts returns the durations timers were started with, retry timers
// only (the registry janitor's 30 s timer is left out).
func (c *fakeClock) Starts() []time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []time.Duration
	for _, d := range c.starts {
		if d != 30*time.Second {
			out = append(out, d)
		}
	}
	return out
}

type fakeTimer struct {
	c  *fakeClock
	ch chan time.Time
	fn func() // AfterFunc's; nil for NewTimer's
	at time.Time
}

func (t *fakeTimer) Start(d time.Duration) {
	t.c.mu.Lock()
	t.at = t.c.now.Add(d)
	t.c.timers = append(t.c.timers, t)
	t.c.starts = append(t.c.starts, d)
	t.c.mu.Unlock()
}

func (t *fakeTimer) Stop() {
	t.c.mu.Lock()
	defer t.c.mu.Unlock()
	for i, o := range t.c.timers {
		if o == t {
			t.c.timers = append(t.c.timers[:i], t.c.timers[i+1:]...)
			return
		}
	}
}

func (t *fakeTimer) C() <-chan time.Time { return t.ch }

// fakeStore is a control table in memory. failures makes the next n
// advances fail.
type fakeStore struct {
	mu      sync.Mutex
	rows    map[string]control.Verdict
	rewinds map[string]time.Time
	// positions is the event stream's position recorded with each
	// table's last rewind (control.Store.RecordRewindPosition).
	positions map[string]control.RewindPosition
	// rewindReads counts Rewinds calls.
	rewindReads    int
	rewindFailures int // Rewinds fails this many times first
	// rewindGate, when set, holds every Rewinds call until it is closed
	// (or the call's context ends): a read under way.
	rewindGate chan struct{}
	calls      []control.Advance
	failures   int
	err        error
	called     chan struct{}
}

var errDown = errors.New("postgresql unavailable: connection refused")

func newFakeStore() *fakeStore {
	return &fakeStore{rows: map[string]control.Verdict{}, called: make(chan struct{}, 100)}
}

func (s *fakeStore) Advance(_ context.Context, a control.Advance) (control.Verdict, bool, error) {
	s.mu.Lock()
	defer func() {
		s.mu.Unlock()
		select {
		case s.called <- struct{}{}:
		default:
		}
	}()
	s.calls = append(s.calls, a)
	if s.failures > 0 || s.err != nil {
		if s.failures > 0 {
			s.failures--
		}
		err := s.err
		if err == nil {
			err = errDown
		}
		return control.Verdict{}, false, err
	}
	v, ok := s.rows[a.Table]
	if ok && a.Guard.Refuses(v.RewoundAt) {
		// As the statements do (ADR 0019, addendum of 2026-12-06).
		return v, false, fmt.Errorf("advance %s: %w", a.Table, control.ErrBeforeRewind)
	}
	if ok && !a.FinalizedUntil.After(v.FinalizedUntil) {
		return v, false, nil
	}
	v = control.Verdict{Table: a.Table, FinalizedUntil: a.FinalizedUntil, EndTime: a.EndTime, EndOffset: a.EndOffset,
		QueryID: a.QueryID, RunID: a.RunID, BatchID: a.BatchID, RewoundAt: v.RewoundAt}
	s.rows[a.Table] = v
	return v, true, nil
}

// passGate waits until the gate *g (read under mu) is closed, or ctx
// ends; a nil gate passes at once.
func passGate(ctx context.Context, mu *sync.Mutex, g *chan struct{}) error {
	mu.Lock()
	gate := *g
	mu.Unlock()
	if gate == nil {
		return nil
	}
	select {
	case <-gate:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Rewinds is control.Store.Rewinds (finalizer.RewindLister).
func (s *fakeStore) Rewinds(ctx context.Context) (map[string]time.Time, error) {
	if err := passGate(ctx, &s.mu, &s.rewindGate); err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.rewindReads++
	if s.rewindFailures > 0 {
		s.rewindFailures--
		return nil, errors.New("the control database does not answer")
	}
	out := make(map[string]time.Time, len(s.rewinds))
	for k, v := range s.rewinds {
		out[k] = v
	}
	return out, nil
}

// RewindsWithPositions is control.Store.RewindsWithPositions
// (finalizer.RewindPositioner).
func (s *fakeStore) RewindsWithPositions(ctx context.Context) (map[string]time.Time, map[string]control.RewindPosition, error) {
	at, err := s.Rewinds(ctx)
	if err != nil {
		return nil, nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make(map[string]control.RewindPosition, len(s.positions))
	for k, v := range s.positions {
		out[k] = v
	}
	return at, out, nil
}

// recordPosition records the event stream's position with table's last
// rewind, as finalizer rewind does after its commit
// (control.Store.RecordRewindPosition).
func (s *fakeStore) recordPosition(table string, seq uint64, created time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.positions == nil {
		s.positions = map[string]control.RewindPosition{}
	}
	s.positions[table] = control.RewindPosition{RewoundAt: s.rewinds[table],
		StreamPosition: control.StreamPosition{Seq: seq, Created: created}}
}

// rewind sets table's verdict back to to, rewound at at, as
// control.Store.Rewind does (a position recorded with an earlier rewind
// is cleared).
func (s *fakeStore) rewind(table string, to, at time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.rewinds == nil {
		s.rewinds = map[string]time.Time{}
	}
	s.rewinds[table] = at
	delete(s.positions, table)
	s.rows[table] = control.Verdict{Table: table, FinalizedUntil: to, RewoundAt: at}
}

func (s *fakeStore) setFailing(n int, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.failures, s.err = n, err
}

func (s *fakeStore) Calls() []control.Advance {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]control.Advance(nil), s.calls...)
}

func (s *fakeStore) Verdict(table string) time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.rows[table].FinalizedUntil
}

// fakeBus routes events to the mailboxes subscribed to their run, as the
// listener's subject filter does.
type fakeBus struct {
	mu     sync.Mutex
	boxes  map[string][]*listener.Mailbox
	unsubs map[string]int
	subs   map[string]int
	// afterSubscribe, when set, runs after each Subscribe, unlocked: a
	// live event that arrives right after the subscription.
	afterSubscribe func(runID string, box *listener.Mailbox)
	// retained is what RetainedRun answers per run id (the stream's
	// state of the run); a run not in it has nothing retained.
	retained map[string]listener.Run
}

// RetainedRun is listener.Listener.RetainedRun (finalizer.RunStater).
func (b *fakeBus) RetainedRun(_ context.Context, _, runID string) (listener.Run, bool, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	run, ok := b.retained[runID]
	return run, ok, nil
}

// retain sets what the stream retains of run.
func (b *fakeBus) retain(run listener.Run) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.retained == nil {
		b.retained = map[string]listener.Run{}
	}
	b.retained[run.RunID] = run
}

func newFakeBus() *fakeBus {
	return &fakeBus{boxes: map[string][]*listener.Mailbox{}, unsubs: map[string]int{}, subs: map[string]int{}}
}

func (b *fakeBus) Subscribe(queryID, runID string, box *listener.Mailbox) (finalizer.RunSubscription, error) {
	b.mu.Lock()
	b.boxes[runID] = append(b.boxes[runID], box)
	b.subs[runID]++
	after := b.afterSubscribe
	b.mu.Unlock()
	if after != nil {
		after(runID, box)
	}
	return &fakeSub{b: b, runID: runID, box: box}, nil
}

func (b *fakeBus) Publish(ev *progress.Event) {
	b.mu.Lock()
	boxes := append([]*listener.Mailbox(nil), b.boxes[ev.RunID]...)
	b.mu.Unlock()
	for _, box := range boxes {
		box.Offer(ev)
	}
}

func (b *fakeBus) Unsubscribes(runID string) int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.unsubs[runID]
}

type fakeSub struct {
	b     *fakeBus
	runID string
	box   *listener.Mailbox
	once  sync.Once
}

func (s *fakeSub) Unsubscribe() error {
	s.once.Do(func() {
		s.b.mu.Lock()
		defer s.b.mu.Unlock()
		s.b.unsubs[s.runID]++
		boxes := s.b.boxes[s.runID]
		for i, b := range boxes {
			if b == s.box {
				s.b.boxes[s.runID] = append(boxes[:i], boxes[i+1:]...)
				break
			}
		}
	})
	return nil
}

const (
	queryA = "8d268dc2-bc9c-4be8-97a9-b135d2943028"
	runA   = "e225d92f-2545-48f8-87a2-9c0309580f8a"
	runB   = "11111111-2222-4333-8444-555555555555"
	runC   = "0c0c0c0c-2222-4333-8444-555555555555"
)

// batchSeq numbers cdcProgress's batches; atomic, since a fake bus's
// catch-up may make progress on several of the registry's goroutines.
var batchSeq atomic.Int64

// cdcProgress is a progress of run whose source ends at commitTS (naive
// UTC, the reference's CDC offset shape).
func cdcProgress(runID, commitTS string) *progress.Event {
	return &progress.Event{
		Kind: progress.KindProgress, QueryID: queryA, RunID: runID,
		Timestamp: time.Now().UTC(), BatchID: batchSeq.Add(1),
		Sources: []progress.Source{{EndOffset: []byte(`{"lsn":"0x00000027000001a80003","commit_ts":"` + commitTS + `"}`)}},
	}
}

func terminated(runID string) *progress.Event {
	return &progress.Event{Kind: progress.KindTerminated, QueryID: queryA, RunID: runID, BatchID: -1}
}

func idle(runID string) *progress.Event {
	return &progress.Event{Kind: progress.KindIdle, QueryID: queryA, RunID: runID, BatchID: -1, Timestamp: time.Now().UTC()}
}

func hourSpec(t *testing.T) progress.Spec {
	t.Helper()
	s, err := progress.ParseSpec(progress.SpecOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func utc(s string) time.Time {
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		panic(err)
	}
	return t
}

// eventually polls cond until it holds or the deadline passes.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

func untils(calls []control.Advance) []time.Time {
	out := make([]time.Time, len(calls))
	for i, c := range calls {
		out[i] = c.FinalizedUntil
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Before(out[j]) })
	return out
}
