package bench

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/finalizer-dev/finalizer/control"
	"github.com/finalizer-dev/finalizer/internal/pgcluster/pgtest"
)

// TestApplyGroupsNeedsEveryTableToMove: the floor counts only advances
// that move their verdict, so offering the same groups again (nothing
// moves) is an error that names a table, whichever committer meets it,
// and every group sent before it is applied.
func TestApplyGroupsNeedsEveryTableToMove(t *testing.T) {
	ctx := context.Background()
	store, err := control.Open(ctx, pgtest.URL(t), control.Options{Table: fmt.Sprintf("floor_test_%d", time.Now().UnixNano())})
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	if err := store.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	as := make([]control.Advance, 23)
	for i := range as {
		as[i] = control.Advance{Table: fmt.Sprintf("floor.t%02d", i), FinalizedUntil: time.Date(2026, 12, 6, 14, 0, 0, 0, time.UTC),
			QueryID: "q", RunID: "r", Guard: control.KnownRewind(time.Time{})}
	}
	if err := applyGroups(ctx, store, as, 5, 2); err != nil {
		t.Fatalf("first application: %v", err)
	}
	for _, a := range as {
		if v, err := store.Get(ctx, a.Table); err != nil || !v.FinalizedUntil.Equal(a.FinalizedUntil) {
			t.Fatalf("%s: %+v, %v; want it at %s", a.Table, v, err, a.FinalizedUntil)
		}
	}
	err = applyGroups(ctx, store, as, 5, 2)
	if err == nil || !strings.Contains(err.Error(), "did not move") || !strings.Contains(err.Error(), "floor.t") {
		t.Fatalf("the same advances again: %v; want an error naming a table that did not move", err)
	}
}
