package finalizer

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/cenkalti/backoff/v4"
	"go.uber.org/zap"

	"github.com/finalizer-dev/finalizer/control"
	"github.com/finalizer-dev/finalizer/progress"
)

// The kinds of signs that a table's history changed under its verdict
// (ADR 0019), the label of finalizer_history_signs_total.
const (
	// SignReset: a query id other than the verdict's started at batch 0:
	// a query that restarted from a new checkpoint (Spark takes the query
	// id from the checkpoint's metadata and starts a new checkpoint at
	// batch 0 from the sources' starting offsets), or a new feeder whose
	// first batches may write into periods already final.
	SignReset = "reset"
	// SignBehind: a candidate's time below the verdict's stored end_time
	// written by the same query, from a progress posted after that move: a
	// checkpoint rolled back, a source whose offsets went back.
	SignBehind = "behind"
	// SignSourceChanged: under a spec that picks a source by index, the
	// source at that index has another description than when the verdict
	// last moved: a redeploy reordered the plan's sources (Spark checks
	// only their number).
	SignSourceChanged = "source_changed"
)

// Marker records a sign on a table's row, where status and the HTTP API
// show it (*control.Store implements it). It reports whether the table
// has a row.
type Marker interface {
	Mark(ctx context.Context, table, mark string) (bool, error)
}

// VerdictReader reads a table's verdict (*control.Store implements it);
// ErrNotFound-wrapping errors mean the table has none.
type VerdictReader interface {
	Get(ctx context.Context, table string) (control.Verdict, error)
}

// history is what a tracker knows of its table's verdict, to notice signs
// that the table's history changed under it. Owned by the worker.
type history struct {
	known   bool      // the fields below were read from the control table
	end     time.Time // the verdict's end_time
	at      time.Time // when the verdict last moved (the database's clock)
	query   string    // the query id that moved it
	sources []string  // the source descriptions of that move

	checkedReset bool // the run's batch 0 was looked at
	saidReset    bool
	saidBehind   bool
	saidSource   bool
}

// learn records the verdict as an advance or a read returned it. The
// verdict's query id and sources are read from the control table, each a
// string or slice of its own; when they equal the tracker's own query id,
// the sources of its last advance or those already known, those are kept
// instead, so that a tracked run holds one copy of each (issue 12: three
// heap objects per run fewer for the collector to mark).
func (t *Tracker) learn(v control.Verdict) {
	h := &t.hist
	h.known = true
	h.end, h.at = v.EndTime, v.UpdatedAt
	switch v.QueryID {
	case t.cfg.QueryID:
		h.query = t.cfg.QueryID
	case h.query:
	default:
		h.query = v.QueryID
	}
	switch {
	case t.lastAdv != nil && slices.Equal(v.Sources, t.lastAdv.Sources) && (v.Sources == nil) == (t.lastAdv.Sources == nil):
		h.sources = t.lastAdv.Sources
	case slices.Equal(v.Sources, h.sources) && (v.Sources == nil) == (h.sources == nil):
	default:
		h.sources = v.Sources
	}
}

// newer reports whether ev was posted after the verdict's last move, so
// that it can contradict it: a progress posted before (a dead run's last
// progress applied again at recovery, a replay) is older news, not a sign.
// A progress without a timestamp counts as newer.
func (h *history) newer(ev *progress.Event) bool {
	return ev.Timestamp.IsZero() || !ev.Timestamp.Before(h.at)
}

// descriptions returns the descriptions of ev's sources, in Spark's order.
func descriptions(ev *progress.Event) []string {
	if len(ev.Sources) == 0 {
		return nil
	}
	out := make([]string, len(ev.Sources))
	for i, s := range ev.Sources {
		out[i] = s.Description
	}
	return out
}

// checkRewound forgets what the tracker wrote and knew when an operator
// rewound its table since it last looked (see Registry.Rewound): the next
// candidate is written again, from the rewound verdict.
func (t *Tracker) checkRewound() {
	if g := t.rewinds.Load(); g != t.seenRewinds {
		t.seenRewinds = g
		t.written = time.Time{}
		t.lastAdv = nil // re-asserting a write from before the rewind would undo it
		t.hist = history{}
		t.mu.Lock()
		t.shownWrite = time.Time{}
		t.mu.Unlock()
	}
}

// beforeRewind reports whether ev, of a run found terminated or silent
// since its table's last rewind (Registry.rewoundAt: by a restart's
// recovery or, for any later start, by judgeSilence), was posted
// before that rewind: then it is done with, unapplied. A rewind takes the
// verdict back below what such a progress declared; the run's last
// progress, kept in the stream, was re-applied at every restart's recovery
// (and by a track started after the rewind) and undid the rewind with no new data, declaring final the periods being
// reprocessed. Spark's timestamp is when the batch's trigger started, on
// the driver's clock; the progress was posted when the trigger ended, its
// durationMs.triggerExecution later (progress.Event.Posted), and that is
// the time judged, unless it is later than when the stream stored the
// progress, or this service heard it, by more than progress.PostedSkew
// (then, or with neither time known, the timestamp alone:
// progress.Event.PostedBy): a batch started before the rewind and committed (and
// posted) after it is not held by it (it was, and a terminated run's last
// one never moved the table: ADR 0019, addendum of 2026-12-06). A progress
// without a timestamp is applied, as before, unless the stream stored it
// before the rewind.
//
// A progress read from the stream's retained copy is judged by where the
// stream stored it too (storedBefore): by its stream sequence against the
// stream's last sequence read after the rewind committed, when that is
// known for the rewind (Tracker.pendingSeq; the rewind heard live, or
// recorded by finalizer rewind), else by its stored time (Tracker.
// pendingHeard below 0) against the rewind plus rewindMargin. Stored
// before, it is held, whatever its driver's timestamp says (a driver
// whose clock is ahead stamped it after the rewind: found in review, ADR
// 0019's addendum of 2026-12-06). Stored after, it is still held when its
// timestamp is before the rewind, as before: a client that queued it
// across an outage may have stored it late.
func (t *Tracker) beforeRewind(ev *progress.Event) bool {
	var heard, stored time.Time
	var seq uint64
	if ev == t.pending {
		switch {
		case t.pendingHeard > 0:
			heard = time.Unix(0, t.pendingHeard)
		case t.pendingHeard < 0:
			stored = time.Unix(0, -t.pendingHeard)
		}
		seq = t.pendingSeq
	}
	// Never later than when the progress was stored, or heard, with a few
	// seconds' skew: a duration past it is not believed (ADR 0019,
	// addendum of 2026-12-06: a triggerExecution of 2,000,000,000 ms
	// carried a progress posted 20 s before the rewind 24 days past it).
	posted := ev.PostedBy(cmp.Or(stored, heard))
	if posted.IsZero() && stored.IsZero() && heard.IsZero() && seq == 0 {
		return false
	}
	at := t.rewindAt(heard)
	if at.IsZero() {
		return false
	}
	// Heard before this service heard the rewind, both on its clock: sent
	// before it, whatever its driver's clock says (a progress a run
	// waiting for its decision held across the rewind, or one taken
	// before a rewind that came while the tracker ran).
	heardBefore := false
	if !heard.IsZero() && heard.Before(at) {
		_, heardBefore = t.cfg.host.storedRewind(at)
	}
	mk, marked := t.rewindMark(at)
	mark := mk.seq
	storedBefore, bySeq := storedBefore(stored, seq, at, mark, marked)
	// The driver's time is judged against the rewind's stored rewound_at
	// when this service heard it with it (the stamp the audit shows,
	// taken with the row locked, within milliseconds of the commit: ADR
	// 0019, addendum of 2026-12-06), not against when it was heard: join
	// said "posted before the rewind" of a progress posted after the
	// audit's time. Both are other clocks than the driver's.
	rewound := at
	if s := t.storedRewind(at); !s.IsZero() {
		rewound = s
	}
	if !storedBefore && !heardBefore && (posted.IsZero() || !posted.Before(rewound)) {
		return false
	}
	// Shown in the run's status and the held-runs gauge until a progress
	// from after the rewind is applied (setHeld("")): an operator asking
	// why the table stays rewound sees why.
	t.setHeld(outcomeBeforeRewind)
	t.mu.Lock()
	t.held = heldBeforeRewind(heldProgress, heldFacts{
		heard: heard, stored: stored, posted: posted, at: at, rewound: rewound,
		seq: seq, mark: mk, marked: marked,
		heardBefore: heardBefore, storedBefore: storedBefore, bySeq: bySeq,
	})
	t.mu.Unlock()
	if ev == t.pending {
		// Its advance, failing before (the database down), is dropped:
		// nothing is failing any more (ADR 0019, addendum of
		// 2026-12-06). The run shows held, FAILING no more.
		t.endFailing("the progress whose advance failed is dropped: posted before its table's rewind")
	}
	t.cfg.Metrics.candidate(outcomeBeforeRewind).Inc()
	fields := []zap.Field{zap.Time("posted", posted), zap.Time("rewound_at", rewound), zap.Int64("batch_id", ev.BatchID)}
	if !stored.IsZero() {
		fields = append(fields, zap.Time("stored", stored))
	}
	if seq != 0 {
		fields = append(fields, zap.Uint64("stream_seq", seq))
	}
	if marked {
		fields = append(fields, zap.Uint64("stream_last_seq_at_rewind", mark))
	}
	t.log.Info("a progress posted before the table's last rewind is not applied (it would undo the rewind)", fields...)
	return true
}

// storedRewind is the rewound_at the control table stored for the
// table's rewind kept as at, when this service heard it live with it;
// zero otherwise.
func (t *Tracker) storedRewind(at time.Time) time.Time {
	if t.cfg.host == nil || at.IsZero() {
		return time.Time{}
	}
	stored, _ := t.cfg.host.storedRewind(at)
	return stored
}

// rewindMark is the event stream's last sequence read after the table's
// rewind at committed (Registry.markStream for a rewind heard live, or
// recorded by finalizer rewind and read from the rows: Registry.
// loadRewinds); ok is false when none is known for that rewind.
func (t *Tracker) rewindMark(at time.Time) (streamMark, bool) {
	if t.cfg.host == nil || at.IsZero() {
		return streamMark{}, false
	}
	return t.cfg.host.rewindMark(at)
}

// storedBefore reports whether a progress the stream stored at stored
// with stream sequence seq (zero: not known) counts as stored before the
// table's rewind at, and whether that was judged by the sequence:
//   - when the stream's last sequence once the rewind had committed is
//     known (marked, mark; read by this service when it heard the rewind
//     live, or by finalizer rewind after its commit and kept on the
//     table's row) and seq is known: seq at or below mark. Sequences are
//     assigned by the stream's leader in the order it stores, whatever
//     any clock says: a NATS server's clock stepped back, or a leader
//     change between servers whose clocks differ, made a progress stored
//     before the rewind read as stored after the stream's newest stored
//     time then, and it undid the rewind (ADR 0019, addendum of
//     2026-12-06, "judged by sequence").
//   - otherwise (the rewind read from the rows with no position recorded,
//     or one recorded for another incarnation of the stream; the stream's
//     state not read yet; no sequence known) by the stored time: before
//     at plus rewindMargin, across the NATS and PostgreSQL servers'
//     clocks, late rather than wrong while they agree within it.
func storedBefore(stored time.Time, seq uint64, at time.Time, mark uint64, marked bool) (before, bySeq bool) {
	switch {
	case marked && seq != 0:
		return seq <= mark, true
	case stored.IsZero():
		return false, false
	default:
		return stored.Before(at.Add(rewindMargin)), false
	}
}

// rewindMargin is how long after a table's rewind (rewound_at, the
// PostgreSQL server's clock) the stream may have stored a progress
// (the NATS server's clock) and still be held as stored before it
// (beforeRewind): the two servers' clocks may differ, and on this side
// a progress stored just after the rewind waits for the run's next one
// (late), where on the other one stored just before it would undo the
// rewind (wrong). It applies only when the stream's sequence cannot
// decide (storedBefore: no mark known for the rewind, or no sequence for
// the progress). The ownership's held advances allow the same
// (internal/ownership), between PostgreSQL's clock and this process's.
const rewindMargin = time.Minute

// quietBeforeRewind is beforeRewind for a quiet signal (ADR 0014) at at:
// an idle event, or a progress that says its source was caught up, of a
// run found terminated or silent since its table's last rewind, sent
// before that rewind. Its quiet move would undo the rewind as the
// progress would (a restart's recovery, or a track after the rewind,
// re-reads the run's retained idle event and last progress), so it is
// not used either; the run shows held before_rewind, as for a progress.
//
// A progress's signal (caught up, no data) when the newest progress taken
// was read from the stream's retained copy with its stored time
// (Tracker.pendingHeard below 0) is judged as that progress is
// (beforeRewind): against the table's last rewind, and by the stored time
// too, so that a driver whose clock is ahead does not make a quiet move
// from before the rewind (ADR 0019's addendum of 2026-12-06). The signal
// is the newest of those taken (noteQuiet); one of an older progress,
// stored earlier still, is judged no less strictly.
func (t *Tracker) quietBeforeRewind(at time.Time, sig string) bool {
	t.mu.Lock()
	var heard time.Time
	if t.heard {
		heard = t.lastEvent
	}
	t.mu.Unlock()
	var stored time.Time
	var seq uint64
	if sig != progress.SignalIdleEvent && (t.pendingHeard < 0 || t.pendingSeq != 0) {
		heard, seq = time.Time{}, t.pendingSeq
		if t.pendingHeard < 0 {
			stored = time.Unix(0, -t.pendingHeard)
		}
	}
	rw := t.rewindAt(heard)
	if rw.IsZero() {
		return false
	}
	mk, marked := t.rewindMark(rw)
	mark := mk.seq
	storedBefore, bySeq := storedBefore(stored, seq, rw, mark, marked)
	if !storedBefore && !at.Before(rw) {
		return false
	}
	if t.heldBy == "" || t.heldByQuiet {
		// Shown in the run's status and the held-runs gauge as a
		// progress's is (beforeRewind), until a sound quiet signal
		// (applyQuiet) or a progress (apply) clears it. A hold of the
		// newest progress (its own before_rewind, a guard's) stays: it is
		// the progress that holds the run, and only a progress clears it.
		t.setHeld(outcomeBeforeRewind)
		t.heldByQuiet = true
		t.mu.Lock()
		// Its reason is a progress's (heldBeforeRewind), judged as here:
		// against rw, the caught-up time at as posted; heard is left out,
		// being the run's last live event, not the signal's.
		t.held = heldBeforeRewind(heldQuiet(sig), heldFacts{
			stored: stored, posted: at, at: rw, rewound: rw,
			seq: seq, mark: mk, marked: marked,
			storedBefore: storedBefore, bySeq: bySeq,
		})
		t.mu.Unlock()
	}
	t.cfg.Metrics.candidate(outcomeBeforeRewind).Inc()
	fields := []zap.Field{zap.String("signal", sig), zap.Time("caught_up_at", at), zap.Time("rewound_at", rw)}
	if storedBefore && !stored.IsZero() {
		fields = append(fields, zap.Time("stored", stored))
	}
	if storedBefore && bySeq {
		fields = append(fields, zap.Uint64("stream_seq", seq), zap.Uint64("stream_last_seq_at_rewind", mark))
	}
	t.log.Info("a quiet signal sent before the table's last rewind is not used (its quiet move would undo the rewind)", fields...)
	return true
}

// rewindAt is the rewind of the tracker's table its run is held to (no
// progress or quiet signal sent before it is used), zero when none:
//   - the table's last rewind, when the run was found silent or
//     terminated since it (Registry.rewoundAt: by a restart's recovery,
//     or judgeSilence at the tracker's start, from the stream);
//   - a rewind that came after the start was judged (heard while the
//     tracker started or ran, or read again after the notification
//     channel was down: Registry.rewoundSince), unless what is judged
//     was heard live after that rewind (heard: for a progress, when that
//     progress itself was heard, zero when it may come from the stream's
//     retained copy; for a quiet signal, the run's last live event). A
//     progress heard before the rewind, or offered again by a catch-up
//     from the stream (a reconnect, the final one), was sent before it
//     and would undo it; an idle event heard since does not make it
//     newer (found in review: an idle event released a failed advance
//     taken before the rewind, 13:00 -> 17:00). A progress heard live
//     after the rewind is applied as usual (its driver's clock is not
//     trusted against this service's). At worst a run that was posting
//     waits for its next progress: late, never wrong.
//   - the table's last rewind, whatever the run, when what is judged was
//     not heard live (heard zero): a progress read from the stream's
//     retained copy (a restart's recovery, a catch-up) or a quiet signal
//     of a run not heard of live since the tracker started. Its driver's
//     timestamp is the only time it has; a run that spoke after the
//     rewind (an idle event) is no evidence that its last progress came
//     after it (found in review: an idle event after the rewind, then a
//     restart, and the recovery applied the last progress again). A
//     retained progress posted after the rewind by a driver whose clock
//     is behind waits for the run's next one: late, never wrong.
func (t *Tracker) rewindAt(heard time.Time) time.Time {
	if t.cfg.host == nil {
		return time.Time{}
	}
	at, since, latest := t.cfg.host.rewoundAt()
	if heard.IsZero() {
		return later(at, latest)
	}
	if latest.After(heard) {
		// Heard before this service heard the table's latest rewind,
		// both on its clock: a progress a run waiting for its decision
		// held across the rewind (discovery's pending run), handed to
		// the tracker afterwards with when it was heard
		// (Mail.ProgressHeard), was judged against the rewinds its start
		// was judged against, which hold that rewind, and so by its
		// driver's clock only (ADR 0019, addendum of 2026-12-06). A
		// tracker's own live progress is heard after its start, hence
		// after every rewind judged at it; a later one is since's case.
		if _, live := t.cfg.host.storedRewind(latest); live {
			return latest
		}
	}
	if since.IsZero() || !since.After(at) || heard.After(since) {
		return at
	}
	return since
}

// knownRewind is the guard of an advance decided now: the table's last
// rewind the host knows, as the control table stored it; a guard even
// when it knows none (control.KnownRewind), so that a rewind this service
// has not heard of refuses it too.
func (t *Tracker) knownRewind() control.RewindGuard {
	var at time.Time
	if t.cfg.host != nil {
		at = t.cfg.host.knownRewind()
	}
	return control.KnownRewind(at)
}

// learnRewind learns a rewind from v, the table's row as a statement that
// refused one of this tracker's advances read it: the host knows it from
// then on (the registry as if its notification had been heard: every
// tracker of the table forgets what it wrote, and holds what was heard
// before it), and this tracker forgets its last write and what it knew of
// the verdict, as for a heard rewind (checkRewound).
func (t *Tracker) learnRewind(v control.Verdict) {
	if t.cfg.host != nil {
		t.cfg.host.learnRewind(v)
	}
	t.rewinds.Add(1)
	t.checkRewound()
}

// refusedByRewind drops an advance of cand (from ev) that the statement
// refused (control.ErrBeforeRewind): the table was rewound after the
// rewind the advance knew, one that committed while the statement waited
// for the row's lock (behind a reader's) included. It would have undone
// the rewind. It is counted and shown as a progress from before the
// rewind is (before_rewind), the tracker learns the rewind from v, and
// the run's next progress heard after it moves the verdict from the
// rewound point.
func (t *Tracker) refusedByRewind(v control.Verdict, cand progress.Candidate, ev *progress.Event) {
	t.learnRewind(v)
	t.movedLast = false
	t.setHeld(outcomeBeforeRewind)
	t.mu.Lock()
	t.held = outcomeBeforeRewind + ": the advance to " + cand.Until.UTC().Format(time.RFC3339) +
		" was refused by the control table: the table was rewound at " + v.RewoundAt.UTC().Format(time.RFC3339Nano) +
		", after the progress was taken; the run's next progress moves the verdict"
	failures := t.failures
	t.failures, t.lastErr = 0, nil // an answer from the database
	t.mu.Unlock()
	t.cfg.Metrics.candidate(outcomeBeforeRewind).Inc()
	t.log.Info("an advance decided before the table's last rewind was refused by the control table (it would undo the rewind); dropped",
		zap.Time("candidate", cand.Until), zap.Time("rewound_at", v.RewoundAt), zap.Int64("batch_id", ev.BatchID),
		zap.Int("failures_before", failures))
}

// endFailing ends the run's failing state (failed advances in a row and
// the last error, shown as FAILING in status) when the advance that
// failed is answered or dropped otherwise than by a success: a refused
// re-assert, or a failed advance's progress held as posted before its
// table's rewind. Before, status kept FAILING (1) with the outage's
// error after the database had answered (found in review).
func (t *Tracker) endFailing(why string) {
	t.mu.Lock()
	failures := t.failures
	t.failures, t.lastErr = 0, nil
	t.mu.Unlock()
	if failures > 0 {
		t.log.Info("the failing advance is over", zap.String("why", why), zap.Int("failures_before", failures))
	}
}

// later returns the later of a and b.
func later(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

// outcomeBeforeRewind counts, in finalizer_candidates_total, a progress
// or a quiet signal posted before its table's last rewind (beforeRewind,
// quietBeforeRewind).
const outcomeBeforeRewind = "before_rewind"

// rewound tells the worker that the table's verdict may have been moved
// back, and clears the write the run's status shows at once: a write from
// before the rewind, shown until the run's next progress, said the table
// was further on than it is. Safe from any goroutine; it only takes t.mu,
// which no one holds for long.
func (t *Tracker) rewound() {
	t.rewinds.Add(1)
	t.mu.Lock()
	t.shownWrite = time.Time{}
	t.mu.Unlock()
}

// checkReset looks at the run's batch 0, once: when the table has a
// verdict written by another query before this progress, the query
// restarted from a new checkpoint and its batches may rewrite periods
// already declared final. Batch 0 counts when it arrived, even when a
// newer progress replaced it in the one-slot mailbox before the worker
// took it (a burst, a slow database, a catch-up after a restart): ev is
// then that newer progress of the same run.
func (t *Tracker) checkReset(ctx context.Context, ev *progress.Event) {
	zero := t.batchZero
	t.batchZero = false
	if (ev.BatchID != 0 && !zero) || t.hist.checkedReset || t.cfg.Reader == nil {
		return
	}
	t.hist.checkedReset = true
	rctx, cancel := context.WithTimeout(ctx, t.cfg.AdvanceTimeout)
	v, err := t.cfg.Reader.Get(rctx, t.cfg.Table)
	cancel()
	if errors.Is(err, control.ErrNotFound) {
		return
	}
	if err != nil {
		t.log.Warn("could not read the verdict to check batch 0 for a checkpoint reset", zap.Error(err))
		return
	}
	t.learn(v)
	if v.QueryID == "" || v.QueryID == ev.QueryID || !t.hist.newer(ev) || t.hist.saidReset {
		return
	}
	t.hist.saidReset = true
	t.sign(ctx, SignReset, fmt.Sprintf("reset: query %s started at batch 0 (run %s) on a verdict of query %s at %s; a new checkpoint may rewrite final periods",
		ev.QueryID, ev.RunID, v.QueryID, v.FinalizedUntil.Format(time.RFC3339)),
		"a new query id started at batch 0 on a table with a verdict (a checkpoint reset): its batches may rewrite periods already declared final",
		zap.String("verdict_query_id", v.QueryID), zap.Time("finalized_until", v.FinalizedUntil))
}

// checkBehind counts a candidate below the verdict's stored end, written
// by the same query (a table's other feeders, control/feeders.go, may well
// be behind it), from a progress posted after that move.
func (t *Tracker) checkBehind(ctx context.Context, ev *progress.Event, cand progress.Candidate) {
	h := &t.hist
	if !h.known || h.end.IsZero() || h.query != ev.QueryID || !cand.Time.Before(h.end) || !h.newer(ev) {
		return
	}
	t.cfg.Metrics.HistorySigns.WithLabelValues(SignBehind).Inc()
	t.mu.Lock()
	t.behind++
	t.mu.Unlock()
	if h.saidBehind {
		return
	}
	h.saidBehind = true
	t.sign(ctx, "", fmt.Sprintf("behind: run %s of query %s read %s (batch %d), below the stored end %s of query %s; a checkpoint rollback or a reset may rewrite final periods",
		ev.RunID, ev.QueryID, cand.Time.Format(time.RFC3339Nano), ev.BatchID, h.end.Format(time.RFC3339Nano), h.query),
		"a candidate is below the verdict's stored end: the table's history went back (a checkpoint rollback, a reset run reprocessing); periods already declared final may be rewritten",
		zap.Time("time", cand.Time), zap.Time("stored_end", h.end), zap.String("stored_query_id", h.query))
}

// checkSource warns when the source a spec picks by index has another
// description than when the verdict last moved.
func (t *Tracker) checkSource(ctx context.Context, ev *progress.Event) {
	h := &t.hist
	i := t.cfg.Spec.Source
	if i < 0 || !h.known || h.saidSource || i >= len(h.sources) || i >= len(ev.Sources) || h.sources[i] == "" {
		return
	}
	now := ev.Sources[i].Description
	if now == h.sources[i] || !h.newer(ev) {
		return
	}
	h.saidSource = true
	t.sign(ctx, SignSourceChanged, fmt.Sprintf("source_changed: source %d of run %s is %q, the verdict was read from %q; pick the source by description (source: description:<glob>)",
		i, ev.RunID, now, h.sources[i]),
		"the source this table reads by index has another description than when the verdict last moved: a redeploy reordered the sources? pick it by description (source: description:<glob>)",
		zap.Int("source", i), zap.String("description", now), zap.String("stored_description", h.sources[i]))
}

// sign counts (unless kind is "", already counted), logs and records one
// sign on the table's row.
func (t *Tracker) sign(ctx context.Context, kind, mark, msg string, fields ...zap.Field) {
	if kind != "" {
		t.cfg.Metrics.HistorySigns.WithLabelValues(kind).Inc()
	}
	t.mu.Lock()
	if t.signText == "" {
		t.signText = mark
	}
	t.mu.Unlock()
	t.log.Warn(msg, fields...)
	if t.cfg.Marker == nil {
		return
	}
	mctx, cancel := context.WithTimeout(ctx, t.cfg.AdvanceTimeout)
	defer cancel()
	if _, err := t.cfg.Marker.Mark(mctx, t.cfg.Table, mark); err != nil {
		t.log.Warn("could not mark the table; the sign is in this log and the metric only", zap.Error(err))
	}
}

// Rewound tells the trackers of table that an operator moved its verdict
// back to until (finalizer rewind), stored as rewound_at at (the
// notification's, control.Notification.RewoundAt; zero when it carried
// none): each forgets what it wrote and knew, so that its next candidate
// is written again from the rewound verdict, and their advances carry at
// as the rewind they know (Advance.Guard). A table of "" means any table
// may have been rewound (the notification channel was down for a while):
// every tracker forgets, which costs one no-op advance (a read) each at
// its next progress. A rewind a tracker learnt already from a refused
// advance (learnRewind) is not applied twice. It never blocks; call it
// from control.Store.Watch.
func (r *Registry) Rewound(table string, until, at time.Time) {
	if table != "" && !at.IsZero() && !at.After(r.knownRewindOf(table)) {
		// Known already: learnt from a refused advance, or read from
		// the rows (a recovery, a re-read) before its notification came.
		// Its trackers forget what they wrote (a write from before the
		// rewind would make their next candidates "same period"), and
		// nothing more: the runs were judged against it already.
		n := r.forgetWrites(table)
		r.log.Debug("rewind heard that was known already; the table's trackers forget their writes",
			zap.String("table", table), zap.Time("rewound_at", at), zap.Int("trackers", n))
		if at.Equal(r.knownRewindOf(table)) {
			// Heard live all the same: the table's latest rewind committed
			// just before, and the stream's state now is its threshold.
			r.markStream(table)
		}
		return
	}
	r.rewind(table, until, at, false)
	if table != "" {
		r.markStream(table)
	}
}

// streamMark is what the registry knows of a table's rewind heard live:
// rewind is the rewind as the registry keeps it (r.rewinds: when it was
// heard, the service's clock), stored its rewound_at as the control
// table stored it (the notification's; zero when not carried), and,
// once read (markStream, or recorded by finalizer rewind and read from
// the rows: loadRewinds), seq the stream's last sequence once the rewind
// had committed (0 when it stored none).
type streamMark struct {
	rewind, stored time.Time
	seq            uint64
	read           bool
	// heard: rewind is when this service heard (or learnt) the rewind,
	// its own clock (Registry.rewind); false for a mark read for a
	// rewind known from the rows before its notification came (rewind
	// is then its stored rewound_at, PostgreSQL's clock).
	heard bool
	// How seq was read, for a hold's reason to say truthfully what it
	// knows (ADR 0019, addendum of 2026-12-06, "a late mark says so"):
	// recorded, by finalizer rewind after its commit (loadRewinds);
	// otherwise by markStream, answering at readAt (this service's
	// clock) after failed earlier reads (NATS unreachable).
	recorded bool
	readAt   time.Time
	failed   int
}

// markLateAfter is how long after this service heard a rewind its read
// of the stream's state may answer and still be called prompt in a
// hold's reason: a read that answers later (or after a failed one) is a
// late mark, and a progress held by it may well have been stored after
// the rewind (streamMark.late).
const markLateAfter = 2 * time.Second

// late reports whether m was read late: after a failed read, or more
// than markLateAfter after this service heard the rewind. A recorded
// mark (finalizer rewind's, read after its commit within 5 s or not at
// all) is not late.
func (m streamMark) late() bool {
	if m.recorded {
		return false
	}
	return m.failed > 0 || (m.heard && !m.readAt.IsZero() && m.readAt.Sub(m.rewind) > markLateAfter)
}

// after is how long after the rewind was heard m was read (zero when
// not known).
func (m streamMark) after() time.Duration {
	if m.recorded || !m.heard || m.readAt.IsZero() || m.readAt.Before(m.rewind) {
		return 0
	}
	return m.readAt.Sub(m.rewind)
}

// setMark updates table's entry in r.marks for the rewind kept as key:
// change edits it (a fresh entry when there is none for key, replacing
// one of an earlier rewind) and reports whether to keep the edit. With
// ifCurrent (a stream read's answer, markStream), the edit is dropped
// when key is no longer the table's current rewind (r.rewinds), or the
// table's entry is a later rewind's: a read for rewind 1 that answers
// after rewind 2 was heard must not overwrite rewind 2's entry (its
// stored rewound_at and that it was heard live: found in review, ADR
// 0019, addendum of 2026-12-06). It reports whether the edit was kept.
func (r *Registry) setMark(table string, key time.Time, ifCurrent bool, change func(*streamMark) bool) bool {
	for {
		old := r.marks.Load()
		var m streamMark
		if old != nil {
			if x, ok := (*old)[table]; ok && x.rewind.Equal(key) {
				m = x
			} else if ok && ifCurrent && x.rewind.After(key) {
				return false // a later rewind's entry (not noted in r.rewinds yet)
			}
		}
		if ifCurrent && !r.rewindOf(table).Equal(key) {
			return false // a later rewind replaced it
		}
		m.rewind = key
		if !change(&m) {
			return false
		}
		next := make(map[string]streamMark, 1)
		if old != nil {
			for k, v := range *old {
				next[k] = v
			}
		}
		next[table] = m
		if r.marks.CompareAndSwap(old, &next) {
			return true
		}
	}
}

// rewindOf is table's latest rewind as the registry keeps it
// (r.rewinds); zero when none. Lock-free.
func (r *Registry) rewindOf(table string) time.Time {
	if rw := r.rewinds.Load(); rw != nil {
		return (*rw)[table]
	}
	return time.Time{}
}

// markStream asks the event stream for its last sequence (StreamMarker),
// right after this service heard table's rewind live, and keeps it with
// that rewind (r.marks): a progress read later from the stream's retained
// copy is judged against the rewind by its stream sequence against that
// one, both assigned by the stream's leader in the order it stores,
// whatever any clock says (Tracker.beforeRewind; ADR 0019, addendum of
// 2026-12-06, "judged by sequence": its stored time against the stream's
// newest stored time undid a rewind when the NATS server's clock stepped
// back), instead of its stored time against rewound_at with
// rewindMargin across the NATS and PostgreSQL servers' clocks. The usual
// reset (stop the old query, rewind, start the new one at once) has the
// new run's first progress read from the stream seconds after the
// rewind: within the margin it waited for the run's next progress, and
// an AvailableNow run that posts one and terminates left the table at
// the rewind for good (ADR 0019, addendum of 2026-12-06).
//
// The stream's state is read after the rewind committed (its
// notification is sent at the commit): every message stored before the
// commit has a sequence no later than its last, so a progress stored
// before the rewind is never taken as after it; one stored between the
// commit and the read is
// held (late, never wrong). A read taken later is no less sound (its
// threshold only later), so a failed read is tried again, with backoff
// (one second, doubling up to 30 s), until it answers, the table is
// rewound again (the later rewind reads its own) or the registry
// closes: NATS stalled as the rewind was heard left the margin for good,
// and a reset run's only progress stored 15 s after the rewind held
// (ADR 0019, addendum of 2026-12-06). The reads run on a goroutine of
// its own (counted in r.wg, each bounded by the advance timeout, one per
// table and rewind at a time: r.marking): the notification callback must
// not wait on NATS. Until a read answers, the margin rule holds. An
// answer for a rewind that is no longer the table's latest is dropped
// (setMark). A rewind this service did not hear live (read from the rows
// at a start or after a reconnect) has the mark finalizer rewind recorded
// with it, when it could and the stream is still the one it read
// (Registry.markRecorded); otherwise none: the stream's state then says
// nothing of when the rewind committed.
func (r *Registry) markStream(table string) {
	sm, ok := r.cfg.Bus.(StreamMarker)
	if !ok {
		return
	}
	at := r.rewindOf(table)
	if _, ok := r.markOf(table, at); ok || at.IsZero() {
		return // marked already: the first read is the earliest threshold
	}
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		return
	}
	if m, ok := r.marking[table]; ok && m.Equal(at) {
		r.mu.Unlock()
		return // being read already
	}
	if r.marking == nil {
		r.marking = make(map[string]time.Time)
	}
	r.marking[table] = at
	r.wg.Add(1)
	r.mu.Unlock()
	go func() {
		defer r.wg.Done()
		defer r.markReadEnded(table, at)
		defer func() {
			r.mu.Lock()
			if m, ok := r.marking[table]; ok && m.Equal(at) {
				delete(r.marking, table)
			}
			r.mu.Unlock()
		}()
		attempt := 0
		var last uint64
		read := func() error {
			if !r.rewindOf(table).Equal(at) {
				return backoff.Permanent(errRewoundAgain)
			}
			attempt++
			ctx, cancel := context.WithTimeout(r.stopCtx, cmp.Or(r.cfg.Tracker.AdvanceTimeout, DefaultAdvanceTimeout))
			defer cancel()
			pos, err := sm.StreamPosition(ctx)
			if err != nil {
				return err
			}
			last = pos.LastSeq
			return nil
		}
		b := rereadBackOff()
		err := backoff.RetryNotifyWithTimer(read, backoff.WithContext(b, r.stopCtx), func(err error, in time.Duration) {
			r.markReadFailed(table, at, attempt, in, err)
		}, r.cfg.Clock.NewTimer())
		switch {
		case errors.Is(err, errRewoundAgain):
			r.log.Debug("the table was rewound again before the event stream's state was read for its earlier rewind; the later rewind reads its own",
				zap.String("table", table), zap.Time("rewind", at))
			return
		case err != nil:
			return // the registry closes
		}
		if !r.setMark(table, at, true, func(m *streamMark) bool {
			if m.read {
				return false // the first read is the earliest threshold
			}
			m.seq, m.read = last, true
			m.readAt, m.failed = r.cfg.Clock.Now(), attempt-1
			return true
		}) {
			r.log.Debug("the event stream's state read for a rewind is not kept: read already, or the table was rewound again",
				zap.String("table", table), zap.Time("rewind", at))
			return
		}
		if attempt > 1 {
			r.markReadLate(table, at, last, attempt)
			return
		}
		r.log.Info("the event stream's state when the rewind was heard: a progress it stores later is after the rewind",
			zap.String("table", table), zap.Time("rewind", at), zap.Uint64("stream_last_seq", last), zap.Int("attempts", attempt))
	}()
}

// errRewoundAgain ends markStream's reads for a rewind that a later one
// replaced.
var errRewoundAgain = errors.New("the table was rewound again")

// markOf is the stream's last sequence once table's rewind at had
// committed (markStream for a rewind heard live; recorded by finalizer
// rewind and read from the rows, loadRewinds); ok is false when none is
// known for that rewind (a later rewind replaced it, it was read from
// the rows with no position or one of another incarnation of the stream,
// or the read has not answered or failed). Lock-free.
func (r *Registry) markOf(table string, at time.Time) (seq uint64, ok bool) {
	mk, ok := r.markInfo(table, at)
	return mk.seq, ok
}

// markInfo is markOf with how the mark was read (streamMark: recorded,
// late). Lock-free.
func (r *Registry) markInfo(table string, at time.Time) (streamMark, bool) {
	m := r.marks.Load()
	if m == nil {
		return streamMark{}, false
	}
	mk, ok := (*m)[table]
	if !ok || at.IsZero() || !mk.rewind.Equal(at) || !mk.read {
		return streamMark{}, false
	}
	return mk, true
}

// storedOf is the rewound_at the control table stored for table's rewind
// kept as at (r.rewinds), when this service heard it live with it (its
// notification's), zero otherwise (then at is the stored value itself,
// read from the rows, or not known); live says whether at is when this
// service heard (or learnt) that rewind, on its own clock. Lock-free.
func (r *Registry) storedOf(table string, at time.Time) (stored time.Time, live bool) {
	m := r.marks.Load()
	if m == nil || at.IsZero() {
		return time.Time{}, false
	}
	if mk, ok := (*m)[table]; ok && mk.rewind.Equal(at) && mk.heard {
		return mk.stored, true
	}
	return time.Time{}, false
}

// forgetWrites has the trackers of table ("" = of every table) forget
// what they wrote and knew (Tracker.rewound), and returns how many.
func (r *Registry) forgetWrites(table string) int {
	r.mu.RLock()
	defer r.mu.RUnlock()
	n := 0
	for k, e := range r.trackers {
		if table != "" && k.table != table {
			continue
		}
		if !e.ready.closed() {
			continue // starting: it has written nothing yet
		}
		if e.t != nil {
			e.t.rewound()
			n++
		}
	}
	return n
}

// learnRewind learns, from v, the row of table as a statement that
// refused a tracker's advance read it (control.ErrBeforeRewind), a
// rewind not known yet (its notification not heard, or not yet): as if
// the notification had been heard. A rewind known already (the tracker's
// advance was decided before its notification) is not applied again.
// Two trackers refused at once may both apply it: a no-op advance more;
// it is counted and logged once (countRewind).
func (r *Registry) learnRewind(table string, v control.Verdict) {
	if v.RewoundAt.IsZero() || !v.RewoundAt.After(r.knownRewindOf(table)) {
		return
	}
	r.rewind(table, v.FinalizedUntil, v.RewoundAt, true)
}

// knownRewindOf is table's rewound_at as last known (r.known); zero when
// none.
func (r *Registry) knownRewindOf(table string) time.Time {
	if k := r.known.Load(); k != nil {
		return (*k)[table]
	}
	return time.Time{}
}

// rewind is Rewound and learnRewind: the trackers of table ("" = of every
// table) forget what they wrote, and the rewind is noted, at the service's
// clock (the run holds, Tracker.rewindAt) and, when at is known, as the
// stored rewound_at the trackers' advances carry from then on: in that
// order (see noteKnown).
func (r *Registry) rewind(table string, until, at time.Time, learnt bool) {
	n := r.forgetWrites(table)
	if table == "" {
		return
	}
	// Heard after the rewind's commit: no earlier than its rewound_at, so
	// a progress posted before the rewind is never applied after it.
	heard := r.cfg.Clock.Now()
	// Kept with the rewind before it is noted: that it was heard (or
	// learnt) by this service, on its clock, and its rewound_at as
	// stored: a progress's driver timestamp is judged against the stamp
	// the audit shows (Tracker.beforeRewind), while what was heard live
	// is judged by when the rewind was heard (same clock: rewindAt).
	r.setMark(table, heard, false, func(m *streamMark) bool { m.stored, m.heard = at, true; return true })
	r.noteRewinds(map[string]time.Time{table: heard})
	if !at.IsZero() {
		r.noteKnown(map[string]time.Time{table: at})
	}
	first := r.countRewind(table, at)
	r.cfg.Metrics.SetVerdict(table, until)
	if learnt && !first {
		r.log.Debug("verdict rewound by an operator, learnt again from another advance the control table refused at once; counted and logged once",
			zap.String("table", table), zap.Time("rewound_at", at), zap.Int("trackers", n))
		return
	}
	if learnt {
		r.log.Info("verdict rewound by an operator, learnt from an advance the control table refused (its notification not heard yet); the table's trackers start again from it",
			zap.String("table", table), zap.Time("finalized_until", until), zap.Time("rewound_at", at), zap.Int("trackers", n))
		return
	}
	r.log.Info("verdict rewound by an operator; the table's trackers start again from it",
		zap.String("table", table), zap.Time("finalized_until", until), zap.Int("trackers", n))
}

// rewoundSinceWrite reports whether the table was rewound after this
// tracker's last write (a rewind announced while the notification channel
// was down), and then forgets what it wrote, as a heard rewind does:
// re-asserting a write from before a rewind would undo it. Without a
// Reader, or when the read fails, it says no (the re-assert goes on: a
// lost write is the likelier cause of a reconnect's doubt).
func (t *Tracker) rewoundSinceWrite(ctx context.Context) bool {
	if t.cfg.Reader == nil || !t.hist.known {
		return false
	}
	rctx, cancel := context.WithTimeout(ctx, t.cfg.AdvanceTimeout)
	v, err := t.cfg.Reader.Get(rctx, t.cfg.Table)
	cancel()
	if err != nil || v.RewoundAt.IsZero() || !v.RewoundAt.After(t.hist.at) {
		return false
	}
	t.log.Info("the table was rewound since this tracker's last write; not re-asserting it",
		zap.Time("rewound_at", v.RewoundAt), zap.Time("finalized_until", v.FinalizedUntil))
	t.rewinds.Add(1)
	t.checkRewound()
	return true
}
