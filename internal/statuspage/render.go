package statuspage

import (
	"bytes"
	"html"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"time"
)

// The rows are written by hand, not by html/template: at 1,000 tables the
// template's reflection was most of the page's time. Every value from
// outside goes through esc (html.EscapeString: <, >, &, ' and ", so it is
// safe in text and in double-quoted attributes).
var esc = html.EscapeString

// appendTableRow renders one table's row.
func (p *Page) appendTableRowLocked(b []byte, r tableRow, now time.Time) []byte {
	ms := p.moves[r.Table]
	lag := now.Sub(r.Until).Seconds()
	sp := sparkline(ms, p.o.History, now)
	b = append(b, `<tr data-key="`...)
	b = append(b, esc(r.Table)...)
	b = append(b, `" data-until="`...)
	b = strconv.AppendInt(b, r.Until.UnixMilli(), 10)
	b = append(b, `" data-moves="`...)
	b = append(b, movesAttr(ms)...)
	b = append(b, `" class="st-`...)
	b = append(b, r.State...)
	b = append(b, `"><th scope="row" class="name">`...)
	b = append(b, esc(r.Table)...)
	b = append(b, `</th><td class="state"><span class="badge st-`...)
	b = append(b, r.State...)
	b = append(b, `">`...)
	b = append(b, r.State...)
	b = append(b, `</span></td><td class="lag"><span class="lag-text">`...)
	b = append(b, fmtLag(lag)...)
	b = append(b, `</span><svg class="bar" viewBox="0 0 100 8" preserveAspectRatio="none" aria-hidden="true" focusable="false"><rect class="track" width="100" height="8"/><rect class="fill" width="`...)
	b = strconv.AppendFloat(b, lagBar(lag), 'f', -1, 64)
	b = append(b, `" height="8"/></svg></td><td class="until">`...)
	if r.Until.IsZero() {
		// No verdict yet: no machine-readable time (the zero time,
		// 0001-01-01, is not one).
		b = append(b, fmtVerdict(r.Until)...)
	} else {
		b = append(b, `<time datetime="`...)
		b = r.Until.UTC().AppendFormat(b, time.RFC3339Nano)
		b = append(b, `">`...)
		b = append(b, fmtVerdict(r.Until)...)
		b = append(b, `</time>`...)
	}
	b = append(b, `</td><td class="spark"><svg viewBox="0 0 1200 240" preserveAspectRatio="none" role="img" aria-label="`...)
	b = appendSparkLabel(b, sp)
	b = append(b, `"><polyline points="`...)
	b = append(b, sp.points...)
	b = append(b, `"/></svg></td><td class="moved">`...)
	b = append(b, fmtTime(r.UpdatedAt)...)
	if !r.RewoundAt.IsZero() {
		b = append(b, `<br><small>rewound `...)
		b = append(b, fmtTime(r.RewoundAt)...)
		b = append(b, `</small>`...)
	}
	if r.RunID != "" {
		b = append(b, `<br><small>run `...)
		b = append(b, esc(short(r.RunID))...)
		b = append(b, `, batch `...)
		b = strconv.AppendInt(b, r.BatchID, 10)
		b = append(b, `</small>`...)
	}
	b = append(b, `</td><td class="held">`...)
	b = append(b, esc(r.HeldBy)...)
	return append(b, "</td></tr>\n"...)
}

// appendRunRow renders one run's row.
func appendRunRow(b []byte, r runRow) []byte {
	b = append(b, `<tr data-key="`...)
	b = append(b, esc(r.Key)...)
	b = append(b, `" class="st-`...)
	b = append(b, r.State...)
	b = append(b, `"><th scope="row"><code title="`...)
	b = append(b, esc(r.RunID)...)
	b = append(b, `">`...)
	b = append(b, esc(short(r.RunID))...)
	b = append(b, `</code>`...)
	if r.Explicit {
		b = append(b, ` <small>(explicit)</small>`...)
	}
	b = append(b, `</th><td class="name">`...)
	b = append(b, esc(r.Table)...)
	b = append(b, `</td><td><code title="`...)
	b = append(b, esc(r.QueryID)...)
	b = append(b, `">`...)
	b = append(b, esc(short(r.QueryID))...)
	b = append(b, `</code></td><td class="state"><span class="badge st-`...)
	b = append(b, r.State...)
	b = append(b, `">`...)
	b = append(b, r.State...)
	b = append(b, `</span>`...)
	if r.Failures > 0 {
		b = append(b, ` <small>`...)
		b = strconv.AppendInt(b, int64(r.Failures), 10)
		b = append(b, ` in a row</small>`...)
	}
	b = append(b, `</td><td>`...)
	b = append(b, fmtLastEvent(r)...)
	b = append(b, `</td><td>`...)
	if r.Written.IsZero() {
		b = append(b, `nothing yet`...)
	} else {
		b = append(b, fmtTime(r.Written)...)
	}
	b = append(b, `</td><td class="error">`...)
	b = append(b, esc(r.LastError)...)
	if r.Held != "" {
		if r.LastError != "" {
			b = append(b, `<br>`...)
		}
		b = append(b, `<small>no verdict: `...)
		b = append(b, esc(r.Held)...)
		b = append(b, `</small>`...)
	}
	return append(b, "</td></tr>\n"...)
}

func (p *Page) renderTablesLocked(changed []int, order bool, now time.Time) *part {
	if len(changed) == 0 && !order {
		return nil
	}
	pt := &part{Rows: make([]string, 0, len(changed))}
	var b []byte
	for _, i := range changed {
		b = p.appendTableRowLocked(b[:0], p.tables[i], now)
		pt.Rows = append(pt.Rows, string(b))
	}
	if order {
		pt.Order = make([]string, len(p.tables))
		for i, t := range p.tables {
			pt.Order[i] = t.Table
		}
	}
	return pt
}

func (p *Page) renderRunsLocked(changed []int, order bool) *part {
	if len(changed) == 0 && !order {
		return nil
	}
	pt := &part{Rows: make([]string, 0, len(changed))}
	var b []byte
	for _, i := range changed {
		b = appendRunRow(b[:0], p.runs[i])
		pt.Rows = append(pt.Rows, string(b))
	}
	if order {
		pt.Order = make([]string, len(p.runs))
		for i, r := range p.runs {
			pt.Order[i] = r.Key
		}
	}
	return pt
}

// pageData is what the page template prints.
type pageData struct {
	Now            time.Time
	Version        string
	Banner         string
	Tables         int
	Runs           int
	History        string
	HistorySeconds int64
	HistoryN       int
	StaleAfter     string
	States         []stateDoc
	TableStates    []stateDoc
}

type stateDoc struct{ State, Means string }

var tableStates = []stateDoc{
	{TableMoving, "a running run feeds it: the open period closes when its data passes the period's end"},
	{TableIdle, "its run has no new data"},
	{TableStale, "its run is silent"},
	{TableHeld, "its run's newest progress gives no verdict: a guard holds it where it is (the text says which)"},
	{TableFailing, "its run's advances fail"},
	{TableUntracked, "no live run feeds it: nothing moves it"},
	{TableMarked, "its history may have changed under the verdict (a reset or a lost event): an operator must look, then rewind or acknowledge"},
}

var runStates = []stateDoc{
	{RunRunning, "events arrive, with new data"},
	{RunIdle, "events arrive, without new data"},
	{RunStale, ""}, // filled with stale_after
	{RunHeld, "its newest progress gave no verdict: a guard (no usable time, a time in the future, a watermark nothing bounds, ...) holds it"},
	{RunFailing, "its last advance failed after the retries; the next event retries it"},
	{RunTerminated, "the query ended; its last progress is applied"},
	{RunStopped, "its tracker stopped without a termination (superseded, expired or shutdown)"},
	{RunRetired, "events arrive, but its query is a retired feeder of the table: its progress moves nothing (finalizer feeders unretire takes it back)"},
}

// contentSecurity allows the page its own stylesheet, script and stream,
// and nothing else.
const contentSecurity = "default-src 'none'; style-src 'self'; script-src 'self'; connect-src 'self'; img-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"

func (p *Page) servePage(w http.ResponseWriter, r *http.Request) {
	p.fresh(r.Context())
	now := p.o.Now()
	p.mu.RLock()
	d := pageData{
		Now: now, Version: p.epoch + "-" + strconv.FormatUint(p.ver, 10), Banner: p.banner,
		Tables: len(p.tables), Runs: len(p.runs),
		History: fmtDuration(p.o.History), HistorySeconds: int64(p.o.History / time.Second), HistoryN: p.o.HistoryMoves, StaleAfter: fmtDuration(p.o.StaleAfter),
	}
	b := make([]byte, 0, 1024*(len(p.tables)+len(p.runs)))
	for _, t := range p.tables {
		b = p.appendTableRowLocked(b, t, now)
	}
	n := len(b)
	for _, r := range p.runs {
		b = appendRunRow(b, r)
	}
	p.mu.RUnlock()

	d.TableStates = tableStates
	d.States = append([]stateDoc(nil), runStates...)
	for i := range d.States {
		if d.States[i].State == RunStale {
			d.States[i].Means = "no event for longer than tracking.stale_after (" + d.StaleAfter + ")"
		}
	}
	// The rows go out as rendered, between the template's parts.
	var head, mid, foot bytes.Buffer
	for _, t := range []struct {
		name string
		buf  *bytes.Buffer
	}{{"head", &head}, {"mid", &mid}, {"foot", &foot}} {
		if err := pageTmpl.ExecuteTemplate(t.buf, t.name, d); err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
	}
	h := w.Header()
	h.Set("Content-Type", "text/html; charset=utf-8")
	h.Set("Cache-Control", "no-store")
	h.Set("Content-Security-Policy", contentSecurity)
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Content-Length", strconv.Itoa(head.Len()+len(b)+mid.Len()+foot.Len()))
	for _, part := range [][]byte{head.Bytes(), b[:n], mid.Bytes(), b[n:], foot.Bytes()} {
		if _, err := w.Write(part); err != nil {
			return
		}
	}
}

// fmtDuration prints 6h, 15m, 90s without the zero units of
// time.Duration.String.
func fmtDuration(d time.Duration) string {
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}

func sortRuns(rs []runRow) {
	sort.Slice(rs, func(i, j int) bool {
		if rs[i].Table != rs[j].Table {
			return rs[i].Table < rs[j].Table
		}
		return rs[i].RunID < rs[j].RunID
	})
}

// appendSparkLabel says in words what the timeline draws. The page's
// script says it the same way.
func appendSparkLabel(b []byte, sp spark) []byte {
	if sp.points == "" {
		return append(b, "no move seen yet"...)
	}
	b = append(b, "lag from "...)
	b = append(b, fmtTime(time.Unix(sp.start, 0))...)
	b = append(b, " to now: between "...)
	b = append(b, fmtLag(float64(sp.low))...)
	b = append(b, " and "...)
	return append(b, fmtLag(float64(sp.high))...)
}
