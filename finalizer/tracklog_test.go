package finalizer_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/finalizer-dev/finalizer/finalizer"
)

// TestTrackingLineSampled: the "tracking run" line keeps its fields (the
// spec's text among them) and its sampling (ten a kind per 10 s at INFO,
// then the count of those held back) now that its fields are made only
// when it is written; a line sampled away is written at DEBUG when DEBUG
// is on, with the same fields, and so is each tracker's "tracker
// started".
func TestTrackingLineSampled(t *testing.T) {
	for _, level := range []zapcore.Level{zapcore.InfoLevel, zapcore.DebugLevel} {
		t.Run(level.String(), func(t *testing.T) {
			core, logs := observer.New(level)
			clock := newFakeClock(time.Date(2026, 12, 2, 0, 0, 0, 0, time.UTC))
			reg := finalizer.NewRegistry(finalizer.RegistryConfig{
				Bus: newFakeBus(), Store: newFakeStore(), Clock: clock, Logger: zap.New(core),
			})
			t.Cleanup(func() {
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				defer cancel()
				_ = reg.Close(ctx)
			})
			spec := hourSpec(t)
			track := func(i int) {
				t.Helper()
				run := fmt.Sprintf("00000000-0000-4000-8000-%012d", i)
				if _, err := reg.Track(context.Background(), finalizer.Request{QueryID: queryA, RunID: run, Table: fmt.Sprintf("t%d", i), Spec: spec}); err != nil {
					t.Fatal(err)
				}
			}
			for i := range 13 {
				track(i)
			}
			lines := logs.FilterMessage("tracking run")
			if n := lines.FilterLevelExact(zapcore.InfoLevel).Len(); n != 10 {
				t.Errorf("%d INFO lines, want 10", n)
			}
			wantDebug := 0
			if level == zapcore.DebugLevel {
				wantDebug = 3
			}
			if n := lines.FilterLevelExact(zapcore.DebugLevel).Len(); n != wantDebug {
				t.Errorf("%d DEBUG lines, want %d", n, wantDebug)
			}
			for _, l := range lines.All() {
				m := l.ContextMap()
				if m["spec"] != spec.String() || m["query_id"] != queryA || m["table"] == "" || m["run_id"] == "" || m["explicit"] != false {
					t.Errorf("line's fields: %v", m)
				}
				if _, ok := m["suppressed"]; ok {
					t.Errorf("suppressed in a line of the first interval: %v", m)
				}
			}
			// The tracker's own DEBUG line at its start, with the spec.
			started := logs.FilterMessage("tracker started").All()
			if len(started) != wantDebug/3*13 {
				t.Errorf("%d tracker started lines, want %d", len(started), wantDebug/3*13)
			}
			for _, l := range started {
				if m := l.ContextMap(); m["spec"] != spec.String() || m["run_id"] == "" {
					t.Errorf("tracker started line's fields: %v", m)
				}
			}
			clock.Advance(10 * time.Second)
			track(13)
			last := logs.FilterMessage("tracking run").All()
			if m := last[len(last)-1].ContextMap(); last[len(last)-1].Level != zapcore.InfoLevel || m["suppressed"] != int64(3) || m["spec"] != spec.String() {
				t.Errorf("the next interval's first line: %v %v, want INFO with suppressed 3", last[len(last)-1].Level, m)
			}
		})
	}
}
