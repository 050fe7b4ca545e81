package finalizer_test

import (
	"strings"
	"testing"
	"time"

	"github.com/finalizer-dev/finalizer/control"
)

// TestAHeldAdvanceRefusedLaterIsShown (ADR 0020, addendum of
// 2026-12-06): an advance the ownership gate held (answered as written,
// without a statement) and that this replica wrote later, refused by the
// control table as decided before the table's rewind, is told to the
// registry (Registry.RefusedHeld, ownership.Owner.OnRefused). Its tracker
// shows it held as before_rewind, as when its own statement is refused,
// learns the rewind, and its next progress moves the verdict knowing it.
// A refusal for a run no longer tracked is the table's status instead.
// Before, the run showed nothing held and the table stayed at the
// rewound verdict, with no word of why.
func TestAHeldAdvanceRefusedLaterIsShown(t *testing.T) {
	r := newRigAt16(t)
	held := r.store.Calls()[0] // as if held, and written later by the Owner

	rewoundAt := r.clock.Now().Add(-time.Second)
	r.store.rewind("t_a", utc("2026-09-28T14:00:00Z"), rewoundAt)
	r.reg.RefusedHeld(held, control.Verdict{Table: "t_a", FinalizedUntil: utc("2026-09-28T14:00:00Z"), RewoundAt: rewoundAt})
	eventually(t, "the run shows the refused held advance", func() bool {
		for _, s := range r.reg.Status() {
			if s.RunID == runA && strings.HasPrefix(s.Held, "before_rewind:") && strings.Contains(s.Held, "held for the replica that owns the table") {
				return true
			}
		}
		return false
	})
	r.nextMovesKnowing(t, 7, "17", rewoundAt)

	// A refusal of an older advance than the tracker's last: judged by
	// the newer's own statement, nothing shown.
	r.reg.RefusedHeld(held, control.Verdict{Table: "t_a", FinalizedUntil: utc("2026-09-28T14:00:00Z"), RewoundAt: rewoundAt})
	time.Sleep(50 * time.Millisecond)
	for _, s := range r.reg.Status() {
		if s.RunID == runA && s.Held != "" {
			t.Errorf("an older advance's refusal held the run: %q", s.Held)
		}
	}

	// The run of another table ended (its tracker reaped) before its held
	// advance was refused: the table's status says why it stays.
	gone := held
	gone.Table, gone.RunID = "t_gone", runB
	r.reg.RefusedHeld(gone, control.Verdict{Table: "t_gone", FinalizedUntil: utc("2026-09-28T14:00:00Z"), RewoundAt: rewoundAt})
	found := false
	for _, s := range r.reg.Status() {
		if s.Table == "t_gone" {
			found = true
			if !strings.HasPrefix(s.Held, "before_rewind: the run ended") || !strings.Contains(s.Held, "held for the replica that owns the table") || !s.Done {
				t.Errorf("the ended run's status: %+v", s)
			}
		}
	}
	if !found {
		t.Error("no status for the table of the ended run whose held advance was refused")
	}
}
