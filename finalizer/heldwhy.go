package finalizer

import (
	"strconv"
	"time"
)

// heldFacts is what beforeRewind knows of a progress it holds as posted
// before its table's rewind, or quietBeforeRewind of a quiet signal, for
// the hold's reason (heldBeforeRewind).
type heldFacts struct {
	heard, stored, posted time.Time // zero when not known; posted: a quiet signal's caught-up time
	at                    time.Time // the rewind as kept (Tracker.rewindAt)
	rewound               time.Time // its rewound_at, the driver's time is judged against
	seq                   uint64    // the progress's stream sequence (0: not known)
	mark                  streamMark
	marked                bool
	heardBefore           bool
	storedBefore, bySeq   bool
}

// heldSubject is what a before_rewind hold holds, in the words its
// reason uses: a run's progress (beforeRewind), or its quiet signal
// (quietBeforeRewind, ADR 0014), which an idle event or a progress
// carries.
type heldSubject struct {
	name   string // "the run's progress"
	stored string // how the stream stored it: " was stored by the stream"
	object string // what the stream stored: "the run's progress"
	time   string // what its driver's time is: "posted"
	clock  string // what its driver's clock says of it: "it was posted"
	was    string // the same after its name: "was posted"
	next   string // what moves the verdict: "its next progress"
}

// heldProgress is a run's progress held before its table's rewind.
var heldProgress = heldSubject{
	name:   "the run's progress",
	stored: " was stored by the stream",
	object: "the run's progress",
	time:   "posted",
	clock:  "it was posted",
	was:    "was posted",
	next:   "its next progress",
}

// heldQuiet is a run's quiet signal sig (an idle event, or a progress
// that says its source was caught up) held before its table's rewind.
func heldQuiet(sig string) heldSubject {
	name := "the run's quiet signal (" + sig + ")"
	return heldSubject{
		name:   name,
		stored: " comes from a progress the stream stored",
		object: "the progress " + name + " comes from",
		time:   "caught up",
		clock:  "its source was caught up",
		was:    "says its source was caught up",
		next:   "its next progress, or quiet signal,",
	}
}

// heldEndedRun is what an operator can do for a run that ended with its
// last progress held when the stream cannot tell whether it stored that
// progress before or after the rewind (a late mark, or the margin). A
// new run of the query is tracked live after the rewind, and its
// progress posted after it is applied. A rewind made again does not
// release the held one: the stream stored it before that rewind too.
const heldEndedRun = "if the run has ended, start its query again: the new run's progress, heard live and posted after the rewind, moves the verdict (rewinding again does not: this progress was stored before that rewind too)"

// heldClockBehind is what an operator can do for a progress the stream
// stored after the rewind that its driver's clock posts before it; next
// is what moves the verdict (heldSubject.next).
func heldClockBehind(next string) string {
	return ": a progress of an earlier run that a client queued and the stream stored late looks the same, so it is held. If this run started after the rewind, its driver's clock is behind: check the driver's clock (NTP); " +
		next + " posted after the rewind by that clock moves the verdict"
}

// heldBeforeRewind is the run's hold reason (Status.Held) for what
// beforeRewind (s heldProgress) or quietBeforeRewind (s heldQuiet) holds:
// what decided it, truthfully, and what the operator can do (ADR 0019,
// addendum of 2026-12-06, "a hold says why").
func heldBeforeRewind(s heldSubject, f heldFacts) string {
	posted := f.posted.UTC().Format(time.RFC3339)
	seq := strconv.FormatUint(f.seq, 10)
	driver := " (" + s.time + " at " + posted + " by its driver's clock), "
	next := "; " + s.next + " posted after the rewind moves the verdict"
	switch {
	case f.heardBefore:
		return outcomeBeforeRewind + ": " + s.name + " was heard at " + f.heard.UTC().Format(time.RFC3339Nano) +
			driver + "before this service heard its table's rewind at " + f.at.UTC().Format(time.RFC3339Nano) + next
	case f.storedBefore && f.bySeq && f.mark.late():
		return outcomeBeforeRewind + ": " + s.name + s.stored + " at sequence " + seq +
			driver + "at or before " + lateMarkText(f.mark) + next + "; " + heldEndedRun
	case f.storedBefore && f.bySeq:
		return outcomeBeforeRewind + ": " + s.name + s.stored + " at sequence " + seq +
			driver + "before its table's rewind at " + f.rewound.UTC().Format(time.RFC3339) + " (" + markText(f.mark) + ")" + next
	case f.storedBefore:
		why := " (no position of the stream is known for the rewind: finalizer rewind could not record one, the stream was created again since, or this service's read of it has not answered):"
		if f.marked {
			why = " (the progress's stream sequence is not known):"
		}
		return outcomeBeforeRewind + ": " + s.name + s.stored + " at " + f.stored.UTC().Format(time.RFC3339) +
			driver + "before its table was rewound at " + f.at.UTC().Format(time.RFC3339) + " or within " + rewindMargin.String() +
			" after, by the NATS and PostgreSQL servers' clocks" + why +
			" the stream cannot tell whether it stored this progress before or after the rewind, and its driver's clock alone is not trusted" + next + "; " + heldEndedRun
	}
	before := ", but its driver's clock says " + s.clock + " at " + f.posted.UTC().Format(time.RFC3339Nano) +
		", before the rewind at " + f.rewound.UTC().Format(time.RFC3339Nano) + heldClockBehind(s.next)
	switch {
	case f.marked && f.seq != 0: // stored after the mark
		return outcomeBeforeRewind + ": the stream stored " + s.object + " after its table's rewind (at sequence " + seq +
			", after " + markText(f.mark) + ")" + before
	case !f.stored.IsZero():
		return outcomeBeforeRewind + ": the stream stored " + s.object + " at " + f.stored.UTC().Format(time.RFC3339) +
			", after its table's rewind at " + f.at.UTC().Format(time.RFC3339) + " and " + rewindMargin.String() + " more by the NATS and PostgreSQL servers' clocks" + before
	case !f.heard.IsZero() && !f.heard.Before(f.at):
		return outcomeBeforeRewind + ": this service heard " + s.name + " live at " + f.heard.UTC().Format(time.RFC3339Nano) +
			", after its table's rewind" + before
	}
	return outcomeBeforeRewind + ": " + s.name + " " + s.was + " at " + f.posted.UTC().Format(time.RFC3339Nano) +
		" by its driver's clock, before its table was rewound at " + f.rewound.UTC().Format(time.RFC3339Nano) +
		"; if this run started after the rewind, its driver's clock is behind: check it (NTP); " + s.next + " posted after the rewind by that clock moves the verdict"
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
