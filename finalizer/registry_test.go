package finalizer_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.uber.org/zap"

	"github.com/finalizer-dev/finalizer/control"
	"github.com/finalizer-dev/finalizer/finalizer"
	"github.com/finalizer-dev/finalizer/listener"
	"github.com/finalizer-dev/finalizer/progress"
)

func TestDiscoveredRunTrackedByRuleAndTemplate(t *testing.T) {
	r := newRig(t, finalizer.Rule{Table: "bronze.{name}", Query: "cdc_*", Spec: hourSpec(t)})
	r.reg.Discovered(listener.Run{QueryID: queryA, RunID: runA, Name: "cdc_orders", Kind: progress.KindStarted})
	r.reg.Discovered(listener.Run{QueryID: queryA, RunID: runB, Name: "other", Kind: progress.KindStarted})
	eventually(t, "tracked", func() bool { return len(r.reg.Status()) == 1 })
	eventually(t, "other run ignored", func() bool { return r.reg.Known(runB) })
	if s := r.reg.Status()[0]; s.Table != "bronze.cdc_orders" || s.RunID != runA {
		t.Fatalf("status = %+v", s)
	}
	r.bus.Publish(cdcProgress(runA, "2026-09-28T14:05:00"))
	r.bus.Publish(terminated(runA))
	if res := r.join(t, runA); !res.Done {
		t.Fatal("not done")
	}
	if v := r.store.Verdict("bronze.cdc_orders"); !v.Equal(utc("2026-09-28T14:00:00Z")) {
		t.Fatalf("verdict = %v", v)
	}
	if !r.reg.Known(runA) {
		t.Fatal("a finished run must stay known so its stray events are not parsed")
	}
}

func TestTrackTwiceIsOneTracker(t *testing.T) {
	r := newRig(t)
	r.track(t, runA, "t")
	ok, err := r.reg.Track(context.Background(), finalizer.Request{QueryID: queryA, RunID: runA, Table: "t", Spec: hourSpec(t)})
	if err != nil || ok {
		t.Fatalf("second track = %v, %v; want false, nil", ok, err)
	}
}

func TestJoinUnknownRun(t *testing.T) {
	r := newRig(t)
	if _, err := r.reg.Join(context.Background(), runB); !errors.Is(err, finalizer.ErrUnknownRun) {
		t.Fatalf("err = %v, want ErrUnknownRun", err)
	}
}

func TestJoinTimesOutWhileRunIsLive(t *testing.T) {
	r := newRig(t)
	r.track(t, runA, "t")
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	res, err := r.reg.Join(ctx, runA)
	if err != nil || res.Done {
		t.Fatalf("join = %+v, %v; want not done", res, err)
	}
}

// A new run of the same query supersedes the old run's tracker: it applies
// what is pending and stops; join says why it stopped.
func TestNewRunSupersedesOldRun(t *testing.T) {
	r := newRig(t, finalizer.Rule{Table: "t", Query: "orders", Spec: hourSpec(t)})
	r.reg.Discovered(started(runA, "orders", "2026-09-28T12:00:00Z"))
	eventually(t, "tracked", func() bool { return len(r.reg.Status()) == 1 })
	r.bus.Publish(cdcProgress(runA, "2026-09-28T13:05:00"))
	eventually(t, "first write", func() bool { return len(r.store.Calls()) == 1 })
	r.reg.Discovered(started(runB, "orders", "2026-09-28T13:30:00Z"))
	if res := r.join(t, runA); res.Done || !strings.Contains(res.Stopped, "superseded by run "+runB) {
		t.Fatalf("join of the old run = %+v, want stopped as superseded, not done", res)
	}
	eventually(t, "only the new run tracked", func() bool { st := r.reg.Status(); return len(st) == 1 && st[0].RunID == runB })
}

// Issue 18, bug 2: only a run that started later supersedes. A retried
// track of the old run, and the old run's started event replayed after the
// new run's (a rescan sorted by run id), stop the old run, never the new.
func TestOnlyALaterStartSupersedes(t *testing.T) {
	r := newRig(t)
	r.track(t, runB, "t")
	r.bus.Publish(started(runB, "orders", "2026-09-28T13:30:00Z").Event)
	r.track(t, runA, "t") // the retried track of the old run
	r.bus.Publish(started(runA, "orders", "2026-09-28T12:00:00Z").Event)
	eventually(t, "only the new run tracked", func() bool { st := r.reg.Status(); return len(st) == 1 && st[0].RunID == runB })
	if res := r.join(t, runA); res.Done || !strings.Contains(res.Stopped, "superseded by run "+runB) {
		t.Fatalf("join of the old run = %+v, want stopped as superseded", res)
	}
	r.bus.Publish(cdcProgress(runB, "2026-09-28T14:05:00"))
	eventually(t, "the new run writes", func() bool { return r.store.Verdict("t").Equal(utc("2026-09-28T14:00:00Z")) })
}

// Issue 17, item 4: on Spark Connect the started event can arrive after
// the first progress. A started event of a run already tracked still
// supersedes an older run, and a run known only by its progress time is
// superseded by a run that started after that time.
func TestLateStartedEventSupersedes(t *testing.T) {
	r := newRig(t)
	r.track(t, runA, "t")
	old := cdcProgress(runA, "2026-09-28T13:05:00")
	old.Timestamp = utc("2026-09-28T13:05:10Z") // no started event for the old run
	r.bus.Publish(old)
	eventually(t, "old run writes", func() bool { return len(r.store.Calls()) == 1 })
	r.track(t, runB, "t")
	r.bus.Publish(cdcProgress(runB, "2026-09-28T14:05:00")) // the new run's first progress, before its started event
	eventually(t, "new run writes", func() bool { return len(r.store.Calls()) == 2 })
	if st := r.reg.Status(); len(st) != 2 {
		t.Fatalf("status = %+v, want both runs tracked while no start is known", st)
	}
	r.bus.Publish(started(runB, "orders", "2026-09-28T14:00:00Z").Event)
	eventually(t, "only the new run tracked", func() bool { st := r.reg.Status(); return len(st) == 1 && st[0].RunID == runB })
	if res := r.join(t, runA); res.Done || !strings.Contains(res.Stopped, "superseded") {
		t.Fatalf("join of the old run = %+v, want stopped as superseded", res)
	}
}

// Issue 18, bug 1: a run first seen without a name (an idle event, no
// name retained) is undecided, not ignored: its next event that carries
// the name is considered, and the run is tracked.
func TestNamelessRunIsDecidedByALaterNamedEvent(t *testing.T) {
	r := newRig(t, finalizer.Rule{Table: "t", Query: "orders", Spec: hourSpec(t)})
	r.reg.Discovered(listener.Run{QueryID: queryA, RunID: runA, Kind: progress.KindIdle, Event: idle(runA)})
	eventually(t, "the nameless run decided on", func() bool { return !r.reg.Known(runA) && len(r.reg.Status()) == 0 })
	p := cdcProgress(runA, "2026-09-28T14:05:00")
	p.Name = "orders"
	r.reg.Discovered(listener.Run{QueryID: queryA, RunID: runA, Name: "orders", Kind: progress.KindProgress, Event: p})
	eventually(t, "tracked once its name is known", func() bool { return len(r.reg.Status()) == 1 })
	eventually(t, "its progress applied", func() bool { return r.store.Verdict("t").Equal(utc("2026-09-28T14:00:00Z")) })
}

// Issue 18, bug 4a: the progress that revealed a run to discovery is
// applied even when the run's termination arrives live right after the
// first tracker subscribed (two rules match; no JetStream to catch up
// from): the hand-over fills every tracker's mailbox before any subscribes.
func TestHandOverBeatsALiveTermination(t *testing.T) {
	r := newRig(t, finalizer.Rule{Table: "a", Query: "orders", Spec: hourSpec(t)}, finalizer.Rule{Table: "b", Query: "orders", Spec: hourSpec(t)})
	var once sync.Once
	r.bus.mu.Lock()
	r.bus.afterSubscribe = func(runID string, box *listener.Mailbox) {
		once.Do(func() { box.Offer(terminated(runID)) })
	}
	r.bus.mu.Unlock()
	p := cdcProgress(runA, "2026-09-28T14:05:00")
	p.Name = "orders"
	r.reg.Discovered(listener.Run{QueryID: queryA, RunID: runA, Name: "orders", Kind: progress.KindProgress, Event: p})
	for _, table := range []string{"a", "b"} {
		eventually(t, "the handed-over progress applied to "+table, func() bool { return r.store.Verdict(table).Equal(utc("2026-09-28T14:00:00Z")) })
	}
}

// A run silent for longer than ExpireAfter is stopped; before that it is
// shown as stale.
func TestSilentRunIsStaleThenExpired(t *testing.T) {
	clock := newFakeClock(utc("2026-09-28T15:00:00Z"))
	store, bus := newFakeStore(), newFakeBus()
	reg := finalizer.NewRegistry(finalizer.RegistryConfig{Bus: bus, Store: store, Clock: clock,
		StaleAfter: time.Minute, ExpireAfter: time.Hour, Logger: zap.NewNop()})
	defer reg.Close(context.Background())
	if _, err := reg.Track(context.Background(), finalizer.Request{QueryID: queryA, RunID: runA, Table: "t", Spec: hourSpec(t)}); err != nil {
		t.Fatal(err)
	}
	clock.Advance(2 * time.Minute)
	if st := reg.Status(); len(st) != 1 || !st[0].Stale {
		t.Fatalf("status = %+v, want stale", st)
	}
	eventually(t, "janitor re-armed", func() bool { return clock.Waiting() == 1 })
	clock.Advance(65 * time.Minute)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if res, err := reg.Join(ctx, runA); err != nil || res.Done || !strings.Contains(res.Stopped, "expired") {
		t.Fatalf("join = %+v, %v; want the expired tracker stopped, not done", res, err)
	}
}

type fakeTracks struct {
	mu       sync.Mutex
	saved    []control.Track
	finished []string
}

func (f *fakeTracks) SaveTrack(_ context.Context, t control.Track) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.saved = append(f.saved, t)
	return nil
}

func (f *fakeTracks) FinishTrack(_ context.Context, runID, table string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.finished = append(f.finished, runID+"/"+table)
	return nil
}

// Explicit tracks are persisted before they start, marked done when the
// run terminates, and resumed by Recover.
func TestExplicitTrackPersistedAndRecovered(t *testing.T) {
	clock := newFakeClock(utc("2026-09-28T15:00:00Z"))
	store, bus, tracks := newFakeStore(), newFakeBus(), &fakeTracks{}
	reg := finalizer.NewRegistry(finalizer.RegistryConfig{Bus: bus, Store: store, Tracks: tracks, Clock: clock})
	if _, err := reg.Track(context.Background(), finalizer.Request{QueryID: queryA, RunID: runA, Table: "t", Spec: hourSpec(t), Explicit: true}); err != nil {
		t.Fatal(err)
	}
	if err := reg.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	if len(tracks.saved) != 1 || len(tracks.finished) != 0 {
		t.Fatalf("saved %d, finished %v; want 1 saved, none finished (the run did not terminate)", len(tracks.saved), tracks.finished)
	}
	var opts progress.SpecOptions
	if err := json.Unmarshal(tracks.saved[0].Spec, &opts); err != nil {
		t.Fatalf("spec persisted as %s: %v", tracks.saved[0].Spec, err)
	}

	// A restart: the new registry resumes the track.
	reg = finalizer.NewRegistry(finalizer.RegistryConfig{Bus: bus, Store: store, Tracks: tracks, Clock: clock})
	defer reg.Close(context.Background())
	if err := reg.Recover(context.Background(), tracks.saved, nil); err != nil {
		t.Fatal(err)
	}
	bus.Publish(cdcProgress(runA, "2026-09-28T14:05:00"))
	bus.Publish(terminated(runA))
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if res, err := reg.Join(ctx, runA); err != nil || !res.Done {
		t.Fatalf("join = %+v, %v", res, err)
	}
	eventually(t, "finished", func() bool {
		tracks.mu.Lock()
		defer tracks.mu.Unlock()
		return len(tracks.finished) == 1
	})
	if v := store.Verdict("t"); !v.Equal(utc("2026-09-28T14:00:00Z")) {
		t.Fatalf("verdict = %v", v)
	}
	tracks.mu.Lock()
	defer tracks.mu.Unlock()
	if len(tracks.saved) != 1 {
		t.Errorf("saved %d times, want once: a resumed track is persisted already", len(tracks.saved))
	}
}

// Recover tracks retained runs that a rule matches, and a retained run that
// already terminated applies its last progress once.
func TestRecoverRetainedRuns(t *testing.T) {
	r := newRig(t, finalizer.Rule{Table: "t_{name}", Query: "*", Spec: hourSpec(t)})
	runs := []listener.Run{
		{QueryID: queryA, RunID: runA, Name: "a", Kind: progress.KindProgress},
		{QueryID: queryA, RunID: runB, Name: "b", Kind: progress.KindTerminated, Terminated: true},
	}
	if err := r.reg.Recover(context.Background(), nil, runs); err != nil {
		t.Fatal(err)
	}
	if st := r.reg.Status(); len(st) != 2 {
		t.Fatalf("status = %+v, want 2 trackers", st)
	}
}

// started is a run's started event, found by discovery, at ts.
func started(runID, name, ts string) listener.Run {
	ev := &progress.Event{Kind: progress.KindStarted, QueryID: queryA, RunID: runID, Name: name, Timestamp: utc(ts), BatchID: -1}
	return listener.Run{QueryID: queryA, RunID: runID, Name: name, Kind: progress.KindStarted, Event: ev}
}

// A run first seen without a name that a rule matches by its id is
// tracked by that rule at once; the rules that need its name are decided
// when an event carries it. Before, the run was tracked by the id rule
// alone, and its named events went only to that tracker: the table of
// the name rule never moved, silently.
func TestNamelessRunTrackedByIDIsDecidedAgainByName(t *testing.T) {
	r := newRig(t, finalizer.Rule{Table: "by_id.{id}", Query: "*", Spec: hourSpec(t)}, finalizer.Rule{Table: "t", Query: "orders", Spec: hourSpec(t)})
	r.reg.Discovered(listener.Run{QueryID: queryA, RunID: runA, Kind: progress.KindIdle, Event: idle(runA)})
	eventually(t, "tracked by the id rule", func() bool { return len(r.reg.Status()) == 1 })
	p := cdcProgress(runA, "2026-09-28T14:05:00")
	p.Name = "orders"
	if r.reg.Known(runA) {
		r.bus.Publish(p) // what the run's subscription delivers
	}
	r.reg.Discovered(listener.Run{QueryID: queryA, RunID: runA, Name: "orders", Kind: progress.KindProgress, Event: p})
	for _, table := range []string{"by_id." + queryA, "t"} {
		eventually(t, "the named progress applied to "+table, func() bool { return r.store.Verdict(table).Equal(utc("2026-09-28T14:00:00Z")) })
	}
}

// A run tracked by id while awaiting its name stops being read by
// discovery once an event that carries the name says it has none (an
// unnamed query): each of its events is parsed once again, not twice.
func TestUnnamedQueryStopsAwaitingItsName(t *testing.T) {
	r := newRig(t, finalizer.Rule{Table: "by_id.{id}", Query: "*", Spec: hourSpec(t)}, finalizer.Rule{Table: "t", Query: "orders", Spec: hourSpec(t)})
	r.reg.Discovered(listener.Run{QueryID: queryA, RunID: runA, Kind: progress.KindIdle, Event: idle(runA)})
	eventually(t, "tracked by the id rule", func() bool { return len(r.reg.Status()) == 1 })
	if r.reg.Known(runA) {
		t.Fatal("a run awaiting its name is known: its named event would not be read")
	}
	p := cdcProgress(runA, "2026-09-28T14:05:00") // no name
	r.reg.Discovered(listener.Run{QueryID: queryA, RunID: runA, Kind: progress.KindProgress, Event: p})
	if !r.reg.Known(runA) {
		t.Fatal("an unnamed query's run still awaits its name after a progress without one")
	}
	eventually(t, "the progress applied", func() bool { return r.store.Verdict("by_id." + queryA).Equal(utc("2026-09-28T14:00:00Z")) })
}

// Recover parses each distinct spec document of the explicit tracks once
// and gives every track the spec of its own document: tracks that share a
// document, one with another, and one whose document is not a spec (it
// alone is refused, the others resume).
func TestRecoverGivesEachTrackItsSpec(t *testing.T) {
	store, bus := newFakeStore(), newFakeBus()
	reg := finalizer.NewRegistry(finalizer.RegistryConfig{Bus: bus, Store: store, Tracks: &fakeTracks{}, Clock: newFakeClock(utc("2026-09-28T15:00:00Z"))})
	defer reg.Close(context.Background())
	hour := []byte(`{"granularity":"hour"}`)
	day := []byte(`{"granularity":"day","delay":"5m"}`)
	run := func(i int) string { return fmt.Sprintf("00000000-0000-4000-8000-%012d", i) }
	tracks := []control.Track{
		{QueryID: queryA, RunID: run(1), Table: "t1", Spec: hour},
		{QueryID: queryA, RunID: run(2), Table: "t2", Spec: day},
		{QueryID: queryA, RunID: run(3), Table: "t3", Spec: []byte(`{"granularity":"fortnight"}`)},
		{QueryID: queryA, RunID: run(4), Table: "t4", Spec: hour},
		{QueryID: queryA, RunID: run(5), Table: "t5", Spec: day},
		{QueryID: queryA, RunID: run(6), Table: "t6", Spec: []byte(`not json`)},
		{QueryID: queryA, RunID: run(7), Table: "t7", Spec: hour},
	}
	err := reg.Recover(context.Background(), tracks, nil)
	if err == nil || (!strings.Contains(err.Error(), run(3)) && !strings.Contains(err.Error(), run(6))) {
		t.Fatalf("Recover = %v, want the error of a bad spec", err)
	}
	want := map[string]string{}
	for _, tr := range tracks {
		var opts progress.SpecOptions
		if json.Unmarshal(tr.Spec, &opts) != nil {
			continue
		}
		if s, err := progress.ParseSpec(opts); err == nil {
			want[tr.RunID] = s.String()
		}
	}
	got := map[string]string{}
	for _, st := range reg.Status() {
		got[st.RunID] = st.Spec
	}
	if len(want) != 5 || !maps.Equal(got, want) {
		t.Fatalf("resumed specs %v, want %v", got, want)
	}
}

// A restart's recovery of more retained runs than discovery lets wait for
// a decision (DefaultMaxPending) keeps as many waiting as it has in
// flight, so that a run first seen live while it recovers is not refused
// as busy: Recover makes its runs pending a chunk at a time, not all at
// once.
func TestRecoverLeavesRoomForDiscovery(t *testing.T) {
	m := finalizer.NewMetrics(nil, nil)
	bus := newFakeBus()
	reg := finalizer.NewRegistry(finalizer.RegistryConfig{Bus: bus, Store: newFakeStore(), Metrics: m, Logger: zap.NewNop(),
		Clock: newFakeClock(utc("2026-09-28T15:00:00Z")),
		Rules: []finalizer.Rule{{Table: "bronze.{name}", Query: "*", Spec: hourSpec(t)}}})
	defer reg.Close(context.Background())
	n := finalizer.DefaultMaxPending + 2000
	runs := make([]listener.Run, n)
	for i := range runs {
		runs[i] = listener.Run{QueryID: fmt.Sprintf("10000000-0000-4000-8000-%012d", i), RunID: fmt.Sprintf("00000000-0000-4000-8000-%012d", i),
			Name: fmt.Sprintf("q%d", i), Kind: progress.KindProgress}
	}
	live := "20000000-0000-4000-8000-000000000001"
	var once sync.Once
	bus.mu.Lock()
	bus.afterSubscribe = func(string, *listener.Mailbox) {
		once.Do(func() {
			reg.Discovered(listener.Run{QueryID: queryA, RunID: live, Name: "live", Kind: progress.KindStarted})
		})
	}
	bus.mu.Unlock()
	if err := reg.Recover(context.Background(), nil, runs); err != nil {
		t.Fatal(err)
	}
	if got := testutil.ToFloat64(m.Refused.WithLabelValues(finalizer.RefusedBusy)); got != 0 {
		t.Fatalf("%v runs refused as busy during the recovery, want 0", got)
	}
	eventually(t, "every run tracked, the live one too", func() bool { return reg.Tracked() == n+1 })
}

// blockingTracks is fakeTracks whose FinishTrack waits for release (or
// its context): the database down while an explicit track finishes.
type blockingTracks struct {
	fakeTracks
	entered chan struct{}
	release chan struct{}
}

func (f *blockingTracks) FinishTrack(ctx context.Context, runID, table string) error {
	f.entered <- struct{}{}
	select {
	case <-f.release:
	case <-ctx.Done():
		return ctx.Err()
	}
	return f.fakeTracks.FinishTrack(ctx, runID, table)
}

// An explicit track's FinishTrack, waiting for the database, does not
// hold the pool's worker: with one worker, another run's progress is
// applied meanwhile. Join returns once the track is marked done.
func TestFinishTrackDoesNotHoldAPoolWorker(t *testing.T) {
	store, bus := newFakeStore(), newFakeBus()
	tracks := &blockingTracks{entered: make(chan struct{}, 1), release: make(chan struct{})}
	reg := finalizer.NewRegistry(finalizer.RegistryConfig{Bus: bus, Store: store, Tracks: tracks, Workers: 1})
	defer reg.Close(context.Background())
	ctx := context.Background()
	if _, err := reg.Track(ctx, finalizer.Request{QueryID: queryA, RunID: runA, Table: "t", Spec: hourSpec(t), Explicit: true}); err != nil {
		t.Fatal(err)
	}
	if _, err := reg.Track(ctx, finalizer.Request{QueryID: queryA, RunID: runB, Table: "u", Spec: hourSpec(t)}); err != nil {
		t.Fatal(err)
	}
	bus.Publish(cdcProgress(runA, "2026-09-28T14:05:00"))
	bus.Publish(terminated(runA))
	select {
	case <-tracks.entered:
	case <-time.After(5 * time.Second):
		t.Fatal("the explicit track was not marked done")
	}
	bus.Publish(cdcProgress(runB, "2026-09-28T15:05:00"))
	eventually(t, "run B's progress applied while A's track waits to be marked done",
		func() bool { return store.Verdict("u").Equal(utc("2026-09-28T15:00:00Z")) })
	joined := make(chan finalizer.JoinResult, 1)
	go func() {
		res, _ := reg.Join(ctx, runA)
		joined <- res
	}()
	select {
	case res := <-joined:
		t.Fatalf("join returned %+v before the track was marked done", res)
	case <-time.After(50 * time.Millisecond):
	}
	close(tracks.release)
	if res := <-joined; !res.Done {
		t.Fatalf("join = %+v, want done", res)
	}
	tracks.mu.Lock()
	defer tracks.mu.Unlock()
	if len(tracks.finished) != 1 || tracks.finished[0] != runA+"/t" {
		t.Errorf("finished %v, want %s/t", tracks.finished, runA)
	}
}
