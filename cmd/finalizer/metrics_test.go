package main

import (
	"io"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

// TestMetricsFilter: /metrics?name[]= of the counters only is served
// from the counters' registry (the expensive collector is not gathered),
// any other request from the whole registry, with the same figures.
func TestMetricsFilter(t *testing.T) {
	all, counters := prometheus.NewRegistry(), prometheus.NewRegistry()
	c := prometheus.NewCounter(prometheus.CounterOpts{Name: "finalizer_control_writes_total", Help: "w"})
	c.Add(7)
	gathered := 0
	costly := prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "finalizer_costly", Help: "c"}, func() float64 { gathered++; return 1 })
	all.MustRegister(c, costly)
	counters.MustRegister(c)
	h := metricsHandler(all, counters)
	get := func(query string) string {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest("GET", "/metrics"+query, nil))
		b, _ := io.ReadAll(rec.Body)
		return string(b)
	}
	if out := get("?name[]=finalizer_control_writes_total"); !strings.Contains(out, "finalizer_control_writes_total 7") ||
		strings.Contains(out, "finalizer_costly") || gathered != 0 {
		t.Errorf("counters only: %q, the costly collector gathered %d times; want the counter alone, not gathered", out, gathered)
	}
	if out := get("?name[]=finalizer_costly"); !strings.Contains(out, "finalizer_costly 1") || strings.Contains(out, "writes") {
		t.Errorf("a family the counters lack: %q; want it alone, from the whole registry", out)
	}
	if out := get(""); !strings.Contains(out, "finalizer_costly 1") || !strings.Contains(out, "finalizer_control_writes_total 7") {
		t.Errorf("no filter: %q; want every family", out)
	}
}
