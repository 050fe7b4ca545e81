package progress

import (
	"testing"
	"time"
)

// TestPostedIsTheTriggersStartPlusItsRun: Spark stamps a progress with
// its trigger's start (ProgressReporter's finishTrigger:
// formatTimestamp(currentTriggerStartTimestamp)) and posts it when the
// trigger ends, durationMs.triggerExecution later: Posted is their sum
// (ADR 0019, addendum of 2026-12-06). Without triggerExecution, or with
// one that is not a count, Posted is the timestamp, as before.
func TestPostedIsTheTriggersStartPlusItsRun(t *testing.T) {
	start := time.Date(2026, 9, 28, 14, 38, 5, 120_000_000, time.UTC)
	for _, c := range []struct {
		name, durationMs string
		want             time.Duration
	}{
		{"a batch", ranBatch, 1183 * time.Millisecond},
		{"no batch", ranNoBatch, 3 * time.Millisecond},
		{"no triggerExecution", `{ "addBatch" : 843 }`, 0},
		{"null", `{ "addBatch" : 843, "triggerExecution" : null }`, 0},
		{"negative", `{ "addBatch" : 843, "triggerExecution" : -5 }`, 0},
		{"beyond int32", `{ "addBatch" : 843, "triggerExecution" : 4294967296 }`, 0},
		{"no durationMs", `null`, 0},
	} {
		ev, err := Parse(sparkProgress(3, c.durationMs, watermark14, "[]", kafkaCaught), KindProgress)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if got := ev.Posted(); !got.Equal(start.Add(c.want)) {
			t.Errorf("%s: posted %v, want %v", c.name, got, start.Add(c.want))
		}
	}
	if _, err := Parse(sparkProgress(3, `{ "triggerExecution" : 1, "triggerExecution" : 2 }`, watermark14, "[]", kafkaCaught), KindProgress); err == nil {
		t.Error("a durationMs with triggerExecution twice parsed")
	}
	if !(&Event{}).Posted().IsZero() {
		t.Error("a progress without a timestamp has a posted time")
	}
}
