package finalizer

import (
	"sync"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/finalizer-dev/finalizer/internal/lograte"
)

// markWaitEvery is how often, at most, one line says how many rewound
// tables still wait for the event stream's state (markReadFailed).
const markWaitEvery = 30 * time.Second

// markWaits is what the registry logs of markStream's failed reads: the
// tables whose read failed and is retried (by the rewind it is for: one
// read per table at a time), and the limiter of the one line that
// counts them.
type markWaits struct {
	mu      sync.Mutex
	failing map[string]time.Time
	every   *lograte.Limiter
	// otherStream is, by table, the rewind whose recorded position was
	// said to be of another stream (sayOtherStream).
	otherStream map[string]time.Time
	// lateNamed and lateCounted are how many tables' reads answered late
	// since no table last waited (markReadLate): the first markLateNamed
	// each warned of, the others counted, in one line once no table
	// waits (markReadEnded).
	lateNamed, lateCounted int
}

// markLateNamed is how many tables' late reads of the event stream's
// state (markReadLate) warn each, naming the table, before the others
// of the same outage are only counted.
const markLateNamed = 3

// sayOtherStream reports whether the warning that table's position
// recorded with its rewind at is of another stream is to be logged:
// once per table and rewind (markRecorded runs at every read of the
// rewinds).
func (w *markWaits) sayOtherStream(table string, at time.Time) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	if prev, ok := w.otherStream[table]; ok && prev.Equal(at) {
		return false
	}
	if w.otherStream == nil {
		w.otherStream = make(map[string]time.Time)
	}
	w.otherStream[table] = at
	return true
}

// markReadFailed logs a failed read of the event stream's state for
// table's rewind at (markStream; attempt is the read's, in the wait
// before the next). With NATS down, every rewound table's read fails
// and is retried every 30 s: a line per table and try was 1,000 lines
// every 30 s with 1,000 tables rewound. The first failure of a table's
// read is a warning of its own, the table named; the later ones are at
// debug level, and one warning, at most every markWaitEvery, says how
// many tables wait (tables_waiting) and how many of those debug lines
// went out since the last one (suppressed).
func (r *Registry) markReadFailed(table string, at time.Time, attempt int, in time.Duration, err error) {
	w := &r.markWaits
	w.mu.Lock()
	if w.failing == nil {
		w.failing = make(map[string]time.Time)
	}
	prev, ok := w.failing[table]
	first := !ok || !prev.Equal(at)
	w.failing[table] = at
	waiting := len(w.failing)
	w.mu.Unlock()
	line := "could not read the event stream's state after hearing a rewind, retrying; until it answers, a progress read from the stream is judged against the rewind with a margin across the servers' clocks (one stored within " + rewindMargin.String() + " after it waits for its run's next progress)"
	fields := []zap.Field{zap.String("table", table), zap.Time("rewind", at), zap.Int("attempt", attempt), zap.Duration("in", in), zap.Error(err)}
	if first {
		r.log.Warn(line, fields...)
		return
	}
	r.log.Debug(line, fields...)
	if ok, suppressed := w.every.Allow(zapcore.WarnLevel, "stream_state"); ok {
		r.log.Warn("could not read the event stream's state after hearing rewinds, still retrying; the tables' failures after their first are logged at debug level",
			zap.Int("tables_waiting", waiting), zap.Int("suppressed", suppressed), zap.Duration("every", markWaitEvery), zap.Error(err))
	}
}

// markReadLate logs that the event stream's state for table's rewind at
// was read only after failed reads (markStream): NATS came back after an
// outage, and a progress the stream stored up to last is held. When NATS
// comes back, every rewound table's read answers at once: a warning per
// table was 1,000 lines for 1,000 tables rewound. The first
// markLateNamed tables since no table last waited warn each, the table
// named; the others are at debug level, and one warning counts them once
// no table waits any more (markReadEnded).
func (r *Registry) markReadLate(table string, at time.Time, last uint64, attempts int) {
	w := &r.markWaits
	w.mu.Lock()
	named := w.lateNamed < markLateNamed
	if named {
		w.lateNamed++
	} else {
		w.lateCounted++
	}
	w.mu.Unlock()
	line := "the event stream's state when the rewind was heard could be read only late (its first reads failed): a progress it stored up to this sequence is held as before the rewind, even one stored after it, until its run's next progress posted after the rewind"
	fields := []zap.Field{zap.String("table", table), zap.Time("rewind", at), zap.Uint64("stream_last_seq", last), zap.Int("attempts", attempts),
		zap.Duration("after", r.cfg.Clock.Now().Sub(at))}
	if named {
		r.log.Warn(line, fields...)
		return
	}
	r.log.Debug(line, fields...)
}

// markReadEnded forgets table's failed read for its rewind at, once its
// reads end (answered, the table rewound again, the registry closing):
// the table no longer waits, and a later failure is a first one again.
// Once no table waits, the late reads markReadLate only counted are
// said in one warning, and the next outage's first ones are named again.
func (r *Registry) markReadEnded(table string, at time.Time) {
	w := &r.markWaits
	w.mu.Lock()
	if prev, ok := w.failing[table]; ok && prev.Equal(at) {
		delete(w.failing, table)
	}
	counted := 0
	if len(w.failing) == 0 {
		counted = w.lateCounted
		w.lateNamed, w.lateCounted = 0, 0
	}
	w.mu.Unlock()
	if counted > 0 {
		r.log.Warn("the event stream's state after their rewinds could be read only late for more tables (their first reads failed; each logged at debug level): a progress it stored up to the sequence then read is held as before the table's rewind, even one stored after it, until its run's next progress posted after the rewind",
			zap.Int("tables", counted), zap.Int("named_before", markLateNamed))
	}
}
