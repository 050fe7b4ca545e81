package finalizer_test

import (
	"context"
	"testing"
	"time"

	"github.com/finalizer-dev/finalizer/finalizer"
	"github.com/finalizer-dev/finalizer/listener"
	"github.com/finalizer-dev/finalizer/progress"
)

// TestARetainedProgressIsJudgedByWhenTheStreamStoredIt (ADR 0019, addendum
// of 2026-12-06): a run whose driver's clock is ahead posted its last
// progress and terminated shortly before its table's rewind; the progress
// carries a timestamp after the rewind, and a restart's recovery applied
// it again from the stream's retained copy (14:00 -> 18:00 with no new
// data). A retained progress is judged by when the stream stored it, the
// server's clock, with a minute's margin on the side of holding it (the
// NATS and PostgreSQL servers' clocks may differ): stored before the
// rewind, or within the margin after it, it is held; stored after, it is
// applied, unless its driver's timestamp is before the rewind (a
// progress queued by its client across an outage reaches the stream late;
// late, never wrong).
func TestARetainedProgressIsJudgedByWhenTheStreamStoredIt(t *testing.T) {
	const runD = "dddddddd-2222-4333-8444-555555555555"
	r, rewoundAt := rewoundAnHourAgo(t, "t_a", "t_b", "t_c", "t_d")
	type retained struct {
		name           string
		posted, stored time.Time
	}
	last := map[string]retained{
		// The driver's clock ten minutes ahead: posted "after" the
		// rewind, stored two minutes before it.
		runA: {"a", rewoundAt.Add(8 * time.Minute), rewoundAt.Add(-2 * time.Minute)},
		// Stored five minutes after the rewind: new data.
		runB: {"b", rewoundAt.Add(5 * time.Minute), rewoundAt.Add(5 * time.Minute)},
		// Stored within the margin after the rewind: held.
		runStopped: {"c", rewoundAt.Add(10 * time.Minute), rewoundAt.Add(30 * time.Second)},
		// Stored after the rewind, posted before it by its driver's
		// clock: held, as before.
		runD: {"d", rewoundAt.Add(-time.Minute), rewoundAt.Add(5 * time.Minute)},
	}
	r.bus.afterSubscribe = func(runID string, box *listener.Mailbox) {
		l := last[runID]
		ev := cdcProgress(runID, "2026-09-28T18:10:00")
		ev.Name, ev.Timestamp = l.name, l.posted
		box.OfferRetainedAt(ev, l.stored) // the recovery's read of the stream
	}
	var runs []listener.Run
	for _, id := range []string{runA, runB, runStopped, runD} {
		// Each terminated after its last progress.
		l := last[id]
		runs = append(runs, listener.Run{QueryID: queryA, RunID: id, Name: l.name, Kind: progress.KindTerminated, Terminated: true, Stored: l.stored.Add(time.Second)})
	}
	if err := r.reg.Recover(context.Background(), nil, runs); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the retained progress taken", func() bool {
		return r.logs.FilterMessageSnippet("posted before the table's last rewind").Len() == 3 ||
			!r.store.Verdict("t_a").Equal(utc("2026-09-28T14:00:00Z"))
	})
	r.movesTo18(t, "t_b", "t_b applied")
	for _, table := range []string{"t_a", "t_c", "t_d"} {
		if got := r.store.Verdict(table); !got.Equal(utc("2026-09-28T14:00:00Z")) {
			t.Errorf("%s: a restart applied a retained progress stored before its rewind (or within the margin): verdict %s", table, got)
		}
	}
}

// TestARetainedCaughtUpProgressIsJudgedByWhenTheStreamStoredIt: the quiet
// signal of a retained progress (ADR 0014: its sources caught up) of a
// driver whose clock is ahead, stored before its table's rewind, makes no
// quiet move either: the progress is held by its stored time, and its
// quiet signal, judged by its timestamp, moved the verdict past the
// rewind (14:00 to the hour of the rewind) after a restart or a track.
func TestARetainedCaughtUpProgressIsJudgedByWhenTheStreamStoredIt(t *testing.T) {
	r, at := rewoundRig(t)
	r.bus.retain(listener.Run{QueryID: queryA, RunID: runA, Kind: progress.KindTerminated, Terminated: true, Stored: at.Add(-time.Minute)})
	spec, err := progress.ParseSpec(quietSpec("5m"))
	if err != nil {
		t.Fatal(err)
	}
	r.bus.afterSubscribe = func(runID string, box *listener.Mailbox) {
		ev := caughtUp("2026-09-28T13:40:00", "2026-09-28T13:41:00Z")
		ev.Timestamp = at.Add(8 * time.Minute) // the driver's clock, ten minutes ahead
		box.OfferRetainedAt(ev, at.Add(-2*time.Minute))
	}
	if ok, err := r.reg.Track(context.Background(), finalizer.Request{QueryID: queryA, RunID: runA, Table: "t_a", Spec: spec}); err != nil || !ok {
		t.Fatalf("track: %v %v", ok, err)
	}
	eventually(t, "the retained quiet signal taken", func() bool {
		return r.logs.FilterMessageSnippet("quiet signal sent before the table's last rewind").Len() == 1 ||
			!r.store.Verdict("t_a").Equal(utc("2026-09-28T14:00:00Z"))
	})
	if got := r.store.Verdict("t_a"); !got.Equal(utc("2026-09-28T14:00:00Z")) {
		t.Fatalf("a retained caught-up progress stored before the rewind made a quiet move to %s", got)
	}
}
