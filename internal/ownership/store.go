package ownership

import (
	"context"
	"errors"
	"time"

	"github.com/finalizer-dev/finalizer/control"
)

// Store is the control store with the ownership gate on its advances: an
// advance of a table whose bucket this replica owns is applied; any other
// is held by the Owner (written at a takeover, a reconnect, or after the
// grace) and answered at once, without a statement, as the advance a
// second replica makes is answered when the owner wrote first: not moved.
// A held advance the Owner writes later and its statement refuses as
// decided before its table's rewind is told to Owner.OnRefused. Every
// other method is the store's.
//
// The gate's advances carry the rewind their sender knew (Advance.Guard),
// as a tracker's always do: a held advance is written after a reconnect
// without any judgement of the rewinds, and only the statement's guard
// keeps one decided before a rewind missed meanwhile from undoing it. An
// advance without a guard is written as the control store writes it.
type Store struct {
	*control.Store
	o *Owner
}

// Gate returns store with w's gate on its advances.
func Gate(store *control.Store, w *Owner) *Store { return &Store{Store: store, o: w} }

// Owner returns the gate's Owner.
func (s *Store) Owner() *Owner { return s.o }

// Advance applies a when this replica owns its table, and holds it
// otherwise.
func (s *Store) Advance(ctx context.Context, a control.Advance) (control.Verdict, bool, error) {
	now := time.Now()
	write, epoch := s.o.holdSend(a, now, true)
	if !write {
		s.o.m.held.Inc()
		return heldVerdict(a, now), false, nil
	}
	v, moved, err := s.Store.Advance(ctx, a)
	if err == nil {
		s.o.reached(a, v, epoch)
	} else if errors.Is(err, control.ErrBeforeRewind) {
		s.o.refused(a)
	}
	s.o.sent(a)
	return v, moved, err
}

// AdvanceBatch applies the advances of owned tables in one statement and
// holds the others; the results are at the indexes of as.
func (s *Store) AdvanceBatch(ctx context.Context, as []control.Advance) ([]control.AdvanceResult, error) {
	now := time.Now()
	var (
		res   []control.AdvanceResult
		send  []control.Advance // as itself until one is held (the usual group: every table owned)
		at    []int             // send's indexes into as, once one is held
		epoch uint64
		held  bool
	)
	for i, a := range as {
		write, e := s.o.holdSend(a, now, true)
		if i == 0 || e < epoch {
			epoch = e // the oldest: a doubt since any of them counts
		}
		if write {
			if held {
				send, at = append(send, a), append(at, i)
			}
			continue
		}
		if !held {
			// The first held: from here the advances sent are a copy,
			// and the results are gathered at as's indexes.
			held = true
			res = make([]control.AdvanceResult, len(as))
			send = append(make([]control.Advance, 0, len(as)), as[:i]...)
			at = make([]int, i, len(as))
			for j := range at {
				at[j] = j
			}
		}
		s.o.m.held.Inc()
		res[i] = control.AdvanceResult{Verdict: heldVerdict(a, now)}
	}
	if !held {
		send = as
	}
	if len(send) == 0 {
		return res, nil
	}
	got, err := s.Store.AdvanceBatch(ctx, send)
	defer s.o.sent(send...)
	if !held && len(got) == len(as) {
		// Every advance sent: the store's results are at as's indexes.
		for i, r := range got {
			if r.Err == nil {
				s.o.reached(as[i], r.Verdict, epoch)
			} else if errors.Is(r.Err, control.ErrBeforeRewind) {
				s.o.refused(as[i])
			}
		}
		return got, err
	}
	if res == nil {
		res = make([]control.AdvanceResult, len(as))
	}
	for j := range send {
		i := j
		if held {
			i = at[j]
		}
		if j < len(got) {
			res[i] = got[j]
			if got[j].Err == nil {
				s.o.reached(send[j], got[j].Verdict, epoch)
			} else if errors.Is(got[j].Err, control.ErrBeforeRewind) {
				s.o.refused(send[j])
			}
		} else {
			res[i].Err = err
		}
	}
	return res, err
}

// heldVerdict is the answer to a held advance: the table's verdict is not
// known (no FinalizedUntil), and the provenance is the advance's own, as
// the owner writes it from the same progress. Its time is now: a rewind
// the table's row shows later is taken as made after it (a tracker then
// does not re-assert it), and one about as old is left to the re-assert's
// statement, which refuses the advance when its tracker decided it before
// the rewind (Advance.Guard). Before (ADR 0020, addendum of 2026-12-06)
// it was a minute earlier, so that a rewind made within a minute before
// the advance was held made its tracker forget an advance decided after
// the rewind, knowing it.
func heldVerdict(a control.Advance, now time.Time) control.Verdict {
	return control.Verdict{
		Table: a.Table, EndTime: a.EndTime, EndOffset: a.EndOffset, QueryID: a.QueryID,
		RunID: a.RunID, BatchID: a.BatchID, Sources: a.Sources, UpdatedAt: now,
	}
}
