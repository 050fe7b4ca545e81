package control

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"sort"
	"sync"
	"testing"
	"time"
)

// TestAdvanceBatch applies one batch that inserts, moves, meets a row
// already ahead, repeats a table and holds an invalid entry: each result is
// what Advance would have returned, and only moved rows are announced.
func TestAdvanceBatch(t *testing.T) {
	s, url := newStore(t, Options{})
	ctx := context.Background()
	lc := connect(t, url)
	if _, err := lc.Exec(ctx, "LISTEN "+NotifyChannel); err != nil {
		t.Fatal(err)
	}
	for table, until := range map[string]time.Time{"t.behind": at(12, 0), "t.ahead": at(16, 0)} {
		if _, _, err := s.Advance(ctx, Advance{Table: table, FinalizedUntil: until}); err != nil {
			t.Fatal(err)
		}
	}
	for range 2 { // the two setup moves
		wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		_, err := lc.WaitForNotification(wctx)
		cancel()
		if err != nil {
			t.Fatal(err)
		}
	}

	offset := json.RawMessage(`{"commit_ts": "2026-09-28T14:05:00.000"}`)
	batch := []Advance{
		0: {Table: "t.new", FinalizedUntil: at(14, 0), EndTime: at(14, 5), EndOffset: offset, QueryID: "q", RunID: "r", BatchID: 7},
		1: {Table: "t.behind", FinalizedUntil: at(13, 0), RunID: "r1", BatchID: 1},
		2: {Table: "t.ahead", FinalizedUntil: at(15, 0)},
		3: {Table: "t.behind", FinalizedUntil: at(14, 0), RunID: "r2", BatchID: 2}, // the higher of the two moves
		4: {Table: "t.bad", FinalizedUntil: at(14, 0), EndOffset: json.RawMessage(`{nope`)},
		5: {Table: "", FinalizedUntil: at(14, 0)},
	}
	res, err := s.AdvanceBatch(ctx, batch)
	if err != nil {
		t.Fatal(err)
	}
	if len(res) != len(batch) {
		t.Fatalf("%d results for %d advances", len(res), len(batch))
	}
	checkVerdict(t, res[0].Verdict, Verdict{Table: "t.new", FinalizedUntil: at(14, 0), EndTime: at(14, 5), QueryID: "q", RunID: "r", BatchID: 7}, offset)
	want := []struct {
		moved bool
		until time.Time
		run   string
	}{
		0: {true, at(14, 0), "r"},
		1: {false, at(14, 0), "r2"},
		2: {false, at(16, 0), ""},
		3: {true, at(14, 0), "r2"},
	}
	for i, w := range want {
		r := res[i]
		if r.Err != nil || r.Moved != w.moved || !r.Verdict.FinalizedUntil.Equal(w.until) || r.Verdict.RunID != w.run {
			t.Errorf("result %d = moved %v, %v, run %q, err %v; want moved %v, %v, run %q",
				i, r.Moved, r.Verdict.FinalizedUntil, r.Verdict.RunID, r.Err, w.moved, w.until, w.run)
		}
	}
	for _, i := range []int{4, 5} {
		if !errors.Is(res[i].Err, ErrInvalidAdvance) {
			t.Errorf("result %d: err = %v, want ErrInvalidAdvance", i, res[i].Err)
		}
	}
	if _, err := s.Get(ctx, "t.bad"); !errors.Is(err, ErrNotFound) {
		t.Errorf("the invalid entry was written: %v", err)
	}

	// Exactly the two moves are announced, then the marker.
	if _, err := s.pool.Exec(ctx, "SELECT pg_notify($1, 'marker')", NotifyChannel); err != nil {
		t.Fatal(err)
	}
	var got []string
	for {
		wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		n, err := lc.WaitForNotification(wctx)
		cancel()
		if err != nil {
			t.Fatal(err)
		}
		if n.Payload == "marker" {
			break
		}
		got = append(got, n.Payload)
	}
	sort.Strings(got)
	wantPayloads := []string{
		`{"table":"t.behind","finalized_until":"2026-09-28T14:00:00Z","control_table":"public.table_finalization"}`,
		`{"table":"t.new","finalized_until":"2026-09-28T14:00:00Z","control_table":"public.table_finalization"}`,
	}
	if fmt.Sprint(got) != fmt.Sprint(wantPayloads) {
		t.Errorf("notifications = %v, want %v", got, wantPayloads)
	}

	// Empty and all-invalid batches touch nothing.
	if res, err := s.AdvanceBatch(ctx, nil); err != nil || len(res) != 0 {
		t.Errorf("empty batch = %v, %v", res, err)
	}
}

// TestConcurrentAdvanceBatches has writers apply overlapping batches in
// different orders, as group commits of several committers would: no
// deadlock, no (table, hour) moves twice, and every table ends at the last
// hour, moved there once.
func TestConcurrentAdvanceBatches(t *testing.T) {
	s, _ := newStore(t, Options{MaxConns: 8})
	ctx := context.Background()
	const writers, tables, hours = 8, 40, 5
	type key struct {
		table string
		until time.Time
	}
	var (
		mu    sync.Mutex
		moves = map[key]int{}
		wg    sync.WaitGroup
		errs  = make(chan error, writers)
	)
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rnd := rand.New(rand.NewPCG(uint64(w), 1))
			for h := range hours {
				batch := make([]Advance, tables)
				for i, j := range rnd.Perm(tables) {
					batch[i] = Advance{Table: fmt.Sprintf("gold.t%02d", j), FinalizedUntil: at(h, 0)}
				}
				res, err := s.AdvanceBatch(ctx, batch)
				if err != nil {
					errs <- err
					return
				}
				for i, r := range res {
					if r.Err != nil || r.Verdict.FinalizedUntil.Before(at(h, 0)) || r.Verdict.Table != batch[i].Table {
						errs <- fmt.Errorf("advance %s to %v returned %+v", batch[i].Table, at(h, 0), r)
						return
					}
					if r.Moved {
						mu.Lock()
						moves[key{batch[i].Table, at(h, 0)}]++
						mu.Unlock()
					}
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	vs, err := s.List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(vs) != tables {
		t.Fatalf("%d verdicts, want %d", len(vs), tables)
	}
	for _, v := range vs {
		if !v.FinalizedUntil.Equal(at(hours-1, 0)) {
			t.Errorf("%s at %v, want %v", v.Table, v.FinalizedUntil, at(hours-1, 0))
		}
		for h := range hours {
			if n := moves[key{v.Table, at(h, 0)}]; n > 1 {
				t.Errorf("%s to %v moved %d times, want at most once", v.Table, at(h, 0), n)
			}
		}
		if n := moves[key{v.Table, at(hours-1, 0)}]; n != 1 {
			t.Errorf("%s to the last hour moved %d times, want once", v.Table, n)
		}
	}
}

func TestAdvanceBatchClosed(t *testing.T) {
	s, _ := newStore(t, Options{})
	s.Close()
	res, err := s.AdvanceBatch(context.Background(), []Advance{{Table: "t", FinalizedUntil: at(1, 0)}})
	if !errors.Is(err, ErrClosed) || len(res) != 1 || !errors.Is(res[0].Err, ErrClosed) {
		t.Fatalf("AdvanceBatch on a closed store = %+v, %v; want ErrClosed", res, err)
	}
}

// A batch whose advances are all at or behind their rows locks and writes
// nothing, as a no-op Advance.
func TestNoopAdvanceBatchIsARead(t *testing.T) {
	s, url := newStore(t, Options{})
	ctx := context.Background()
	batch := []Advance{{Table: "a", FinalizedUntil: at(14, 0)}, {Table: "b", FinalizedUntil: at(14, 0)}}
	if _, err := s.AdvanceBatch(ctx, batch); err != nil {
		t.Fatal(err)
	}
	conn := connect(t, url)
	rows := func() string {
		t.Helper()
		var out string
		if err := conn.QueryRow(ctx, "SELECT string_agg(xmin::text || '/' || xmax::text, ',' ORDER BY table_name) FROM "+s.n.table).Scan(&out); err != nil {
			t.Fatal(err)
		}
		return out
	}
	before := rows()
	batch[1].FinalizedUntil = at(13, 0)
	res, err := s.AdvanceBatch(ctx, batch)
	if err != nil {
		t.Fatal(err)
	}
	for i, r := range res {
		if r.Err != nil || r.Moved || !r.Verdict.FinalizedUntil.Equal(at(14, 0)) {
			t.Errorf("result %d = %+v", i, r)
		}
	}
	if after := rows(); after != before {
		t.Errorf("a no-op batch touched rows: %s -> %s", before, after)
	}
}
