package finalizer

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/finalizer-dev/finalizer/control"
)

// meetingClock is a SystemClock whose Now holds its first n callers until
// all n have called it (or a second has passed): callers that each read
// the clock after a check and before they note what they checked are
// all past the check together.
type meetingClock struct {
	SystemClock
	mu    sync.Mutex
	n     int
	met   chan struct{}
	count int
}

func (c *meetingClock) Now() time.Time {
	c.mu.Lock()
	c.count++
	if c.count == c.n {
		close(c.met)
	}
	wait := c.count <= c.n
	c.mu.Unlock()
	if wait {
		select {
		case <-c.met:
		case <-time.After(time.Second):
		}
	}
	return time.Now()
}

// TestARewindLearntByTwoTrackersAtOnceIsCountedOnce: two trackers whose
// advances the control table refused at once both learn the rewind from
// their refusal (learnRewind), each before the other noted it as known:
// finalizer_rewinds_seen_total counted the one rewind twice, and the
// rewind was logged twice. It is counted, and logged at info, once per
// (table, rewound_at); a later rewind of the table is counted again.
func TestARewindLearntByTwoTrackersAtOnceIsCountedOnce(t *testing.T) {
	core, logs := observer.New(zapcore.DebugLevel)
	clock := &meetingClock{n: 2, met: make(chan struct{})}
	m := NewMetrics(nil, time.Now)
	r := NewRegistry(RegistryConfig{Clock: clock, Logger: zap.New(core), Metrics: m})
	defer func() { _ = r.Close(context.Background()) }()

	until := time.Date(2026, 9, 28, 14, 0, 0, 0, time.UTC)
	first := control.Verdict{Table: "t", FinalizedUntil: until, RewoundAt: time.Date(2026, 9, 29, 0, 0, 1, 0, time.UTC)}
	var wg sync.WaitGroup
	for range 2 {
		wg.Go(func() { r.learnRewind("t", first) })
	}
	wg.Wait()
	if got := testutil.ToFloat64(m.Rewinds); got != 1 {
		t.Fatalf("finalizer_rewinds_seen_total = %v after one rewind learnt by two trackers at once, want 1", got)
	}
	if n := logs.FilterLevelExact(zapcore.InfoLevel).FilterMessageSnippet("verdict rewound by an operator").Len(); n != 1 {
		t.Fatalf("the rewind logged %d times at info, want once", n)
	}

	// Heard again (the notification after the refusals), and a later
	// rewind learnt.
	r.Rewound("t", until, first.RewoundAt)
	second := first
	second.RewoundAt = first.RewoundAt.Add(time.Minute)
	r.learnRewind("t", second)
	if got := testutil.ToFloat64(m.Rewinds); got != 2 {
		t.Fatalf("finalizer_rewinds_seen_total = %v after two rewinds, want 2", got)
	}
}
