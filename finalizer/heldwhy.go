package finalizer

import (
	"strconv"
	"time"
)

// heldFacts is what beforeRewind knows of a progress it holds as posted
// before its table's rewind, for the hold's reason (heldBeforeRewind).
type heldFacts struct {
	heard, stored, posted time.Time // zero when not known
	at                    time.Time // the rewind as kept (Tracker.rewindAt)
	rewound               time.Time // its rewound_at, the driver's time is judged against
	seq                   uint64    // the progress's stream sequence (0: not known)
	mark                  streamMark
	marked                bool
	heardBefore           bool
	storedBefore, bySeq   bool
}

// heldEndedRun is what an operator can do for a run that ended with its
// last progress held when the stream cannot tell whether it stored that
// progress before or after the rewind (a late mark, or the margin). A
// new run of the query is tracked live after the rewind, and its
// progress posted after it is applied. A rewind made again does not
// release the held one: the stream stored it before that rewind too.
const heldEndedRun = "if the run has ended, start its query again: the new run's progress, heard live and posted after the rewind, moves the verdict (rewinding again does not: this progress was stored before that rewind too)"

// heldClockBehind is what an operator can do for a progress the stream
// stored after the rewind that its driver's clock posts before it.
const heldClockBehind = ": a progress of an earlier run that a client queued and the stream stored late looks the same, so it is held. If this run started after the rewind, its driver's clock is behind: check the driver's clock (NTP); its next progress posted after the rewind by that clock moves the verdict"

// heldBeforeRewind is the run's hold reason (Status.Held) for a
// progress beforeRewind holds: what decided it, truthfully, and what the
// operator can do (ADR 0019, addendum of 2026-12-06, "a hold says why").
func heldBeforeRewind(f heldFacts) string {
	posted := f.posted.UTC().Format(time.RFC3339)
	seq := strconv.FormatUint(f.seq, 10)
	switch {
	case f.heardBefore:
		return outcomeBeforeRewind + ": the run's progress was heard at " + f.heard.UTC().Format(time.RFC3339Nano) +
			" (posted at " + posted + " by its driver's clock), before this service heard its table's rewind at " +
			f.at.UTC().Format(time.RFC3339Nano) + "; its next progress posted after the rewind moves the verdict"
	case f.storedBefore && f.bySeq && f.mark.late():
		return outcomeBeforeRewind + ": the run's progress was stored by the stream at sequence " + seq +
			" (posted at " + posted + " by its driver's clock), at or before " + lateMarkText(f.mark) +
			"; its next progress posted after the rewind moves the verdict; " + heldEndedRun
	case f.storedBefore && f.bySeq:
		return outcomeBeforeRewind + ": the run's progress was stored by the stream at sequence " + seq +
			" (posted at " + posted + " by its driver's clock), before its table's rewind at " + f.rewound.UTC().Format(time.RFC3339) +
			" (" + markText(f.mark) + "); its next progress posted after the rewind moves the verdict"
	case f.storedBefore:
		why := " (no position of the stream is known for the rewind: finalizer rewind could not record one, the stream was created again since, or this service's read of it has not answered):"
		if f.marked {
			why = " (the progress's stream sequence is not known):"
		}
		return outcomeBeforeRewind + ": the run's progress was stored by the stream at " + f.stored.UTC().Format(time.RFC3339) +
			" (posted at " + posted + " by its driver's clock), before its table was rewound at " +
			f.at.UTC().Format(time.RFC3339) + " or within " + rewindMargin.String() + " after, by the NATS and PostgreSQL servers' clocks" + why +
			" the stream cannot tell whether it stored this progress before or after the rewind, and its driver's clock alone is not trusted; its next progress posted after the rewind moves the verdict; " + heldEndedRun
	}
	before := ", but its driver's clock says it was posted at " + f.posted.UTC().Format(time.RFC3339Nano) +
		", before the rewind at " + f.rewound.UTC().Format(time.RFC3339Nano) + heldClockBehind
	switch {
	case f.marked && f.seq != 0: // stored after the mark
		return outcomeBeforeRewind + ": the stream stored the run's progress after its table's rewind (at sequence " + seq +
			", after " + markText(f.mark) + ")" + before
	case !f.stored.IsZero():
		return outcomeBeforeRewind + ": the stream stored the run's progress at " + f.stored.UTC().Format(time.RFC3339) +
			", after its table's rewind at " + f.at.UTC().Format(time.RFC3339) + " and " + rewindMargin.String() + " more by the NATS and PostgreSQL servers' clocks" + before
	case !f.heard.IsZero() && !f.heard.Before(f.at):
		return outcomeBeforeRewind + ": this service heard the run's progress live at " + f.heard.UTC().Format(time.RFC3339Nano) +
			", after its table's rewind" + before
	}
	return outcomeBeforeRewind + ": the run's progress was posted at " + f.posted.UTC().Format(time.RFC3339Nano) +
		" by its driver's clock, before its table was rewound at " + f.rewound.UTC().Format(time.RFC3339Nano) +
		"; if this run started after the rewind, its driver's clock is behind: check it (NTP); its next progress posted after the rewind by that clock moves the verdict"
}

// markText names a prompt mark: the stream's last sequence once the
// rewind had committed, and who read it.
func markText(m streamMark) string {
	seq := strconv.FormatUint(m.seq, 10)
	if m.recorded {
		return "sequence " + seq + ", the stream's last when finalizer rewind recorded it after the rewind committed"
	}
	return "sequence " + seq + ", the stream's last once the rewind had committed, read when this service heard it"
}

// lateMarkText names a late mark (streamMark.late) and says what it
// cannot tell: a progress at or below it may have been stored after the
// rewind, in the time the read took.
func lateMarkText(m streamMark) string {
	why := "because the event stream was slow to answer"
	if m.failed > 0 {
		why = "because the event stream could not be read at first (NATS unreachable or not answering: " + strconv.Itoa(m.failed) + " failed reads)"
	}
	return "sequence " + strconv.FormatUint(m.seq, 10) + ", the stream's last when this service could read it, " +
		m.after().Round(100*time.Millisecond).String() + " after it heard the table's rewind at " + m.rewind.UTC().Format(time.RFC3339) + ", " + why +
		": the stream cannot tell whether it stored this progress before or after the rewind, and its driver's clock alone is not trusted"
}
