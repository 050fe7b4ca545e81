package finalizer_test

import (
	"context"
	"testing"

	"github.com/finalizer-dev/finalizer/control"
	"github.com/finalizer-dev/finalizer/finalizer"
	"github.com/finalizer-dev/finalizer/listener"
	"github.com/finalizer-dev/finalizer/progress"
)

// retiredJoinStore is a fakeStore whose every query joins as a retired
// feeder.
type retiredJoinStore struct{ *fakeStore }

func (retiredJoinStore) JoinFeeder(context.Context, string, string, string) (control.Joined, error) {
	return control.Joined{RetiredAt: utc("2026-09-28T15:00:00Z"), RetiredWhy: "clean termination"}, nil
}

// TestOnlyARunningRetiredFeederWarns (ADR 0019, addendum of 2026-12-06,
// review F4, and review nit 3): every restart's recovery warned "a
// retired feeder of the table runs again" for a terminated run of a
// retired feeder, started again only to read its last events: it does
// not run. Then for any run of a retired feeder read back only from the
// stream's retained copy (a run whose termination the stream no longer
// holds, not heard of since): it warned at every restart though nothing
// said it runs. It warns once the run is heard of live, once.
func TestOnlyARunningRetiredFeederWarns(t *testing.T) {
	const (
		queryB = "0b0b0b0b-bc9c-4be8-97a9-b135d2943028"
	)
	r := newRigOver(t, newFakeBus(), retiredJoinStore{newFakeStore()}, rigOptions{
		rules: []finalizer.Rule{{Table: "t_a", Query: "backfill-*", Spec: hourSpec(t)}},
	})
	reg, logs := r.reg, r.logs
	runs := []listener.Run{
		{QueryID: queryA, RunID: runA, Name: "backfill-old", Kind: progress.KindTerminated, Terminated: true, Stored: utc("2026-09-28T15:00:00Z")},
		{QueryID: queryB, RunID: runB, Name: "backfill-new", Kind: progress.KindProgress, Stored: utc("2026-09-28T23:59:00Z")},
	}
	if err := reg.Recover(context.Background(), nil, runs); err != nil {
		t.Fatal(err)
	}
	eventually(t, "both runs' joins noted", func() bool {
		return logs.FilterMessageSnippet("a terminated run of a retired feeder").Len()+
			logs.FilterMessageSnippet("read back from the event stream's retained copy, is tracked").Len() == 2
	})
	eventually(t, "both runs tracked", func() bool { return len(reg.Status()) == 2 })
	if n := logs.FilterMessageSnippet("a retired feeder of the table runs again").Len(); n != 0 {
		t.Fatalf("warned %d times at the recovery, want none: no run was heard of live", n)
	}
	for i := 0; i < 2; i++ {
		ev := cdcProgress(runB, "2026-09-28T18:10:00")
		ev.QueryID, ev.Name, ev.BatchID = queryB, "backfill-new", int64(5+i)
		r.bus.Publish(ev)
		eventually(t, "run b heard of live", func() bool {
			return logs.FilterMessageSnippet("a retired feeder of the table runs again").Len() == 1
		})
	}
	warned := logs.FilterMessageSnippet("a retired feeder of the table runs again").All()
	if len(warned) != 1 || warned[0].ContextMap()["run_id"] != runB {
		t.Fatalf("warned %d times (%v), want once, for the run heard of live %s only", len(warned), warned, runB)
	}
}
