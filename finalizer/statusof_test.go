package finalizer_test

import (
	"reflect"
	"testing"

	"github.com/finalizer-dev/finalizer/finalizer"
)

// TestStatusOfIsStatusOfOneTable: StatusOf(table) holds exactly Status's
// entries of that table, in the same order, and nothing for a table no
// tracker writes (the /final answer's why reads it at every "not final"
// instead of every tracker's status).
func TestStatusOfIsStatusOfOneTable(t *testing.T) {
	r := newRig(t)
	r.track(t, "run-1", "t_a")
	r.track(t, "run-2", "t_a")
	r.track(t, "run-3", "t_b")
	eventually(t, "three trackers started", func() bool { return len(r.reg.Status()) == 3 })
	for _, table := range []string{"t_a", "t_b", "t_none"} {
		var want []finalizer.TrackerStatus
		for _, st := range r.reg.Status() {
			if st.Table == table {
				want = append(want, st)
			}
		}
		got := r.reg.StatusOf(table)
		if len(got) != len(want) {
			t.Fatalf("%s: StatusOf has %d entries, Status %d", table, len(got), len(want))
		}
		for i := range got {
			// The clock does not move in the rig: the same instant, the
			// same statuses.
			if !reflect.DeepEqual(got[i], want[i]) {
				t.Errorf("%s entry %d: StatusOf %+v, Status %+v", table, i, got[i], want[i])
			}
		}
	}
}
