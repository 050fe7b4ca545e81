package finalizer_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/finalizer-dev/finalizer/finalizer"
)

// A progress time before 1970 (a placeholder such as 0001-01-01, Go's and
// .NET's zero time, or -1 ms) is no time: it is counted as no_time and
// never written, so it cannot wedge the tracker on an invalid advance, and
// the next progress still moves the verdict.
func TestTimeBefore1970IsNoTime(t *testing.T) {
	prom := prometheus.NewRegistry()
	clock := newFakeClock(utc("2026-09-29T00:00:00Z"))
	metrics := finalizer.NewMetrics(prom, clock.Now)
	store, bus := newFakeStore(), newFakeBus()
	r := finalizer.NewRegistry(finalizer.RegistryConfig{Bus: bus, Store: store, Clock: clock, Metrics: metrics, Logger: zap.NewNop()})
	defer r.Close(context.Background())
	if _, err := r.Track(context.Background(), finalizer.Request{QueryID: queryA, RunID: runA, Table: "t", Spec: hourSpec(t)}); err != nil {
		t.Fatal(err)
	}
	for i, ts := range []string{"0001-01-01T00:00:00", "1969-12-31T23:59:59.999", "0000-06-01T00:00:00"} {
		bus.Publish(cdcProgress(runA, ts))
		eventually(t, ts+" counted as no_time", func() bool { return counter(t, prom, "finalizer_candidates_total", "no_time") == float64(i+1) })
	}
	bus.Publish(cdcProgress(runA, "2026-09-28T13:10:00"))
	eventually(t, "the good progress written", func() bool { return len(store.Calls()) == 1 })
	bus.Publish(terminated(runA))
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if res, err := r.Join(ctx, runA); err != nil || !res.Done || res.LastError != "" {
		t.Fatalf("join = %+v, %v; want done without error", res, err)
	}
	if got := untils(store.Calls()); len(got) != 1 || !got[0].Equal(utc("2026-09-28T13:00:00Z")) {
		t.Fatalf("writes %v, want only 13:00", got)
	}
}

// A short StaleAfter and ExpireAfter are honoured: the janitor looks every
// half of the shorter one, so finalizer_stale_runs shows a silent run and
// its tracker is stopped soon after ExpireAfter, not 30 s later.
func TestShortStaleAndExpireThresholds(t *testing.T) {
	clock := newFakeClock(utc("2026-09-28T15:00:00Z"))
	prom := prometheus.NewRegistry()
	metrics := finalizer.NewMetrics(prom, clock.Now)
	r := finalizer.NewRegistry(finalizer.RegistryConfig{Bus: newFakeBus(), Store: newFakeStore(), Clock: clock,
		Metrics: metrics, StaleAfter: 2 * time.Second, ExpireAfter: 6 * time.Second, Logger: zap.NewNop()})
	defer r.Close(context.Background())
	if _, err := r.Track(context.Background(), finalizer.Request{QueryID: queryA, RunID: runA, Table: "t", Spec: hourSpec(t)}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "janitor armed", func() bool { return clock.Waiting() == 1 })
	for i := 0; i < 3; i++ { // 3 s: stale, not expired
		clock.Advance(time.Second)
		eventually(t, "janitor re-armed", func() bool { return clock.Waiting() == 1 })
	}
	if got := gauge(t, prom, "finalizer_stale_runs"); got != 1 {
		t.Fatalf("finalizer_stale_runs = %v after 3 s of silence, want 1", got)
	}
	if st := r.Status(); len(st) != 1 || !st[0].Stale || st[0].Done {
		t.Fatalf("status = %+v, want one stale tracker", st)
	}
	for i := 0; i < 4; i++ { // 7 s: expired
		clock.Advance(time.Second)
		eventually(t, "janitor re-armed", func() bool { return clock.Waiting() >= 1 })
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if res, err := r.Join(ctx, runA); err != nil || res.Done || !strings.Contains(res.Stopped, "expired") {
		t.Fatalf("join = %+v, %v; want the expired tracker stopped, not done", res, err)
	}
	eventually(t, "tracked runs gauge back to 0", func() bool { return gauge(t, prom, "finalizer_tracked_runs") == 0 })
}

// gauge reads a gauge without labels from prom.
func gauge(t *testing.T, prom *prometheus.Registry, name string) float64 {
	t.Helper()
	mfs, err := prom.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name && len(mf.GetMetric()) == 1 {
			return mf.GetMetric()[0].GetGauge().GetValue()
		}
	}
	t.Fatalf("no gauge %s", name)
	return 0
}

// counter reads the value of a counter vector's child whose only label
// value is value; 0 when it does not exist yet.
func counter(t *testing.T, prom *prometheus.Registry, name, value string) float64 {
	t.Helper()
	mfs, err := prom.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			if ls := m.GetLabel(); len(ls) == 1 && ls[0].GetValue() == value {
				return m.GetCounter().GetValue()
			}
		}
	}
	return 0
}
