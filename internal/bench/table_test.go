package bench

import (
	"strings"
	"testing"
)

// TestTableSaysSkippedPhases: a phase that did not run (here all but the
// latency phase, as --latency-only runs) prints "skipped" and no target,
// so that its zero never reads as a target met; the latency phase's rows
// carry issue 12's targets and the commit probe's row.
func TestTableSaysSkippedPhases(t *testing.T) {
	r := Result{Runs: 10_000, Rate: 1000, Latency: Latency{Events: 9999, Probes: 1667, P50Ms: 1.1, P99Ms: 4.7, MaxMs: 12.6,
		WritesPerPeriod: 1, CommitProbes: 499, CommitP50Ms: 0.75, CommitP99Ms: 4.43, CommitMaxMs: 8.11, P99OverCommitP99: 1.06}}
	var b strings.Builder
	if err := r.WriteTable(&b); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	lines := map[string]string{}
	for _, l := range strings.Split(out, "\n") {
		for _, k := range []string{"raw NATS delivery", "ingest / raw NATS", "burst:", "recovery of", "latency p50/p99/max", "a lone commit beside it"} {
			if strings.HasPrefix(strings.TrimSpace(l), k) {
				lines[k] = l
			}
		}
	}
	for _, k := range []string{"raw NATS delivery", "ingest / raw NATS", "burst:", "recovery of"} {
		if l := lines[k]; !strings.Contains(l, "skipped") || strings.Contains(l, "<") || strings.Contains(l, ">=") {
			t.Errorf("%q: %q; want skipped, no target", k, l)
		}
	}
	if l := lines["latency p50/p99/max"]; !strings.Contains(l, "1.1 / 4.7 / 12.6") || !strings.Contains(l, "p99 < 5 at 10k, < 10 at 100k") {
		t.Errorf("latency row: %q", l)
	}
	if l := lines["a lone commit beside it"]; !strings.Contains(l, "0.8 / 4.4 / 8.1; 1.06") {
		t.Errorf("commit probe row: %q", l)
	}
}
