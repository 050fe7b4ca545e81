package finalizer_test

import (
	"context"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/finalizer-dev/finalizer/finalizer"
	"github.com/finalizer-dev/finalizer/progress"
)

// guardRig is a registry with metrics a test can read.
type guardRig struct {
	*rig
	m *finalizer.Metrics
}

func newGuardRig(t *testing.T, now string) *guardRig {
	t.Helper()
	r := newRigOver(t, newFakeBus(), newFakeStore(), rigOptions{now: now})
	return &guardRig{rig: r, m: r.m}
}

func (g *guardRig) trackSpec(t *testing.T, o progress.SpecOptions) {
	t.Helper()
	spec, err := progress.ParseSpec(o)
	if err != nil {
		t.Fatal(err)
	}
	if ok, err := g.reg.Track(context.Background(), finalizer.Request{QueryID: queryA, RunID: runA, Table: "t", Spec: spec}); err != nil || !ok {
		t.Fatalf("track: %v %v", ok, err)
	}
}

func (g *guardRig) outcome(label string) float64 {
	return testutil.ToFloat64(g.m.Candidates.WithLabelValues(label))
}

// Finding 5: at 23:56 with hourly periods, a time beyond now + future_skew
// used to be capped to floor(now + skew) = 23:00... and a time within the
// skew finalized 23:00-24:00 four minutes before it ended. Now the first
// gives no candidate (counted and shown) and no period that has not ended
// by the clock is ever final.
func TestFinding5FutureTimes(t *testing.T) {
	g := newGuardRig(t, "2026-09-28T23:56:00Z")
	g.trackSpec(t, progress.SpecOptions{})
	g.bus.Publish(cdcProgress(runA, "2027-06-01T00:00:00"))
	eventually(t, "future counted", func() bool { return g.outcome("future") == 1 })
	if n := len(g.store.Calls()); n != 0 {
		t.Fatalf("%d writes for a time months ahead, want 0", n)
	}
	if st := g.reg.Status()[0]; !strings.HasPrefix(st.Held, "future: ") || st.Guards["future"] != 1 {
		t.Fatalf("status held %q guards %v", st.Held, st.Guards)
	}
	if v := testutil.ToFloat64(g.m.HeldRuns.WithLabelValues("future")); v != 1 {
		t.Fatalf("finalizer_held_runs{guard=future} = %v, want 1", v)
	}
	// 00:00:30 is within the 5 min skew of 23:56; its hour, and 23:00-24:00,
	// have not ended by the clock: the verdict stops at 23:00.
	g.bus.Publish(cdcProgress(runA, "2026-09-29T00:00:30"))
	eventually(t, "write", func() bool { return len(g.store.Calls()) == 1 })
	if v := g.store.Verdict("t"); !v.Equal(utc("2026-09-28T23:00:00Z")) {
		t.Fatalf("verdict %v at 23:56, want 23:00 (23:00-24:00 has not ended)", v)
	}
	if g.outcome("clamped") != 1 {
		t.Errorf("clamped = %v, want 1", g.outcome("clamped"))
	}
	if st := g.reg.Status()[0]; st.Held != "" {
		t.Errorf("held %q after a candidate, want cleared", st.Held)
	}
	if v := testutil.ToFloat64(g.m.HeldRuns.WithLabelValues("future")); v != 0 {
		t.Errorf("finalizer_held_runs{guard=future} = %v after a candidate, want 0", v)
	}
	g.bus.Publish(terminated(runA))
	g.join(t, runA)
}

// With a delay, a period is final only once it ended by the clock minus
// the delay.
func TestFutureClampHonoursDelay(t *testing.T) {
	g := newGuardRig(t, "2026-09-28T14:05:00Z")
	g.trackSpec(t, progress.SpecOptions{Delay: "10m"})
	g.bus.Publish(cdcProgress(runA, "2026-09-28T14:09:00")) // within the skew; 14:09 - 10m = 13:59
	eventually(t, "write", func() bool { return len(g.store.Calls()) == 1 })
	if v := g.store.Verdict("t"); !v.Equal(utc("2026-09-28T13:00:00Z")) {
		t.Fatalf("verdict %v, want 13:00 (14:05 - 10m is in 13:00-14:00)", v)
	}
	g.bus.Publish(terminated(runA))
	g.join(t, runA)
}

// A guard holds the verdict, says why in the run's status and the
// metrics, and logs one WARN per run, not one per event.
func TestGuardsAreVisibleAndWarnOnce(t *testing.T) {
	g := newGuardRig(t, "2026-09-29T00:00:00Z")
	g.trackSpec(t, progress.SpecOptions{Time: "watermark"})
	stateless := func(wm string, dropped int64) *progress.Event {
		ev := cdcProgress(runA, "2026-09-28T14:05:00")
		ev.Executed, ev.Watermark, ev.StateOperators = true, wm, []progress.StateOperator{}
		return ev
	}
	for i := 0; i < 3; i++ {
		g.bus.Publish(stateless("2026-09-28T14:30:00.000Z", 0))
		eventually(t, "held", func() bool { return g.outcome("watermark_unbounded") == float64(i+1) })
	}
	if n := len(g.store.Calls()); n != 0 {
		t.Fatalf("%d writes, want 0", n)
	}
	st := g.reg.Status()[0]
	if !strings.Contains(st.Held, "no stateful operator") || !strings.Contains(st.Held, "late_rows_filtered") || st.Guards["watermark_unbounded"] != 3 {
		t.Fatalf("status held %q guards %v", st.Held, st.Guards)
	}
	warns := g.logs.FilterLevelExact(zapcore.WarnLevel).FilterField(zap.String("guard", "watermark_unbounded")).Len()
	if warns != 1 {
		t.Fatalf("%d WARN lines for three held progresses, want 1", warns)
	}
	// A streaming aggregation bounds its output: the verdict moves, and
	// the rows it dropped as late are counted.
	agg := stateless("2026-09-28T14:30:00.000Z", 0)
	agg.StateOperators = []progress.StateOperator{{Name: "stateStoreSave", RowsDroppedByWatermark: 17}}
	g.bus.Publish(agg)
	eventually(t, "write", func() bool { return len(g.store.Calls()) == 1 })
	eventually(t, "dropped rows", func() bool { return g.reg.Status()[0].RowsDroppedByWatermark == 17 })
	if v := g.m.RowsDropped("t"); v != 17 {
		t.Errorf("finalizer_rows_dropped_by_watermark_total{table=t} = %v, want 17", v)
	}
	// A no-data progress (Spark 3.0-3.4) with a watermark ahead: ignored.
	noData := stateless("2026-09-28T20:00:00.000Z", 0)
	noData.Executed = false
	noData.StateOperators = agg.StateOperators
	g.bus.Publish(noData)
	eventually(t, "not_executed", func() bool { return g.outcome("not_executed") == 1 })
	if v := g.store.Verdict("t"); !v.Equal(utc("2026-09-28T14:00:00Z")) {
		t.Fatalf("verdict %v, want 14:00 (the no-data progress's watermark is not used)", v)
	}
	g.bus.Publish(terminated(runA))
	g.join(t, runA)
	if v := testutil.ToFloat64(g.m.HeldRuns.WithLabelValues("not_executed")); v != 0 {
		t.Errorf("finalizer_held_runs after the tracker stopped = %v, want 0", v)
	}
}

// A progress with no usable time under the run's spec (offset:/commit_ts
// on a Kafka source) is shown on the run, counted, and logged once at WARN
// with the reason; Spark's "no watermark yet" stays at debug (it is how
// every watermark query starts).
func TestNoTimeIsShownAndWarnedOnce(t *testing.T) {
	g := newGuardRig(t, "2026-09-28T23:56:00Z")
	g.trackSpec(t, progress.SpecOptions{})
	kafka := func() *progress.Event {
		ev := cdcProgress(runA, "x")
		ev.Sources[0].EndOffset = []byte(`{"test5":{"0":48917}}`)
		return ev
	}
	g.bus.Publish(kafka())
	eventually(t, "no_time counted", func() bool { return g.outcome("no_time") == 1 })
	g.bus.Publish(kafka())
	eventually(t, "no_time counted twice", func() bool { return g.outcome("no_time") == 2 })
	st := g.reg.Status()[0]
	if !strings.HasPrefix(st.Held, "no_time: source 0: ") || st.Guards["no_time"] != 2 {
		t.Fatalf("status held %q guards %v", st.Held, st.Guards)
	}
	warns := g.logs.FilterLevelExact(zapcore.WarnLevel).FilterField(zap.String("guard", "no_time")).All()
	if len(warns) != 1 || !strings.Contains(warns[0].Message, "no usable time") {
		t.Fatalf("%d no_time warnings, want 1: %v", len(warns), warns)
	}

	// A watermark query before its first watermark: counted, shown, debug.
	w := newGuardRig(t, "2026-09-28T23:56:00Z")
	w.trackSpec(t, progress.SpecOptions{Time: "watermark", LateRowsFiltered: true})
	ev := cdcProgress(runA, "2026-09-28T13:10:00")
	ev.Executed = true
	ev.Watermark = "1970-01-01T00:00:00.000Z"
	w.bus.Publish(ev)
	eventually(t, "no watermark counted", func() bool { return w.outcome("no_time") == 1 })
	if st := w.reg.Status()[0]; !strings.HasPrefix(st.Held, "no_time: no watermark yet") {
		t.Fatalf("held %q", st.Held)
	}
	if n := w.logs.FilterLevelExact(zapcore.WarnLevel).Len(); n != 0 {
		t.Fatalf("%d warnings for a query with no watermark yet, want 0: %v", n, w.logs.All())
	}
}

// An explicit track names no query; the run's progress does: its advances
// carry that name, so that the feeder's row has it and an expected feeder
// of that name is resolved, as for a discovered run, and the run's status
// shows it.
func TestAnExplicitTracksAdvancesCarryTheQueryNameOfItsProgress(t *testing.T) {
	g := newGuardRig(t, quietClock)
	g.trackSpec(t, progress.SpecOptions{})
	ev := dataProgress("2026-09-28T13:40:00", "2026-09-28T13:41:00Z")
	ev.Name = "orders-v2"
	g.bus.Publish(ev)
	eventually(t, "13:00", func() bool { return g.store.Verdict("t").Equal(utc("2026-09-28T13:00:00Z")) })
	calls := g.store.Calls()
	if len(calls) != 1 || calls[0].QueryName != "orders-v2" {
		t.Fatalf("advances %+v, want one with the query name orders-v2", calls)
	}
	if st := g.reg.Status()[0]; st.QueryName != "orders-v2" {
		t.Fatalf("status query name %q, want orders-v2", st.QueryName)
	}
}
