package finalizer_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/finalizer-dev/finalizer/control"
	"github.com/finalizer-dev/finalizer/finalizer"
	"github.com/finalizer-dev/finalizer/listener"
	"github.com/finalizer-dev/finalizer/progress"
)

// markStore is a fakeStore that also reads verdicts and records marks, as
// control.Store does, and stamps each move with the fake clock.
type markStore struct {
	*fakeStore
	clock *fakeClock
	mmu   sync.Mutex
	marks []string
}

func (s *markStore) Advance(ctx context.Context, a control.Advance) (control.Verdict, bool, error) {
	v, moved, err := s.fakeStore.Advance(ctx, a)
	if moved {
		s.mu.Lock()
		v.UpdatedAt, v.Sources = s.clock.Now(), a.Sources
		s.rows[a.Table] = v
		s.mu.Unlock()
	}
	return v, moved, err
}

func (s *markStore) Get(_ context.Context, table string) (control.Verdict, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	v, ok := s.rows[table]
	if !ok {
		return control.Verdict{}, fmt.Errorf("get %s: %w", table, control.ErrNotFound)
	}
	return v, nil
}

func (s *markStore) Mark(_ context.Context, table, mark string) (bool, error) {
	s.mmu.Lock()
	defer s.mmu.Unlock()
	s.marks = append(s.marks, mark)
	return true, nil
}

func (s *markStore) Marks() []string {
	s.mmu.Lock()
	defer s.mmu.Unlock()
	return append([]string(nil), s.marks...)
}

// put sets a table's row, as another writer or an operator would.
func (s *markStore) put(v control.Verdict) {
	s.mu.Lock()
	s.rows[v.Table] = v
	s.mu.Unlock()
}

type histRig struct {
	clock   *fakeClock
	store   *markStore
	bus     *fakeBus
	reg     *finalizer.Registry
	metrics *finalizer.Metrics
	logs    *observer.ObservedLogs
}

func newHistRig(t *testing.T) *histRig {
	t.Helper()
	core, logs := observer.New(zapcore.DebugLevel)
	clock := newFakeClock(utc("2026-09-29T00:00:00Z"))
	r := &histRig{clock: clock, store: &markStore{fakeStore: newFakeStore(), clock: clock}, bus: newFakeBus(), logs: logs}
	r.metrics = finalizer.NewMetrics(nil, clock.Now)
	r.reg = finalizer.NewRegistry(finalizer.RegistryConfig{
		Bus: r.bus, Store: r.store, Clock: clock, Logger: zap.New(core), Metrics: r.metrics, MaxBatch: -1,
	})
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := r.reg.Close(ctx); err != nil {
			t.Errorf("close: %v", err)
		}
	})
	return r
}

func (r *histRig) track(t *testing.T, queryID, runID, table string, spec progress.Spec) {
	t.Helper()
	ok, err := r.reg.Track(context.Background(), finalizer.Request{QueryID: queryID, RunID: runID, Table: table, Spec: spec})
	if err != nil || !ok {
		t.Fatalf("track: %v %v", ok, err)
	}
}

func (r *histRig) signs(kind string) float64 {
	return testutil.ToFloat64(r.metrics.HistorySigns.WithLabelValues(kind))
}

// evaluated counts the progress events trackers have evaluated.
func (r *histRig) evaluated() float64 {
	n := 0.0
	for _, o := range []string{"advanced", "same_period", "unchanged", "no_time", "capped"} {
		n += testutil.ToFloat64(r.metrics.Candidates.WithLabelValues(o))
	}
	return n
}

// publishOne publishes ev and waits until a tracker evaluated it (the
// mailbox keeps only the newest, so a burst would be one event).
func (r *histRig) publishOne(t *testing.T, ev *progress.Event) {
	t.Helper()
	before := r.evaluated()
	r.bus.Publish(ev)
	eventually(t, "the event evaluated", func() bool { return r.evaluated() > before })
}

func (r *histRig) warned(sub string) int {
	return r.logs.FilterLevelExact(zapcore.WarnLevel).FilterMessageSnippet(sub).Len()
}

func (r *histRig) status(runID string) finalizer.TrackerStatus {
	for _, s := range r.reg.Status() {
		if s.RunID == runID {
			return s
		}
	}
	return finalizer.TrackerStatus{}
}

const (
	queryOld = "aaaaaaaa-0000-4000-8000-000000000001"
	queryNew = "bbbbbbbb-0000-4000-8000-000000000002"
	runNew   = "cccccccc-0000-4000-8000-000000000003"
)

// progressAt is a progress of one CDC source ending at commitTS, posted at
// posted, of the given batch.
func progressAt(queryID, runID string, batch int64, posted time.Time, commitTS string, descs ...string) *progress.Event {
	if len(descs) == 0 {
		descs = []string{"SqlServerCdc[dbo.orders]"}
	}
	ev := &progress.Event{Kind: progress.KindProgress, QueryID: queryID, RunID: runID, BatchID: batch, Timestamp: posted}
	for i, d := range descs {
		ts := commitTS
		if i > 0 {
			ts = "2026-09-28T01:00:00" // any other source is far behind
		}
		ev.Sources = append(ev.Sources, progress.Source{Description: d, EndOffset: []byte(`{"commit_ts":"` + ts + `"}`)})
	}
	return ev
}

// A new query id at batch 0 on a table with a verdict: a WARN, the metric,
// and the table marked, once.
func TestResetAtBatchZeroIsSaid(t *testing.T) {
	r := newHistRig(t)
	movedAt := r.clock.Now()
	r.store.put(control.Verdict{Table: "t", FinalizedUntil: utc("2026-09-28T15:00:00Z"), EndTime: utc("2026-09-28T15:07:00Z"),
		QueryID: queryOld, RunID: runA, BatchID: 812, UpdatedAt: movedAt})
	r.track(t, queryNew, runNew, "t", hourSpec(t))
	posted := movedAt.Add(time.Hour)
	r.publishOne(t, progressAt(queryNew, runNew, 0, posted, "2026-09-28T09:10:00"))
	eventually(t, "the reset sign", func() bool { return r.signs(finalizer.SignReset) == 1 })
	if n := r.warned("a new query id started at batch 0"); n != 1 {
		t.Errorf("%d reset warnings, want 1", n)
	}
	eventually(t, "the mark", func() bool { return len(r.store.Marks()) >= 1 })
	if m := r.store.Marks()[0]; !strings.HasPrefix(m, "reset: query "+queryNew+" started at batch 0") || !strings.Contains(m, queryOld) {
		t.Errorf("mark = %q", m)
	}
	// Its batches reprocess hours below the old query's end: a new feeder
	// (ADR 0012), not a candidate behind its own end; the reset is said once.
	for i, ts := range []string{"2026-09-28T10:10:00", "2026-09-28T11:10:00"} {
		r.publishOne(t, progressAt(queryNew, runNew, int64(i+1), posted.Add(time.Duration(i+1)*time.Minute), ts))
	}
	st := r.status(runNew)
	if st.Behind != 0 || !strings.HasPrefix(st.Sign, "reset:") || r.signs(finalizer.SignBehind) != 0 || r.signs(finalizer.SignReset) != 1 {
		t.Errorf("status = %+v", st)
	}
	if v := r.store.Verdict("t"); !v.Equal(utc("2026-09-28T15:00:00Z")) {
		t.Errorf("verdict %v: a reset moves nothing back", v)
	}
	if n := len(r.store.Marks()); n != 1 {
		t.Errorf("%d marks, want 1", n)
	}
}

// Old news is not a sign: a batch 0 or an older progress posted before
// the verdict's move (a dead run's last progress applied again at
// recovery) says nothing about the table's history.
func TestOldNewsIsNotASign(t *testing.T) {
	r := newHistRig(t)
	movedAt := r.clock.Now()
	r.store.put(control.Verdict{Table: "t", FinalizedUntil: utc("2026-09-28T15:00:00Z"), EndTime: utc("2026-09-28T15:07:00Z"),
		QueryID: queryOld, UpdatedAt: movedAt})
	r.track(t, queryNew, runNew, "t", hourSpec(t))
	r.bus.Publish(progressAt(queryNew, runNew, 0, movedAt.Add(-time.Hour), "2026-09-28T09:10:00"))
	eventually(t, "the advance", func() bool { return len(r.store.Calls()) == 1 })
	r.track(t, queryOld, runA, "t", hourSpec(t))
	r.bus.Publish(progressAt(queryOld, runA, 800, movedAt.Add(-time.Minute), "2026-09-28T14:50:00"))
	eventually(t, "the second advance", func() bool { return len(r.store.Calls()) == 2 })
	if r.signs(finalizer.SignReset) != 0 || r.signs(finalizer.SignBehind) != 0 || len(r.store.Marks()) != 0 || r.warned("") != 0 {
		t.Errorf("signs from old news: reset %v, behind %v, marks %q", r.signs(finalizer.SignReset), r.signs(finalizer.SignBehind), r.store.Marks())
	}
}

// A checkpoint rolled back (same query id, a new run, batch ids and times
// going back): every candidate below the stored end is counted, the table
// is marked once.
func TestRollbackCandidatesBehindAreCounted(t *testing.T) {
	r := newHistRig(t)
	r.track(t, queryA, runA, "t", hourSpec(t))
	r.bus.Publish(progressAt(queryA, runA, 40, r.clock.Now(), "2026-09-28T15:07:00"))
	eventually(t, "the first move", func() bool { return r.store.Verdict("t").Equal(utc("2026-09-28T15:00:00Z")) })
	r.clock.Advance(time.Hour)
	r.track(t, queryA, runB, "t", hourSpec(t))
	for i, ts := range []string{"2026-09-28T12:00:00", "2026-09-28T12:30:00", "2026-09-28T15:07:00", "2026-09-28T16:10:00"} {
		r.publishOne(t, progressAt(queryA, runB, int64(30+i), r.clock.Now().Add(time.Duration(i)*time.Second), ts))
	}
	eventually(t, "the verdict past the rollback", func() bool { return r.store.Verdict("t").Equal(utc("2026-09-28T16:00:00Z")) })
	if got := r.signs(finalizer.SignBehind); got != 2 {
		t.Errorf("behind = %v, want 2 (12:00 and 12:30; 15:07 is not below)", got)
	}
	if st := r.status(runB); st.Behind != 2 || !strings.HasPrefix(st.Sign, "behind:") {
		t.Errorf("status = %+v", st)
	}
	if m := r.store.Marks(); len(m) != 1 || r.warned("a candidate is below the verdict's stored end") != 1 {
		t.Errorf("marks %q, want one", m)
	}
}

// Sources swapped between two runs of a query under source: 0: a warning
// (and the metric, and the mark). Picked by description, the tracker
// follows the right source.
func TestSourcesSwappedUnderAnIndex(t *testing.T) {
	orders, customers := "KafkaV2[Subscribe[orders]]", "KafkaV2[Subscribe[customers]]"
	r := newHistRig(t)
	r.track(t, queryA, runA, "by-index", hourSpec(t))
	byDesc, err := progress.ParseSpec(progress.SpecOptions{Source: "description:*[orders]]"})
	if err != nil {
		t.Fatal(err)
	}
	r.track(t, queryA, runA, "by-description", byDesc)
	r.bus.Publish(progressAt(queryA, runA, 7, r.clock.Now(), "2026-09-28T14:10:00", orders, customers))
	eventually(t, "both tables", func() bool {
		return r.store.Verdict("by-index").Equal(utc("2026-09-28T14:00:00Z")) && r.store.Verdict("by-description").Equal(utc("2026-09-28T14:00:00Z"))
	})
	r.clock.Advance(time.Minute)
	// The redeploy swaps the plan's sources: customers (far behind) is now 0.
	r.track(t, queryA, runB, "by-index", hourSpec(t))
	r.track(t, queryA, runB, "by-description", byDesc)
	ev := progressAt(queryA, runB, 8, r.clock.Now(), "2026-09-28T15:10:00", orders, customers)
	ev.Sources[0], ev.Sources[1] = ev.Sources[1], ev.Sources[0]
	r.bus.Publish(ev)
	eventually(t, "the warning", func() bool { return r.signs(finalizer.SignSourceChanged) == 1 })
	// A sign is counted, then logged, then marked on the row (Tracker.sign),
	// and the other table's tracker runs on its own: wait for each.
	eventually(t, "the warning's line", func() bool {
		return r.warned("has another description than when the verdict last moved") >= 1
	})
	eventually(t, "by description, the orders source moves on", func() bool {
		return r.store.Verdict("by-description").Equal(utc("2026-09-28T15:00:00Z"))
	})
	eventually(t, "the mark", func() bool { return len(r.store.Marks()) >= 1 })
	if n := r.warned("has another description than when the verdict last moved"); n != 1 {
		t.Errorf("%d source warnings, want 1", n)
	}
	if m := r.store.Marks(); !strings.HasPrefix(m[0], "source_changed: source 0") {
		t.Errorf("marks %q", m)
	}
	for _, c := range r.store.Calls() {
		if c.Table == "by-description" && c.RunID == runB && c.Sources[1] != orders {
			t.Errorf("by description, run B advanced from %q", c.Sources)
		}
	}
}

// After an operator's rewind the trackers of the table write their next
// candidate again, even in a period they had written; without it they
// would wait for the next period.
func TestRewoundTrackerWritesAgain(t *testing.T) {
	r := newHistRig(t)
	r.track(t, queryA, runA, "t", hourSpec(t))
	r.track(t, queryA, runA, "other", hourSpec(t))
	r.bus.Publish(progressAt(queryA, runA, 1, r.clock.Now(), "2026-09-28T15:05:00"))
	eventually(t, "the moves", func() bool { return len(r.store.Calls()) == 2 })
	r.store.put(control.Verdict{Table: "t", FinalizedUntil: utc("2026-09-28T12:00:00Z"), UpdatedAt: r.clock.Now()}) // finalizer rewind
	r.reg.Rewound("t", utc("2026-09-28T12:00:00Z"), time.Time{})
	r.bus.Publish(progressAt(queryA, runA, 2, r.clock.Now().Add(time.Second), "2026-09-28T15:20:00"))
	eventually(t, "the table advanced again", func() bool { return r.store.Verdict("t").Equal(utc("2026-09-28T15:00:00Z")) })
	time.Sleep(50 * time.Millisecond)
	n := 0
	for _, c := range r.store.Calls() {
		if c.Table == "other" {
			n++
		}
	}
	if n != 1 {
		t.Errorf("the other table was written %d times, want 1 (its tracker was not told)", n)
	}
	if got := testutil.ToFloat64(r.metrics.Rewinds); got != 1 {
		t.Errorf("rewinds seen = %v", got)
	}
	if r.signs(finalizer.SignBehind) != 0 {
		t.Error("a rewound table's next candidate is not behind: the tracker forgot the old end")
	}
}

// TestARewindClearsTheShownWriteAtOnce: after an operator's rewind a
// run's status (/v1/runs, finalizer status) showed its last write from
// before the rewind (written 15:00 while the table is at 12:00) until the
// run's next progress. The rewind clears it when it is heard; the other
// table's tracker of the same run still shows its own.
func TestARewindClearsTheShownWriteAtOnce(t *testing.T) {
	r := newHistRig(t)
	r.track(t, queryA, runA, "t", hourSpec(t))
	r.track(t, queryA, runA, "other", hourSpec(t))
	written := func(table string) time.Time {
		for _, s := range r.reg.Status() {
			if s.RunID == runA && s.Table == table {
				return s.Written
			}
		}
		t.Fatalf("no status of %s", table)
		return time.Time{}
	}
	r.bus.Publish(progressAt(queryA, runA, 1, r.clock.Now(), "2026-09-28T15:05:00"))
	eventually(t, "both writes shown", func() bool {
		return written("t").Equal(utc("2026-09-28T15:00:00Z")) && written("other").Equal(utc("2026-09-28T15:00:00Z"))
	})
	r.store.put(control.Verdict{Table: "t", FinalizedUntil: utc("2026-09-28T12:00:00Z"), UpdatedAt: r.clock.Now()}) // finalizer rewind
	r.reg.Rewound("t", utc("2026-09-28T12:00:00Z"), time.Time{})
	if got := written("t"); !got.IsZero() {
		t.Errorf("after the rewind the run's status shows written %s, from before it", got)
	}
	if got := written("other"); !got.Equal(utc("2026-09-28T15:00:00Z")) {
		t.Errorf("the other table's status shows written %s, want its own 15:00", got)
	}
	r.bus.Publish(progressAt(queryA, runA, 2, r.clock.Now().Add(time.Second), "2026-09-28T16:05:00"))
	eventually(t, "the next write shown", func() bool { return written("t").Equal(utc("2026-09-28T16:00:00Z")) })
}

// A reset whose batch 0 was replaced in the one-slot mailbox by the run's
// next progress before the worker took it (a burst, a catch-up after a
// restart) is said all the same: the worker never sees batch 0 itself.
func TestResetWithBatchZeroCoalescedIsSaid(t *testing.T) {
	r := newHistRig(t)
	movedAt := r.clock.Now()
	r.store.put(control.Verdict{Table: "t", FinalizedUntil: utc("2026-09-28T15:00:00Z"), EndTime: utc("2026-09-28T15:07:00Z"),
		QueryID: queryOld, RunID: runA, BatchID: 812, UpdatedAt: movedAt})
	posted := movedAt.Add(time.Hour)
	r.bus.afterSubscribe = func(runID string, box *listener.Mailbox) {
		box.Offer(progressAt(queryNew, runNew, 0, posted, "2026-09-28T09:10:00"))
		box.Offer(progressAt(queryNew, runNew, 1, posted.Add(time.Minute), "2026-09-28T10:10:00"))
		box.Offer(progressAt(queryNew, runNew, 2, posted.Add(2*time.Minute), "2026-09-28T11:10:00"))
	}
	r.track(t, queryNew, runNew, "t", hourSpec(t))
	eventually(t, "the reset sign", func() bool { return r.signs(finalizer.SignReset) == 1 })
	eventually(t, "the mark", func() bool { return len(r.store.Marks()) == 1 })
	if n := r.warned("a new query id started at batch 0"); n != 1 {
		t.Errorf("%d reset warnings, want 1", n)
	}
	// Later progress of the run says nothing more.
	r.publishOne(t, progressAt(queryNew, runNew, 3, posted.Add(3*time.Minute), "2026-09-28T12:10:00"))
	if r.signs(finalizer.SignReset) != 1 || len(r.store.Marks()) != 1 {
		t.Errorf("reset signs %v, marks %q: want one of each", r.signs(finalizer.SignReset), r.store.Marks())
	}
}
