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

// TestPostedIsNeverLaterThanWhenTheProgressWasSeen: a progress cannot
// have been posted after the stream stored it (or this service heard
// it): a triggerExecution that carries it further (a hostile or broken
// duration, up to an int32 of milliseconds) is not believed, and the
// timestamp alone is its posted time; so too with neither time known.
func TestPostedIsNeverLaterThanWhenTheProgressWasSeen(t *testing.T) {
	start := time.Date(2026, 9, 28, 14, 38, 5, 0, time.UTC)
	for _, c := range []struct {
		name string
		ms   int32
		seen time.Time
		want time.Time
	}{
		{"honest, seen after it", 90_000, start.Add(91 * time.Second), start.Add(90 * time.Second)},
		{"within the skew", 90_000, start.Add(86 * time.Second), start.Add(90 * time.Second)},
		{"past the skew", 90_000, start.Add(80 * time.Second), start},
		{"hostile", 2_000_000_000, start.Add(2 * time.Minute), start},
		{"nothing seen", 90_000, time.Time{}, start},
	} {
		ev := &Event{Timestamp: start, TriggerExecutionMs: c.ms}
		if got := ev.PostedBy(c.seen); !got.Equal(c.want) {
			t.Errorf("%s: posted %v, want %v", c.name, got, c.want)
		}
	}
	if !(&Event{TriggerExecutionMs: 5}).PostedBy(start).IsZero() {
		t.Error("a progress without a timestamp has a posted time")
	}
}
