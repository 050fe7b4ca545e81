package finalizer

import (
	"sync"
	"time"

	"go.uber.org/zap"

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
}

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
	if ok, suppressed := w.every.Allow("stream_state"); ok {
		r.log.Warn("could not read the event stream's state after hearing rewinds, still retrying; the tables' failures after their first are logged at debug level",
			zap.Int("tables_waiting", waiting), zap.Int("suppressed", suppressed), zap.Duration("every", markWaitEvery), zap.Error(err))
	}
}

// markReadEnded forgets table's failed read for its rewind at, once its
// reads end (answered, the table rewound again, the registry closing):
// the table no longer waits, and a later failure is a first one again.
func (r *Registry) markReadEnded(table string, at time.Time) {
	w := &r.markWaits
	w.mu.Lock()
	if prev, ok := w.failing[table]; ok && prev.Equal(at) {
		delete(w.failing, table)
	}
	w.mu.Unlock()
}
