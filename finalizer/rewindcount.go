package finalizer

import (
	"sync"
	"time"
)

// rewindCount is what finalizer_rewinds_seen_total counted: per table,
// the rewound_at of the last rewind it counted.
type rewindCount struct {
	mu   sync.Mutex
	last map[string]time.Time
}

// countRewind counts table's rewind stored as at in
// finalizer_rewinds_seen_total unless it was counted already, and
// reports whether this call counted it. Two trackers whose advances the
// control table refused at once both learn the rewind from their refusal
// (learnRewind: both read it as not known yet before either notes it),
// and counted it twice; a rewind is one per (table, rewound_at). A rewind
// whose rewound_at is not known (zero: a notification of an earlier
// release) is counted each time it is heard.
func (r *Registry) countRewind(table string, at time.Time) bool {
	if !at.IsZero() {
		c := &r.counted
		c.mu.Lock()
		last, ok := c.last[table]
		if ok && last.Equal(at) {
			c.mu.Unlock()
			return false
		}
		if c.last == nil {
			c.last = make(map[string]time.Time)
		}
		c.last[table] = at
		c.mu.Unlock()
	}
	r.cfg.Metrics.Rewinds.Inc()
	return true
}
