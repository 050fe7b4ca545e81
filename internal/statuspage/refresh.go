package statuspage

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"time"

	"go.uber.org/zap"

	"github.com/finalizer-dev/finalizer/control"
	"github.com/finalizer-dev/finalizer/finalizer"
)

// readTimeout bounds one read of the verdicts.
const readTimeout = 5 * time.Second

// refresh reads the runs, and the verdicts when read is true, rebuilds the
// rows, and sends what changed to every browser. Only the loop (and New,
// before the loop starts) calls it.
func (p *Page) refresh(read bool) {
	now := p.o.Now()
	start := time.Now()
	defer func() {
		p.cost = time.Since(start)
		if read {
			p.readCost = p.cost
		}
	}()
	if read {
		p.lastRead = start
		ctx, cancel := context.WithTimeout(p.ctx, readTimeout)
		vs, err := p.o.Verdicts.List(ctx)
		var fs []control.Feeder
		if err == nil {
			fs, err = p.o.Verdicts.Feeders(ctx, "")
		}
		cancel()
		switch {
		case err != nil && p.verdictsErr == nil:
			p.log.Warn("status page: cannot read the verdicts; showing the last ones read", zap.Error(err))
		case err == nil && p.verdictsErr != nil:
			p.log.Info("status page: verdicts readable again")
		}
		p.verdictsErr = err
		if err == nil {
			p.lost = false
			p.verdicts = vs
			p.feeders = make(map[string][]control.Feeder)
			for _, f := range fs {
				p.feeders[f.Table] = append(p.feeders[f.Table], f)
			}
			live := make(map[string]bool, len(vs))
			for _, v := range vs {
				live[v.Table] = true
				// A move whose announcement was lost (a reconnect) is dated
				// by the row; record ignores the ones already known.
				p.hist.record(v.Table, v.UpdatedAt, v.FinalizedUntil, now, true)
			}
			p.hist.keep(live)
		}
	}

	statuses := p.o.Runs.Status()
	runs := make([]runRow, 0, len(statuses))
	for _, st := range statuses {
		runs = append(runs, newRunRow(st))
	}
	retireRuns(runs, p.feeders)
	byTable := make(map[string][]runRow)
	for _, r := range runs {
		byTable[r.Table] = append(byTable[r.Table], r)
	}
	sortRuns(runs)
	var waits map[string][]finalizer.JoinWait // by table; the first holds it
	if jw, ok := p.o.Runs.(joinWaiter); ok {
		waits = jw.JoinWaitsByTable()
	}
	tables := make([]tableRow, 0, len(p.verdicts))
	for _, v := range p.verdicts {
		state, why := holdsBack(v, byTable[v.Table], p.feeders[v.Table])
		if ws := waits[v.Table]; len(ws) > 0 && v.Mark == "" {
			// Its trackers do not advance it before the new feeder
			// joined: that, not its runs, holds it back.
			state, why = TableHeld, ws[0].HeldBy()
		}
		ms := p.hist.moves(v.Table)
		r := tableRow{Table: v.Table, Until: v.FinalizedUntil, UpdatedAt: v.UpdatedAt, RunID: v.RunID, BatchID: v.BatchID,
			State: state, HeldBy: why, RewoundAt: v.RewoundAt, Moves: len(ms)}
		if len(ms) > 0 {
			r.First, r.Last = ms[0], ms[len(ms)-1]
		}
		tables = append(tables, r)
	}
	if len(waits) > 0 {
		// A table held by a new feeder's join before its first verdict
		// has no row to list it: shown held, with the join it waits for.
		listed := make(map[string]bool, len(p.verdicts))
		for _, v := range p.verdicts {
			listed[v.Table] = true
		}
		// After the verdicts' rows (in the control table's order), by
		// name: the same order at every refresh.
		var extra []string
		for table, ws := range waits {
			if !listed[table] && len(ws) > 0 {
				extra = append(extra, table)
			}
		}
		slices.Sort(extra)
		for _, table := range extra {
			tables = append(tables, tableRow{Table: table, State: TableHeld, HeldBy: waits[table][0].HeldBy()})
		}
	}
	banner := ""
	if p.verdictsErr != nil {
		banner = fmt.Sprintf("The verdicts could not be read (%v); the ones shown are the last read.", p.verdictsErr)
	}

	p.mu.Lock()
	defer p.mu.Unlock()
	p.builtAt = time.Now()
	ver := p.ver + 1
	tablesChanged, tablesOrder := diff(p.tables, tables, ver, func(r *tableRow) (string, *uint64) { return r.Table, &r.ver })
	runsChanged, runsOrder := diff(p.runs, runs, ver, func(r *runRow) (string, *uint64) { return r.Key, &r.ver })
	if len(tablesChanged) == 0 && !tablesOrder && len(runsChanged) == 0 && !runsOrder && banner == p.banner {
		return
	}
	p.ver, p.tables, p.runs, p.banner = ver, tables, runs, banner
	for _, t := range tables {
		p.moves[t.Table] = p.hist.moves(t.Table)
	}
	if tablesOrder {
		for t := range p.moves {
			if _, ok := p.hist.tables[t]; !ok {
				delete(p.moves, t)
			}
		}
	}
	if len(p.streams) == 0 {
		return
	}
	u := update{Now: now.UnixMilli(), Banner: banner}
	u.Tables = p.renderTablesLocked(tablesChanged, tablesOrder, now)
	u.Runs = p.renderRunsLocked(runsChanged, runsOrder)
	msg := p.eventLocked(u)
	for st := range p.streams {
		select {
		case st.ch <- msg:
		default:
			// Too far behind: it reconnects and catches up from its last id.
			p.dropLocked(st)
		}
	}
}

// reconcile reads the verdicts for the timeline alone, while nobody
// watches, after announcements may have been lost: a move found here is
// dated by its row, as in refresh. The model is left alone (the next
// request rebuilds it). Only the loop calls it.
func (p *Page) reconcile() {
	p.lastRecon = time.Now()
	ctx, cancel := context.WithTimeout(p.ctx, readTimeout)
	vs, err := p.o.Verdicts.List(ctx)
	cancel()
	if err != nil {
		// The page is not watched; the next viewer's read says it.
		p.log.Debug("status page: cannot read the verdicts for the timeline", zap.Error(err))
		return
	}
	p.lost = false
	now := p.o.Now()
	live := make(map[string]bool, len(vs))
	for _, v := range vs {
		live[v.Table] = true
		p.hist.record(v.Table, v.UpdatedAt, v.FinalizedUntil, now, true)
	}
	p.hist.keep(live)
}

// diff compares the new rows with the old ones by key. It stamps changed
// and new rows with ver (the others keep theirs) and returns the indexes
// of the changed or new rows, and whether the set or order of keys changed.
func diff[R comparable](old, cur []R, ver uint64, key func(*R) (string, *uint64)) (changed []int, order bool) {
	prev := make(map[string]R, len(old))
	for _, r := range old {
		k, _ := key(&r)
		prev[k] = r
	}
	order = len(old) != len(cur)
	for i := range cur {
		k, v := key(&cur[i])
		if !order {
			ok, _ := key(&old[i])
			order = ok != k
		}
		o, ok := prev[k]
		if ok {
			_, ov := key(&o)
			*v = *ov
			if o == cur[i] {
				continue
			}
		}
		*v = ver
		changed = append(changed, i)
	}
	return changed, order
}

// update is one server-sent event: the rows that changed, rendered, and
// the keys of all rows in order when rows came or went.
type update struct {
	Now    int64  `json:"now"` // the server's clock, Unix ms
	Banner string `json:"banner"`
	Tables *part  `json:"tables,omitempty"`
	Runs   *part  `json:"runs,omitempty"`
}

type part struct {
	Rows  []string `json:"rows"`
	Order []string `json:"order,omitempty"`
}

// eventLocked encodes u as an event whose id is the page's version.
func (p *Page) eventLocked(u update) []byte {
	data, _ := json.Marshal(u)
	return fmt.Appendf(nil, "id: %s-%d\nevent: update\ndata: %s\n\n", p.epoch, p.ver, data)
}
