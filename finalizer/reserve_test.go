package finalizer_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"

	"github.com/finalizer-dev/finalizer/control"
	"github.com/finalizer-dev/finalizer/finalizer"
	"github.com/finalizer-dev/finalizer/listener"
	"github.com/finalizer-dev/finalizer/progress"
)

// reserveBus is a fakeBus that notes what a recovery reserves.
type reserveBus struct {
	*fakeBus
	mu       sync.Mutex
	reserved []int
}

func (b *reserveBus) ReserveRuns(n int) {
	b.mu.Lock()
	b.reserved = append(b.reserved, n)
	b.mu.Unlock()
}

// A restart's recovery makes the maps its starts fill at their size once
// (issue 12, ninth pass): the bus is asked for room for one run per
// tracker the starts make (each explicit track not done, each rule's
// table of a run no track starts), and what the registry tracked before
// the recovery is still tracked after its maps were made again.
func TestRecoverReservesForItsStarts(t *testing.T) {
	q := func(i int) string { return fmt.Sprintf("aaaaaaaa-0000-4000-8000-%012d", i) }
	r := func(i int) string { return fmt.Sprintf("bbbbbbbb-0000-4000-8000-%012d", i) }
	bus := &reserveBus{fakeBus: newFakeBus()}
	reg := newSharedTableRegistry(t, finalizer.RegistryConfig{Bus: bus, Store: newFakeStore(), Tracks: &fakeTracks{}})
	ctx := context.Background()
	before := finalizer.Request{QueryID: q(9), RunID: r(9), Table: "t_before", Spec: hourSpec(t), Explicit: true}
	if _, err := reg.Track(ctx, before); err != nil {
		t.Fatal(err)
	}
	run := func(i int, name string) listener.Run {
		return listener.Run{QueryID: q(i), RunID: r(i), Name: name, Kind: progress.KindProgress}
	}
	runs := []listener.Run{
		run(0, "region-us"), // silver.all
		run(1, "region-eu"), // silver.all
		run(2, "solo-a"),    // t_solo-a
		run(3, "other"),     // no rule: not tracked
		run(6, "solo-c"),    // explicitly tracked below: its rule is not applied
	}
	spec := []byte(`{}`)
	tracks := []control.Track{
		{QueryID: q(6), RunID: r(6), Table: "t_solo-c", Spec: spec},
		{QueryID: q(7), RunID: r(7), Table: "silver.all", Spec: spec, DoneAt: utc("2026-09-28T00:00:00Z")}, // done: not recovered
	}
	if err := reg.Recover(ctx, tracks, runs); err != nil {
		t.Fatal(err)
	}
	bus.mu.Lock()
	got := slices.Clone(bus.reserved)
	bus.mu.Unlock()
	if want := []int{4}; !slices.Equal(got, want) {
		t.Fatalf("reserved %v, want %v", got, want)
	}
	if n := reg.Tracked(); n != 5 {
		t.Fatalf("%d trackers after the recovery, want 5 (the one tracked before and four)", n)
	}
	st := reg.Status()
	ids := make([]string, 0, len(st))
	for _, s := range st {
		ids = append(ids, s.RunID)
	}
	slices.Sort(ids)
	if want := []string{r(0), r(1), r(2), r(6), r(9)}; !slices.Equal(ids, want) {
		t.Fatalf("tracked runs %v, want %v", ids, want)
	}
}
