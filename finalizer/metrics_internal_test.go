package finalizer

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"

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

// A table tracked without a verdict yet is exported as such (the seconds
// since it was first tracked), so that an alert on a table that never
// gets one can fire; once it has a verdict, the lag gauges replace it.
// Before, the table had no per-table series at all until its first
// verdict.
func TestTableWithoutVerdictIsExported(t *testing.T) {
	now := time.Date(2026, 9, 29, 10, 0, 0, 0, time.UTC)
	m := NewMetrics(nil, func() time.Time { return now })
	m.KnowTable("silver.none")
	m.KnowTable("silver.none") // again: the first time counts
	now = now.Add(90 * time.Minute)
	series := func() map[string]float64 {
		ch := make(chan prometheus.Metric, 16)
		tableCollector{m}.Collect(ch)
		close(ch)
		got := map[string]float64{}
		for pm := range ch {
			var d dto.Metric
			if err := pm.Write(&d); err != nil {
				t.Fatal(err)
			}
			name := pm.Desc().String()
			name = name[strings.Index(name, `"`)+1:]
			name = name[:strings.Index(name, `"`)]
			got[name+"/"+d.GetLabel()[0].GetValue()] = d.GetGauge().GetValue()
		}
		return got
	}
	if got := series(); len(got) != 1 || got["finalizer_verdict_missing_seconds/silver.none"] != 5400 {
		t.Fatalf("series %v, want finalizer_verdict_missing_seconds{table=silver.none} 5400 alone", got)
	}
	m.ObserveVerdict("silver.none", now.Add(-time.Hour))
	if got := series(); len(got) != 2 || got["finalizer_verdict_lag_seconds/silver.none"] != 3600 {
		t.Fatalf("series %v, want the lag gauges alone once the table has a verdict", got)
	}
}
