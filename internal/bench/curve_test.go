package bench

import (
	"bytes"
	"encoding/xml"
	"io"
	"strings"
	"testing"
)

func TestCurveSVGAndTable(t *testing.T) {
	res := func(n int, trackS, rss float64) Result {
		return Result{Runs: n, TrackSeconds: trackS, RSSNoGCPerRunKiB: rss, HeapPerRunKiB: rss / 2,
			IngestEventsPerSec: 20_000, RawEventsPerSec: 60_000, Latency: Latency{P50Ms: 2, P99Ms: 8},
			BurstSeconds: float64(n) / 20_000, RecoverySeconds: float64(n) / 5_000}
	}
	// Tracking grows linearly (flat per run); memory per run falls.
	c := Curve{Results: []Result{res(1000, 1, 30), res(10_000, 10, 12), res(100_000, 100, 7)}}
	var svg bytes.Buffer
	if err := c.SVG(&svg, "curve & test"); err != nil {
		t.Fatal(err)
	}
	dec := xml.NewDecoder(bytes.NewReader(svg.Bytes()))
	for {
		if _, err := dec.Token(); err == io.EOF {
			break
		} else if err != nil {
			t.Fatalf("the SVG is not well-formed XML: %v", err)
		}
	}
	for _, want := range []string{"resident memory (no forced GC)", "tracking N runs", "100k", "curve &amp; test", "<polyline"} {
		if !strings.Contains(svg.String(), want) {
			t.Errorf("the SVG lacks %q", want)
		}
	}
	if strings.Contains(svg.String(), "idle:") {
		t.Error("the SVG has a panel for the idle phase, which did not run")
	}
	var tab bytes.Buffer
	if err := c.WriteTable(&tab); err != nil {
		t.Fatal(err)
	}
	// Tracking per run is flat: slope 0 between each pair of sizes.
	for _, line := range strings.Split(tab.String(), "\n") {
		if strings.HasPrefix(line, "tracking N runs: tracked") {
			if f := strings.Fields(line); f[len(f)-1] != "+0.00" || f[len(f)-2] != "+0.00" {
				t.Errorf("tracking's slopes: %q, want +0.00 twice", line)
			}
		}
	}
	if !strings.Contains(tab.String(), "slope 10k→100k") {
		t.Errorf("the table has no slope column:\n%s", tab.String())
	}
}

func TestIngestPerRunStaysNearAMillionEvents(t *testing.T) {
	for _, c := range []struct{ n, want int }{{50, 20}, {10_000, 20}, {50_000, 20}, {100_000, 10}, {1_000_000, 2}} {
		if got := IngestPerRunFor(c.n); got != c.want {
			t.Errorf("IngestPerRunFor(%d) = %d, want %d", c.n, got, c.want)
		}
	}
}
