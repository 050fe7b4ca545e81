package finalizer_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/finalizer-dev/finalizer/finalizer"
	"github.com/finalizer-dev/finalizer/internal/lograte"
	"github.com/finalizer-dev/finalizer/listener"
	"github.com/finalizer-dev/finalizer/progress"
)

// TestLoneBurstCountIsSaid (ADR 0022, addendum of 2026-12-06): a lone
// burst of refusals logs one WARN line and holds back the others; no
// later refusal comes to say how many, so once the interval has ended the
// janitor says it, in one line at WARN with the class and the count, and
// only once. Likewise a lone burst of "tracking run" lines over the
// sampler's burst is said at INFO. Before, the counts vanished.
func TestLoneBurstCountIsSaid(t *testing.T) {
	core, logs := observer.New(zapcore.InfoLevel)
	clock := newFakeClock(time.Date(2026, 12, 6, 0, 0, 0, 0, time.UTC))
	reg := finalizer.NewRegistry(finalizer.RegistryConfig{
		Bus: newFakeBus(), Store: newFakeStore(), Clock: clock, Logger: zap.New(core),
		Rules: []finalizer.Rule{{Table: "bronze.{name}", Query: "*", Spec: hourSpec(t)}},
	})
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = reg.Close(ctx)
	})
	eventually(t, "janitor armed", func() bool { return clock.Waiting() == 1 })
	long := strings.Repeat("q", finalizer.MaxQueryNameLen+1)
	run := func(i int) string { return fmt.Sprintf("00000000-0000-4000-8000-%012d", i) }
	for i := range 50 {
		reg.Discovered(listener.Run{QueryID: queryA, RunID: run(i), Name: long, Kind: progress.KindStarted})
	}
	eventually(t, "refused runs known", func() bool { return reg.Known(run(49)) })
	held := func(kind string) []observer.LoggedEntry {
		var out []observer.LoggedEntry
		for _, e := range logs.FilterMessage(lograte.HeldMsg).All() {
			if e.ContextMap()["kind"] == kind {
				out = append(out, e)
			}
		}
		return out
	}
	if n := logs.FilterMessage("run refused; its events are dropped").Len(); n != 1 {
		t.Fatalf("%d refusal lines, want 1", n)
	}
	if n := len(held("registry")); n != 0 {
		t.Fatalf("%d held lines within the interval", n)
	}
	clock.Advance(30 * time.Second) // the janitor's sweep, past the 10 s interval
	eventually(t, "the held refusals said", func() bool { return len(held("registry")) == 1 })
	e := held("registry")[0]
	if m := e.ContextMap(); e.Level != zapcore.WarnLevel || m["class"] != finalizer.RefusedQueryName || m["suppressed"] != int64(49) || m["interval"] != 10*time.Second {
		t.Errorf("held line: %v %v, want WARN, %s, suppressed 49, interval 10s", e.Level, m, finalizer.RefusedQueryName)
	}

	// A lone burst of the sampler's: 13 "tracking run" lines, 10 at INFO.
	for i := range 13 {
		if _, err := reg.Track(context.Background(), finalizer.Request{QueryID: queryA, RunID: run(100 + i), Table: fmt.Sprintf("t%d", i), Spec: hourSpec(t)}); err != nil {
			t.Fatal(err)
		}
	}
	if n := logs.FilterMessage("tracking run").Len(); n != 10 {
		t.Fatalf("%d tracking lines at INFO, want 10", n)
	}
	clock.Advance(30 * time.Second)
	eventually(t, "the held tracking lines said", func() bool { return len(held("sampled")) == 1 })
	e = held("sampled")[0]
	if m := e.ContextMap(); e.Level != zapcore.InfoLevel || m["class"] != "tracking" || m["suppressed"] != int64(3) {
		t.Errorf("held line: %v %v, want INFO, tracking, suppressed 3", e.Level, m)
	}
	// Said once: later sweeps say nothing more.
	for range 3 {
		clock.Advance(30 * time.Second)
	}
	time.Sleep(20 * time.Millisecond)
	if n := logs.FilterMessage(lograte.HeldMsg).Len(); n != 2 {
		t.Errorf("%d held lines, want 2: %v", n, logs.FilterMessage(lograte.HeldMsg).All())
	}
}
