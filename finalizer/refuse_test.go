package finalizer_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/finalizer-dev/finalizer/control"
	"github.com/finalizer-dev/finalizer/finalizer"
	"github.com/finalizer-dev/finalizer/listener"
	"github.com/finalizer-dev/finalizer/progress"
)

// TestRefusedNamesAreCountedAndDropped: under a {name} rule, runs whose
// query name is too long, or makes a table name the control table cannot
// hold (a NUL, bytes that are not UTF-8, a name over the cap), are refused,
// counted by reason, logged once per reason, and their further events
// are dropped unparsed (the run is known); a healthy run beside them is
// tracked. Before, such a run was tracked and its advances failed the
// group commits of healthy tables; an explicit track of such a table is
// refused too.
func TestRefusedNamesAreCountedAndDropped(t *testing.T) {
	core, logs := observer.New(zapcore.DebugLevel)
	m := finalizer.NewMetrics(nil, nil)
	reg := finalizer.NewRegistry(finalizer.RegistryConfig{
		Bus: newFakeBus(), Store: newFakeStore(), Metrics: m, Logger: zap.New(core),
		Rules: []finalizer.Rule{{Table: "bronze.{name}", Query: "*", Spec: hourSpec(t)}},
	})
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = reg.Close(ctx)
	})
	bad := map[string]string{ // run id -> query name
		"00000000-0000-4000-8000-000000000001": strings.Repeat("q", finalizer.MaxQueryNameLen+1),
		"00000000-0000-4000-8000-000000000002": "nul\x00name",
		"00000000-0000-4000-8000-000000000003": "bad\xffutf8",
		"00000000-0000-4000-8000-000000000004": strings.Repeat("n", control.MaxTableNameLen-len("bronze.")+1),
	}
	for run, name := range bad {
		reg.Discovered(listener.Run{QueryID: queryA, RunID: run, Name: name, Kind: progress.KindStarted})
	}
	reg.Discovered(listener.Run{QueryID: queryA, RunID: runA, Name: "orders", Kind: progress.KindStarted})
	eventually(t, "healthy run tracked", func() bool { return len(reg.Status()) == 1 })
	eventually(t, "refused runs known", func() bool {
		for run := range bad {
			if !reg.Known(run) {
				return false
			}
		}
		return true
	})
	if got := testutil.ToFloat64(m.Refused.WithLabelValues(finalizer.RefusedQueryName)); got != 1 {
		t.Errorf("refused query_name = %v, want 1", got)
	}
	if got := testutil.ToFloat64(m.Refused.WithLabelValues(finalizer.RefusedTableName)); got != 3 {
		t.Errorf("refused table_name = %v, want 3", got)
	}
	if n := logs.FilterMessage("run refused; its events are dropped").Len(); n != 2 {
		t.Errorf("%d refusal lines, want one per reason (2)", n)
	}
	if n := logs.FilterLevelExact(zapcore.ErrorLevel).Len(); n != 0 {
		t.Errorf("%d error lines", n)
	}
	_, err := reg.Track(context.Background(), finalizer.Request{QueryID: queryA, RunID: runB, Table: "a\x00b", Spec: hourSpec(t), Explicit: true})
	if !errors.Is(err, control.ErrInvalidTable) {
		t.Fatalf("explicit track of a bad name: %v", err)
	}
	if got := testutil.ToFloat64(m.Refused.WithLabelValues(finalizer.RefusedTableName)); got != 4 {
		t.Errorf("refused table_name = %v, want 4", got)
	}
}

// TestTrackerCap (issue 9, item 7): a flood of new run ids stops at
// MaxTrackers: the runs beyond it are refused with ErrTooManyTrackers,
// counted, and logged once; a new run that supersedes one of its query's
// is let in; and once a tracker finishes, a refused run is tracked on its
// next event (it is not remembered as refused). Before, a flood of
// 100,000 run ids made 110,000 trackers.
func TestTrackerCap(t *testing.T) {
	core, logs := observer.New(zapcore.DebugLevel)
	m := finalizer.NewMetrics(nil, nil)
	bus := newFakeBus()
	reg := finalizer.NewRegistry(finalizer.RegistryConfig{
		Bus: bus, Store: newFakeStore(), Metrics: m, Logger: zap.New(core), MaxTrackers: 3,
		Rules: []finalizer.Rule{{Table: "t.{id}", Query: "*", Spec: hourSpec(t)}},
	})
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = reg.Close(ctx)
	})
	query := func(i int) string { return fmt.Sprintf("00000000-0000-4000-8000-%012d", i) }
	run := func(i int) string { return fmt.Sprintf("11111111-0000-4000-8000-%012d", i) }
	for i := range 50 {
		reg.Discovered(listener.Run{QueryID: query(i), RunID: run(i), Name: "q", Kind: progress.KindStarted})
	}
	eventually(t, "50 runs considered", func() bool {
		return testutil.ToFloat64(m.Refused.WithLabelValues(finalizer.RefusedRunCap)) == 47
	})
	// The three let in may still be starting (Status leaves those out).
	eventually(t, "the cap's 3 trackers started", func() bool { return len(reg.Status()) == 3 })
	time.Sleep(20 * time.Millisecond)
	if n := len(reg.Status()); n != 3 {
		t.Fatalf("%d trackers, want the cap, 3", n)
	}
	if n := logs.FilterMessageSnippet("cap of tracked runs").Len(); n != 1 {
		t.Errorf("%d log lines for the refusals, want 1", n)
	}
	// A new run of a tracked query supersedes its old run: let in.
	reg.Discovered(listener.Run{QueryID: query(0), RunID: run(100), Name: "q", Kind: progress.KindStarted})
	eventually(t, "the superseding run tracked", func() bool { return reg.Known(run(100)) })
	eventually(t, "its tracker started", func() bool { return len(reg.Status()) >= 4 })
	// Trackers finish; a refused run's next event tracks it.
	for _, i := range []int{0, 1, 2, 100} {
		bus.Publish(terminated(run(i)))
	}
	eventually(t, "the trackers finished", func() bool { return len(reg.Status()) == 0 })
	reg.Discovered(listener.Run{QueryID: query(40), RunID: run(40), Name: "q", Kind: progress.KindStarted})
	eventually(t, "the refused run tracked once there is room", func() bool { return len(reg.Status()) == 1 })
	for i := range 2 {
		reg.Discovered(listener.Run{QueryID: query(41 + i), RunID: run(41 + i), Name: "q", Kind: progress.KindStarted})
	}
	eventually(t, "at the cap again", func() bool { return len(reg.Status()) == 3 })
	_, err := reg.Track(context.Background(), finalizer.Request{QueryID: query(45), RunID: run(45), Table: "explicit", Spec: hourSpec(t), Explicit: true})
	if !errors.Is(err, finalizer.ErrTooManyTrackers) {
		t.Fatalf("explicit track beyond the cap: %v", err)
	}
}
