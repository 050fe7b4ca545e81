package finalizer_test

import (
	"strings"
	"testing"
	"time"
)

// TestARefusedAdvanceEndsTheFailingState (ADR 0019, addendum of
// 2026-12-06): after a PostgreSQL outage (an advance failed through its
// retries: FAILING (1), "postgresql unavailable") and a rewind, the
// run's next advance was answered by the database, refused as
// before_rewind, and status still showed the run FAILING (1) with the
// outage's error. A refused advance is an answer: the failing state
// ends, and the run shows held before_rewind.
func TestARefusedAdvanceEndsTheFailingState(t *testing.T) {
	r := failedAdvance(t)
	r.store.rewind("t_a", utc("2026-09-28T14:00:00Z"), r.clock.Now()) // its notification lost with the outage
	r.clock.Advance(time.Second)
	next := cdcProgress(runA, "2026-09-28T18:20:00")
	next.Timestamp = r.clock.Now()
	r.bus.Publish(next)
	eventually(t, "the advance refused", func() bool {
		return r.logs.FilterMessageSnippet("refused by the control table").Len() >= 1
	})
	eventually(t, "the failing state ended", func() bool {
		for _, s := range r.reg.Status() {
			if s.RunID == runA {
				return s.Failures == 0 && s.LastError == "" && strings.HasPrefix(s.Held, "before_rewind: ")
			}
		}
		return false
	})
	if got := r.store.Verdict("t_a"); !got.Equal(utc("2026-09-28T14:00:00Z")) {
		t.Fatalf("verdict %s, want the rewind's 14:00", got)
	}
}

// TestAFailedAdvanceHeldByARewindEndsTheFailingState: the review's
// sequence: the advance failed through its retries (the database down),
// the table was rewound while the service's LISTEN connection was down,
// and the reconnect re-read the rewinds (an answer from the database)
// and woke the tracker, whose pending progress, posted before the
// rewind, is dropped as before_rewind. Status showed FAILING (1) with the
// outage's error, the hold only in /v1/runs' JSON; the run shows held
// now, with no failure.
func TestAFailedAdvanceHeldByARewindEndsTheFailingState(t *testing.T) {
	r := failedAdvance(t)
	r.store.rewind("t_a", utc("2026-09-28T14:00:00Z"), r.clock.Now()) // not heard
	// The re-read waits behind the gate until the re-assert's step has
	// held its advance for it: without it the read could end between
	// the step's judging (the rewind not known) and its sending (no read
	// pending), and the control table's guard, not the tracker, would
	// drop the progress (TestARefusedAdvanceEndsTheFailingState).
	gate := r.gatedReread()
	r.reg.Reassert()
	eventually(t, "the advance held for the re-read", func() bool {
		return r.logs.FilterMessageSnippet("advance held until the tables' rewinds are read again").Len() >= 1
	})
	close(gate)
	eventually(t, "the failed progress held", func() bool {
		r.clock.Advance(time.Second)
		return r.logs.FilterMessageSnippet("posted before the table's last rewind").Len() >= 1
	})
	eventually(t, "the failing state ended", func() bool {
		for _, s := range r.reg.Status() {
			if s.RunID == runA {
				return s.Failures == 0 && s.LastError == "" && strings.HasPrefix(s.Held, "before_rewind: ")
			}
		}
		return false
	})
}
