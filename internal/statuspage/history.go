package statuspage

import (
	"strconv"
	"time"
)

// move is one forward move of a table's verdict: at the time it was seen,
// finalized_until became until. Unix seconds keep it at 16 bytes.
type move struct{ at, until int64 }

// history keeps each table's recent moves, from which the lag at any time
// of the window follows exactly: between two moves the lag grows with the
// clock, at a move it drops by the distance moved. It is bounded twice:
// moves older than the window are dropped (but the last one before it,
// which says where the window starts), and a table keeps at most max
// moves, so memory is at most 16 bytes × max per table. Not safe for
// concurrent use: the page's loop owns it.
type history struct {
	window time.Duration
	max    int
	tables map[string][]move
}

func newHistory(window time.Duration, max int) *history {
	return &history{window: window, max: max, tables: map[string][]move{}}
}

// record adds a move of table seen at at. A move that is not forward (a
// repeated announcement) is ignored unless back is true: an operator's
// rewind, or the verdict as read from the control table, which is the
// truth (a rewind whose announcement was lost).
func (h *history) record(table string, at, until time.Time, now time.Time, back bool) {
	ms := h.tables[table]
	m := move{at: at.Unix(), until: until.Unix()}
	if n := len(ms); n > 0 {
		last := ms[n-1]
		if m.until == last.until || m.until < last.until && !back {
			return
		}
		if m.at < last.at {
			m.at = last.at // seen out of order: keep the timeline monotonic
		}
	}
	ms = append(ms, m)
	h.tables[table] = h.prune(ms, now)
}

// prune drops what the bounds exclude, keeping the newest move before the
// window's start.
func (h *history) prune(ms []move, now time.Time) []move {
	start := now.Add(-h.window).Unix()
	drop := 0
	for drop+1 < len(ms) && ms[drop+1].at <= start {
		drop++
	}
	if over := len(ms) - drop - h.max; over > 0 {
		drop += over
	}
	if drop == 0 {
		return ms
	}
	// Copy so that the dropped prefix's memory is not kept alive.
	return append(make([]move, 0, len(ms)-drop+1), ms[drop:]...)
}

// moves returns table's moves (shared: do not modify).
func (h *history) moves(table string) []move { return h.tables[table] }

// keep drops every table not in live.
func (h *history) keep(live map[string]bool) {
	for t := range h.tables {
		if !live[t] {
			delete(h.tables, t)
		}
	}
}

// Sparkline geometry: an SVG viewBox of sparkW × sparkH, in integers
// (shown at 120 × 24 CSS pixels).
const (
	sparkW = 1200
	sparkH = 240
)

// minSpan is the shortest time a sparkline spans, in seconds.
const minSpan = 10

// spark is a drawn lag timeline.
type spark struct {
	points    string // SVG polyline points in a sparkW × sparkH box
	start     int64  // Unix seconds at the left edge
	low, high int64  // the least and the largest lag drawn, seconds
}

// sparkline draws the lag from the start of what is known (the window's
// start, or the first move seen if later) to now. Between moves the lag
// rises with the clock; at a move it drops. The y axis runs from the least
// lag drawn (bottom) to the largest (top), so that an hour's sawtooth
// shows on a lag of days. It returns the zero spark when there is no move.
func sparkline(ms []move, window time.Duration, now time.Time) spark {
	if len(ms) == 0 {
		return spark{}
	}
	end := now.Unix()
	start := min(max(end-int64(window/time.Second), ms[0].at), end-minSpan)
	type pt struct{ t, lag int64 }
	pts := make([]pt, 0, 2*len(ms)+1)
	for i, m := range ms {
		t := min(max(m.at, start), end)
		if i > 0 {
			pts = append(pts, pt{t, t - ms[i-1].until})
		}
		pts = append(pts, pt{t, t - m.until})
	}
	pts = append(pts, pt{end, end - ms[len(ms)-1].until})
	lo, hi := pts[0].lag, pts[0].lag
	for _, p := range pts {
		lo, hi = min(lo, p.lag), max(hi, p.lag)
	}
	b := make([]byte, 0, len(pts)*10)
	span := end - start
	for i, p := range pts {
		if i > 0 {
			b = append(b, ' ')
		}
		y := int64(sparkH / 2)
		if hi > lo {
			y = sparkH - 10 - (p.lag-lo)*(sparkH-20)/(hi-lo)
		}
		b = strconv.AppendInt(b, (p.t-start)*sparkW/span, 10)
		b = append(b, ',')
		b = strconv.AppendInt(b, y, 10)
	}
	return spark{points: string(b), start: start, low: lo, high: hi}
}

// movesAttr encodes moves for the page's script: "at:until,..." in Unix
// seconds.
func movesAttr(ms []move) string {
	b := make([]byte, 0, len(ms)*22)
	for i, m := range ms {
		if i > 0 {
			b = append(b, ',')
		}
		b = strconv.AppendInt(b, m.at, 10)
		b = append(b, ':')
		b = strconv.AppendInt(b, m.until, 10)
	}
	return string(b)
}
