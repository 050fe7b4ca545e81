package control

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"
)

// newOutbox opens the Outbox of s's database, closed at cleanup.
func newOutbox(t *testing.T, url string) *Outbox {
	t.Helper()
	ob, err := OpenOutbox(context.Background(), url, OutboxOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(ob.Close)
	return ob
}

// outboxRows returns the (table, from, to) of the outbox's rows in order.
func outboxRows(t *testing.T, url string) []string {
	t.Helper()
	rows, err := connect(t, url).Query(context.Background(),
		`SELECT table_name, coalesce(to_char(from_until AT TIME ZONE 'UTC', 'HH24:MI'), '-'), to_char(to_until AT TIME ZONE 'UTC', 'HH24:MI'), coalesce(run_id, '') FROM public.table_finalization_outbox ORDER BY id`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var tb, from, to, run string
		if err := rows.Scan(&tb, &from, &to, &run); err != nil {
			t.Fatal(err)
		}
		out = append(out, fmt.Sprintf("%s %s>%s %s", tb, from, to, run))
	}
	return out
}

// TestOutboxTrigger checks that the trigger writes one outbox row per move
// of a table with actions, in the transaction of the move, on every path
// that moves a verdict: a single advance, the group commit (AdvanceBatch),
// a rewind; and none for a table without actions or a no-op.
func TestOutboxTrigger(t *testing.T) {
	ctx := context.Background()
	s, url := newStore(t, Options{})
	ob := newOutbox(t, url)
	// A table moved before its rule had actions is marked by
	// SetActionTables.
	if _, _, err := s.Advance(ctx, Advance{Table: "bronze.early", FinalizedUntil: at(10, 0), RunID: "r0"}); err != nil {
		t.Fatal(err)
	}
	if err := ob.SetActionTables(ctx, []string{TablePattern("bronze.{name}"), TablePattern("gold_x")}); err != nil {
		t.Fatal(err)
	}
	adv := func(table string, hh int, run string) {
		t.Helper()
		if _, _, err := s.Advance(ctx, Advance{Table: table, FinalizedUntil: at(hh, 0), RunID: run, BatchID: int64(hh)}); err != nil {
			t.Fatal(err)
		}
	}
	adv("bronze.orders", 12, "r1") // first verdict: inserted
	adv("bronze.orders", 15, "r1") // a jump
	adv("bronze.orders", 15, "r1") // a no-op
	adv("bronze.orders", 14, "r1") // behind: a no-op
	adv("silver.orders", 12, "r2") // no actions
	adv("silver.orders", 13, "r2")
	adv("goldAx", 12, "r3") // '_' is literal in the pattern, not LIKE's any-character
	adv("bronze.early", 11, "r0")
	// The group commit path.
	res, err := s.AdvanceBatch(ctx, []Advance{
		{Table: "bronze.orders", FinalizedUntil: at(16, 0), RunID: "r1"},
		{Table: "bronze.users", FinalizedUntil: at(9, 0), RunID: "r4"},
		{Table: "silver.orders", FinalizedUntil: at(16, 0), RunID: "r2"},
		{Table: "gold_x", FinalizedUntil: at(8, 0), RunID: "r5"},
	})
	if err != nil {
		t.Fatal(err)
	}
	for i, r := range res {
		if r.Err != nil || !r.Moved {
			t.Fatalf("batch %d: %+v", i, r)
		}
	}
	if _, err := s.Rewind(ctx, Rewind{Table: "bronze.orders", To: at(13, 0), Reason: "reset", By: "test"}); err != nil {
		t.Fatal(err)
	}
	got := outboxRows(t, url)
	want := []string{
		"bronze.orders ->12:00 r1",
		"bronze.orders 12:00>15:00 r1",
		"bronze.early 10:00>11:00 r0",
		"bronze.orders 15:00>16:00 r1",
		"bronze.users ->09:00 r4",
		"gold_x ->08:00 r5",
		"bronze.orders 16:00>13:00 ",
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("outbox:\n got %q\nwant %q", got, want)
	}
	// Removing the actions unmarks the tables: their moves write nothing.
	if err := ob.SetActionTables(ctx, nil); err != nil {
		t.Fatal(err)
	}
	adv("bronze.orders", 18, "r1")
	if got2 := outboxRows(t, url); len(got2) != len(want) {
		t.Errorf("a move after the actions were removed wrote to the outbox: %q", got2[len(want):])
	}
}

// TestOutboxExpandDeliver runs the outbox's cycle: moves expanded into
// events (in order, rewinds counted), delivered head first per table,
// a failure retried before the table's next event, nothing twice.
func TestOutboxExpandDeliver(t *testing.T) {
	ctx := context.Background()
	s, url := newStore(t, Options{})
	ob := newOutbox(t, url)
	if err := ob.SetActionTables(ctx, []string{"t%"}); err != nil {
		t.Fatal(err)
	}
	for _, hh := range []int{12, 15} {
		if _, _, err := s.Advance(ctx, Advance{Table: "t1", FinalizedUntil: at(hh, 0)}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := s.Rewind(ctx, Rewind{Table: "t1", To: at(13, 0), Reason: "r", By: "b"}); err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.Advance(ctx, Advance{Table: "t1", FinalizedUntil: at(15, 0)}); err != nil {
		t.Fatal(err)
	}
	var moves []Move
	hourly := func(m Move) ([]Send, error) {
		moves = append(moves, m)
		from := m.From
		if from.IsZero() {
			from = m.To.Add(-time.Hour)
		}
		var out []Send
		for p := from; p.Before(m.To); p = p.Add(time.Hour) {
			id := fmt.Sprintf("%s@%s#%d", m.Table, p.Format("15"), m.Generation)
			out = append(out, Send{Action: "a", EventID: id, Table: m.Table, PeriodStart: p, PeriodEnd: p.Add(time.Hour), Payload: []byte(id), MovedAt: m.MovedAt})
		}
		return out, nil
	}
	res, err := ob.Expand(ctx, 100, nil, hourly)
	if err != nil {
		t.Fatal(err)
	}
	if res.Moves != 4 || res.Rewinds != 1 || res.Queued["a"] != 6 {
		t.Fatalf("expand: %+v", res)
	}
	if moves[2].Generation != 1 || !moves[2].HighWater.Equal(at(15, 0)) || moves[1].Generation != 0 {
		t.Errorf("generations: %+v", moves)
	}
	// Expanded once: the outbox is empty.
	if res, err := ob.Expand(ctx, 100, nil, hourly); err != nil || res.Moves != 0 {
		t.Fatalf("second expand: %+v %v", res, err)
	}
	// The rewind superseded 13:00 and 14:00 of generation 0 (pending,
	// no longer final), and generation 1 announces them again.
	var delivered []string
	fail := 1
	for range 10 {
		_, err := ob.Deliver(ctx, "a", 10, func(_ context.Context, ss []Send) []Outcome {
			out := make([]Outcome, len(ss))
			for i, s := range ss {
				if fail > 0 && s.EventID == "t1@13#1" {
					fail--
					out[i] = Outcome{Err: errors.New("boom"), RetryAt: time.Now()}
					continue
				}
				delivered = append(delivered, s.EventID)
			}
			return out
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	want := []string{"t1@11#0", "t1@12#0", "t1@13#1", "t1@14#1"}
	if fmt.Sprint(delivered) != fmt.Sprint(want) {
		t.Errorf("delivered %q, want %q", delivered, want)
	}
	sends, err := ob.Sends(ctx, "t1")
	if err != nil {
		t.Fatal(err)
	}
	states := map[string]string{}
	for _, s := range sends {
		states[s.EventID] = fmt.Sprintf("%s/%d", s.State, s.Attempts)
	}
	if states["t1@13#0"] != "superseded/0" || states["t1@14#0"] != "superseded/0" || states["t1@13#1"] != "delivered/2" {
		t.Errorf("states: %v", states)
	}
}

// TestOutboxDeliverOncePerReplica claims one table's events from two
// Outboxes (two replicas) at once: each event is delivered once, in order.
func TestOutboxDeliverOncePerReplica(t *testing.T) {
	ctx := context.Background()
	_, url := newStore(t, Options{})
	a, b := newOutbox(t, url), newOutbox(t, url)
	var sends []Send
	for i := range 50 {
		for _, tb := range []string{"x", "y", "z"} {
			id := fmt.Sprintf("%s-%02d", tb, i)
			sends = append(sends, Send{Action: "k", EventID: id, Table: tb, PeriodStart: at(0, i), PeriodEnd: at(0, i+1), Payload: []byte(id), MovedAt: time.Now()})
		}
	}
	if _, err := connect(t, url).Exec(ctx, `INSERT INTO public.table_finalization_outbox (table_name, to_until) VALUES ('x', now())`); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Expand(ctx, 10, nil, func(Move) ([]Send, error) { return sends, nil }); err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	got := map[string][]string{}
	var wg sync.WaitGroup
	for _, ob := range []*Outbox{a, b, a, b} {
		wg.Go(func() {
			for range 200 {
				_, err := ob.Deliver(ctx, "k", 2, func(_ context.Context, ss []Send) []Outcome {
					mu.Lock()
					for _, s := range ss {
						got[s.Table] = append(got[s.Table], s.EventID)
					}
					mu.Unlock()
					time.Sleep(time.Millisecond)
					return make([]Outcome, len(ss))
				})
				if err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	for _, tb := range []string{"x", "y", "z"} {
		if len(got[tb]) != 50 {
			t.Errorf("%s: %d deliveries, want 50: %v", tb, len(got[tb]), got[tb])
		}
		for i, id := range got[tb] {
			if want := fmt.Sprintf("%s-%02d", tb, i); id != want {
				t.Errorf("%s: delivery %d is %s, want %s (out of order or twice)", tb, i, id, want)
				break
			}
		}
	}
}

// TestOutboxQueueBound: an action's queue is bounded; events beyond
// maxPending pending ones are dead-lettered at once ("queue full") and
// counted, and another action's queue is not affected.
func TestOutboxQueueBound(t *testing.T) {
	ctx := context.Background()
	_, url := newStore(t, Options{})
	ob := newOutbox(t, url)
	if _, err := connect(t, url).Exec(ctx, `INSERT INTO public.table_finalization_outbox (table_name, to_until) VALUES ('t', now())`); err != nil {
		t.Fatal(err)
	}
	var sends []Send
	for i := range 5 {
		for _, a := range []string{"small", "big"} {
			id := fmt.Sprintf("%s-%d", a, i)
			sends = append(sends, Send{Action: a, EventID: id, Table: "t", PeriodStart: at(i, 0), PeriodEnd: at(i+1, 0), Payload: []byte(id), MovedAt: time.Now()})
		}
	}
	res, err := ob.Expand(ctx, 10, map[string]int{"small": 3, "big": 100}, func(Move) ([]Send, error) { return sends, nil })
	if err != nil {
		t.Fatal(err)
	}
	if res.Queued["small"] != 3 || res.Dead["small"] != 2 || res.Queued["big"] != 5 || res.Dead["big"] != 0 {
		t.Fatalf("%+v", res)
	}
	got, err := ob.Sends(ctx, "t")
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range got {
		full := s.State == SendDead && strings.HasPrefix(s.LastError, "queue full")
		if want := s.EventID == "small-3" || s.EventID == "small-4"; full != want {
			t.Errorf("%s: %s %q", s.EventID, s.State, s.LastError)
		}
	}
	totals, err := ob.Totals(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if totals["small"].Pending != 3 || totals["small"].Dead != 2 || totals["big"].Pending != 5 {
		t.Errorf("totals %+v", totals)
	}
}
