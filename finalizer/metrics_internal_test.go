package finalizer

import (
	"testing"

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
