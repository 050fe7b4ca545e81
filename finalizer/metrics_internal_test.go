package finalizer

import (
	"fmt"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/finalizer-dev/finalizer/progress"
)

// The cached children count in the very series the label lookups name,
// and a series appears only once counted, as before the cache.
func TestMetricsCachedChildren(t *testing.T) {
	reg := prometheus.NewRegistry()
	m := NewMetrics(reg, nil)
	if n := testutil.CollectAndCount(m.Events); n != 0 {
		t.Fatalf("%d event series before any event, want 0", n)
	}
	for range 3 {
		m.CountEvent(progress.KindProgress, "accepted")
	}
	m.CountEvent(progress.KindIdle, "malformed")
	m.CountEvent(progress.Kind(200), "malformed") // not a kind: counted as unknown
	m.candidate("same_period").Inc()
	m.candidate("same_period").Inc()
	m.quietAdvance("idle_event").Inc()
	for _, c := range []struct {
		got  prometheus.Counter
		want float64
	}{
		{m.Events.WithLabelValues("progress", "accepted"), 3},
		{m.Events.WithLabelValues("idle", "malformed"), 1},
		{m.Events.WithLabelValues("unknown", "malformed"), 1},
		{m.Candidates.WithLabelValues("same_period"), 2},
		{m.QuietAdvances.WithLabelValues("idle_event"), 1},
	} {
		if v := testutil.ToFloat64(c.got); v != c.want {
			t.Errorf("%v = %v, want %v", c.got.Desc(), v, c.want)
		}
	}
}

// A scrape does not hold the lock the trackers record their verdicts
// under while it hands the per-table series to the gatherer: with the
// gatherer not reading (a slow scrape), a verdict is still recorded
// (issue 12, "The latency tail"; before, it waited for the whole scrape).
func TestTableCollectorSendsOutsideTheLock(t *testing.T) {
	m := NewMetrics(nil, nil)
	now := time.Now()
	for i := range 3 * collectChunk {
		m.ObserveVerdict(fmt.Sprintf("t%05d", i), now)
	}
	ch := make(chan prometheus.Metric) // not read until the verdict below is recorded
	collected := make(chan struct{})
	go func() {
		defer close(collected)
		tableCollector{m}.Collect(ch)
	}()
	first := <-ch // the collector is sending
	recorded := make(chan struct{})
	go func() {
		defer close(recorded)
		m.ObserveVerdict("t00000", now.Add(time.Minute))
	}()
	select {
	case <-recorded:
	case <-time.After(30 * time.Second):
		t.Fatal("a verdict could not be recorded while a scrape was sending its series")
	}
	n := 1
	for range ch {
		if n++; n == 2*3*collectChunk {
			break
		}
	}
	<-collected
	if first == nil || n != 2*3*collectChunk {
		t.Fatalf("%d series collected, want %d", n, 2*3*collectChunk)
	}
}
