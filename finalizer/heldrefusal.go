package finalizer

import (
	"time"

	"go.uber.org/zap"

	"github.com/finalizer-dev/finalizer/control"
	"github.com/finalizer-dev/finalizer/progress"
)

// heldRefusal is an advance of a tracker's that the ownership gate held
// (another replica owns its table: answered at once, as written, without
// a statement) and that this replica wrote later (a takeover, a
// reconnect, the grace's fallback), which the control table refused as
// decided before the table's last rewind (control.ErrBeforeRewind); v is
// the table's row as that statement read it (ADR 0020, addendum of
// 2026-12-06).
type heldRefusal struct {
	adv control.Advance
	v   control.Verdict
}

// why is the run's held reason for h, after outcomeBeforeRewind.
func (h heldRefusal) why() string {
	return "the advance to " + h.adv.FinalizedUntil.UTC().Format(time.RFC3339) +
		" was held for the replica that owns the table (ADR 0020) and, written later by this replica, refused by the control table: the table was rewound at " +
		h.v.RewoundAt.UTC().Format(time.RFC3339Nano) + ", after the progress was taken"
}

// RefusedHeld is told (ownership.Owner.OnRefused) that adv, an advance a
// tracker of this registry made and the ownership gate held, was written
// later by the Owner and refused by the control table as decided before
// the table's rewind (v, the row as that statement read it). The tracker
// answered the advance as written when it was held, and would show
// nothing: its next step shows it held before the rewind and learns the
// rewind, as when its own statement is refused (refusedByRewind). When
// the tracker has ended (a run that terminated before the grace), the
// table's status keeps it instead, as a run that ended held before its
// table's rewind (keepHeldDone): `finalizer status` and /v1/tables say
// why the table stays where the rewind left it. It never blocks.
func (r *Registry) RefusedHeld(adv control.Advance, v control.Verdict) {
	h := heldRefusal{adv: adv, v: v}
	key := trackKey{adv.RunID, adv.Table}
	r.mu.Lock()
	if e := r.trackers[key]; e != nil {
		// Taken by the tracker's next step; or, should it exit first
		// (or have exited, not reaped yet), by its reap, which looks
		// under r.mu once the tracker exited.
		if r.heldRefusals == nil {
			r.heldRefusals = map[trackKey]heldRefusal{}
		}
		r.heldRefusals[key] = h
		r.mu.Unlock()
		if e.ready.closed() && e.t != nil && e.t.state.Load() != stateExited {
			e.t.refusedReq.Store(true)
			e.t.schedule()
		}
		return
	}
	r.keepHeldRefusedLocked(h, nil, TrackerStatus{QueryID: adv.QueryID, RunID: adv.RunID, Table: adv.Table})
	r.mu.Unlock()
	r.learnRewind(adv.Table, v)
	r.log.Info("a held advance of a run no longer tracked was refused by the control table as decided before the table's rewind; the table's status says so",
		zap.String("table", adv.Table), zap.String("run_id", adv.RunID), zap.Time("finalized_until", adv.FinalizedUntil), zap.Time("rewound_at", v.RewoundAt))
}

// reapHeldRefusalLocked is the reap's part for e: a refusal RefusedHeld
// kept for e's tracker that it did not take (it exited first) is kept
// as the table's status, with e's last status st. It reports the
// refusal, whose rewind the caller learns once r.mu is released. r.mu
// held.
func (r *Registry) reapHeldRefusalLocked(e *entry, st TrackerStatus) (heldRefusal, bool) {
	key := trackKey{e.req.RunID, e.req.Table}
	h, ok := r.heldRefusals[key]
	if !ok {
		return h, false
	}
	delete(r.heldRefusals, key)
	if e.t != nil && e.t.lastAdv != nil && !e.t.lastAdv.FinalizedUntil.Equal(h.adv.FinalizedUntil) {
		return h, true // a newer advance since: judged by its own statement
	}
	r.keepHeldRefusedLocked(h, e, st)
	return h, true
}

// keepHeldRefusedLocked keeps, as table's status of a run that ended
// held before its rewind (keepHeldDone), st with h's reason: the run of
// e (nil when its entry is gone) ended, and its held advance was refused
// after. r.mu held.
func (r *Registry) keepHeldRefusedLocked(h heldRefusal, e *entry, st TrackerStatus) {
	st.Held = outcomeBeforeRewind + ": " + h.why()
	st.Written = time.Time{}
	if e != nil {
		r.keepHeldDone(e, st)
		return
	}
	if r.heldDone == nil {
		r.heldDone = map[string]heldDoneRun{}
	}
	st.Done, st.Terminated = true, true
	st.Held = outcomeBeforeRewind + ": the run ended and its last progress was not applied (it would undo the rewind); the table stays where the rewind left it until another run's progress moves it: " + h.why()
	r.heldDone[h.adv.Table] = heldDoneRun{st: st}
}

// takeHeldRefusal is runHost's: the refusal RefusedHeld kept for e's
// tracker, once.
func (e *entry) takeHeldRefusal() (heldRefusal, bool) {
	r, key := e.r, trackKey{e.req.RunID, e.req.Table}
	r.mu.Lock()
	defer r.mu.Unlock()
	h, ok := r.heldRefusals[key]
	if ok {
		delete(r.heldRefusals, key)
	}
	return h, ok
}

// heldRefused is a step's handling of h (RefusedHeld): when h is the
// tracker's last advance still (a newer one carries its own guard and is
// judged by its own statement), the advance is dropped as refused by its
// own statement is (refusedByRewind): the run shows it held
// (before_rewind), it is counted, the rewind is learnt, and the run's
// next progress moves the verdict from the rewound point.
func (t *Tracker) heldRefused(h heldRefusal) {
	if t.lastAdv == nil || !t.lastAdv.FinalizedUntil.Equal(h.adv.FinalizedUntil) || t.lastAdv.RunID != h.adv.RunID {
		t.log.Debug("a held advance of this run, refused as decided before the table's rewind, is not its last one any more; its newer one is judged by its own statement",
			zap.Time("refused", h.adv.FinalizedUntil), zap.Time("rewound_at", h.v.RewoundAt))
		return
	}
	t.refusedByRewind(h.v, progress.Candidate{Until: h.adv.FinalizedUntil}, &progress.Event{BatchID: h.adv.BatchID})
	t.mu.Lock()
	t.held = outcomeBeforeRewind + ": " + h.why() + "; the run's next progress moves the verdict"
	t.mu.Unlock()
}
