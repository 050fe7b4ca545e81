package control

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// next returns the next notification on a connection that LISTENs.
func next(t *testing.T, lc *pgx.Conn) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	n, err := lc.WaitForNotification(ctx)
	if err != nil {
		t.Fatalf("no notification: %v", err)
	}
	return n.Payload
}

// drain reads the one notification an advance sent.
func drain(t *testing.T, lc *pgx.Conn) { t.Helper(); next(t, lc) }

// TestRewind moves a marked verdict back: the row, the audit entry, the
// notification and the readers all see the one backward move, and the
// verdict moves forward again from there only through advances.
func TestRewind(t *testing.T) {
	s, url := newStore(t, Options{})
	ctx := context.Background()
	lc := connect(t, url)
	if _, err := lc.Exec(ctx, "LISTEN "+NotifyChannel); err != nil {
		t.Fatal(err)
	}
	srcs := []string{"KafkaV2[Subscribe[orders]]", "DeltaSource[s3://b/customers]"}
	if _, moved, err := s.Advance(ctx, Advance{Table: "bronze.orders", FinalizedUntil: at(15, 0), EndTime: at(15, 7),
		EndOffset: json.RawMessage(`{"commit_ts":"2026-09-28T15:07:00Z"}`), QueryID: "q1", RunID: "r1", BatchID: 41, Sources: srcs}); err != nil || !moved {
		t.Fatalf("advance: moved %v, %v", moved, err)
	}
	drain(t, lc)
	for _, m := range []string{"reset: query q2 started at batch 0", "behind: candidate below the stored end"} {
		if ok, err := s.Mark(ctx, "bronze.orders", m); err != nil || !ok {
			t.Fatalf("Mark: %v, %v", ok, err)
		}
	}
	v, err := s.Get(ctx, "bronze.orders")
	if err != nil {
		t.Fatal(err)
	}
	if v.Mark != "reset: query q2 started at batch 0" || v.Marks != 2 || v.MarkedAt.IsZero() || !slices.Equal(v.Sources, srcs) {
		t.Fatalf("before the rewind: %+v", v)
	}

	// A candidate below the verdict never moves it back.
	if _, moved, err := s.Advance(ctx, Advance{Table: "bronze.orders", FinalizedUntil: at(12, 0), QueryID: "q2"}); err != nil || moved {
		t.Fatalf("an older candidate: moved %v, %v", moved, err)
	}

	e, err := s.Rewind(ctx, Rewind{Table: "bronze.orders", To: at(12, 0), Reason: "checkpoint reset; full refresh", By: "alice"})
	if err != nil {
		t.Fatal(err)
	}
	if e.Action != ActionRewind || e.Table != "bronze.orders" || e.By != "alice" || e.DBUser == "" ||
		e.Reason != "checkpoint reset; full refresh" || !e.From.Equal(at(15, 0)) || !e.To.Equal(at(12, 0)) ||
		e.FromQueryID != "q1" || e.FromRunID != "r1" || e.FromBatchID != 41 || !e.FromEndTime.Equal(at(15, 7)) ||
		e.ClearedMark != "reset: query q2 started at batch 0" || e.ClearedMarks != 2 || e.At.IsZero() {
		t.Errorf("audit entry = %+v", e)
	}
	var n map[string]any
	if err := json.Unmarshal([]byte(next(t, lc)), &n); err != nil {
		t.Fatal(err)
	}
	if n["table"] != "bronze.orders" || n["finalized_until"] != "2026-09-28T12:00:00Z" || n["rewound"] != true || n["from"] != "2026-09-28T15:00:00Z" {
		t.Errorf("notification = %v", n)
	}

	v, err = s.Get(ctx, "bronze.orders")
	if err != nil {
		t.Fatal(err)
	}
	if !v.FinalizedUntil.Equal(at(12, 0)) || v.Mark != "" || v.Marks != 0 || !v.MarkedAt.IsZero() || v.RewoundAt.IsZero() ||
		v.QueryID != "" || v.RunID != "" || !v.EndTime.IsZero() || v.Sources != nil || v.EndOffset != nil {
		t.Errorf("after the rewind: %+v", v)
	}
	if final, err := s.IsFinal(ctx, "bronze.orders", at(13, 0)); err != nil || final {
		t.Errorf("is-final 13:00 after rewinding to 12:00: %v, %v", final, err)
	}
	if final, err := s.IsFinal(ctx, "bronze.orders", at(12, 0)); err != nil || !final {
		t.Errorf("is-final 12:00 after rewinding to 12:00: %v, %v", final, err)
	}

	// The rewind took q1's watermark back with the table: q1 (the old
	// checkpoint's query) still feeds the table and holds it at 12:00
	// until it is retired (ADR 0015).
	if _, moved, err := s.Advance(ctx, Advance{Table: "bronze.orders", FinalizedUntil: at(13, 0), QueryID: "q2"}); err != nil || moved {
		t.Fatalf("advance of q2 while q1 holds the table: moved %v, %v", moved, err)
	}
	if _, v, moved, err := s.RetireFeeder(ctx, "bronze.orders", "q1", "replaced by q2 (new checkpoint)"); err != nil || !moved || !v.FinalizedUntil.Equal(at(13, 0)) {
		t.Fatalf("retire q1: %+v, moved %v, %v", v, moved, err)
	}
	if p := next(t, lc); p != `{"table":"bronze.orders","finalized_until":"2026-09-28T13:00:00Z","control_table":"public.table_finalization"}` {
		t.Errorf("a forward move's payload = %s (no rewound flag)", p)
	}

	// Forward from the new point, through the ordinary advance.
	if _, moved, err := s.Advance(ctx, Advance{Table: "bronze.orders", FinalizedUntil: at(14, 0), QueryID: "q2"}); err != nil || !moved {
		t.Fatalf("advance after the rewind: moved %v, %v", moved, err)
	}
	if p := next(t, lc); p != `{"table":"bronze.orders","finalized_until":"2026-09-28T14:00:00Z","control_table":"public.table_finalization"}` {
		t.Errorf("a forward move's payload = %s (no rewound flag)", p)
	}
	entries, err := s.Audit(ctx, "bronze.orders", 0)
	if err != nil || len(entries) != 1 || entries[0].ID != e.ID {
		t.Errorf("Audit = %+v, %v", entries, err)
	}
}

// TestRewindRefuses: a rewind that is not backwards, of a table without a
// verdict, or without a reason or an operator changes nothing.
func TestRewindRefuses(t *testing.T) {
	s, _ := newStore(t, Options{})
	ctx := context.Background()
	advance(t, s, "t", at(14, 0))
	for _, tc := range []struct {
		r    Rewind
		want error
	}{
		{Rewind{Table: "t", To: at(14, 0), Reason: "x", By: "a"}, ErrNotBehind},
		{Rewind{Table: "t", To: at(15, 0), Reason: "x", By: "a"}, ErrNotBehind},
		{Rewind{Table: "none", To: at(1, 0), Reason: "x", By: "a"}, ErrNotFound},
		{Rewind{Table: "t", To: at(1, 0), Reason: " ", By: "a"}, ErrInvalidRewind},
		{Rewind{Table: "t", To: at(1, 0), Reason: "x"}, ErrInvalidRewind},
		{Rewind{Table: "t", Reason: "x", By: "a"}, ErrInvalidRewind},
		{Rewind{To: at(1, 0), Reason: "x", By: "a"}, ErrInvalidRewind},
	} {
		if _, err := s.Rewind(ctx, tc.r); !errors.Is(err, tc.want) {
			t.Errorf("Rewind(%+v): err = %v, want %v", tc.r, err, tc.want)
		}
	}
	if v, err := s.Get(ctx, "t"); err != nil || !v.FinalizedUntil.Equal(at(14, 0)) || !v.RewoundAt.IsZero() {
		t.Errorf("after refused rewinds: %+v, %v", v, err)
	}
	if entries, err := s.Audit(ctx, "", 0); err != nil || len(entries) != 0 {
		t.Errorf("audit after refused rewinds: %+v, %v", entries, err)
	}
}

// TestAcknowledge clears a mark without moving the verdict, audited.
func TestAcknowledge(t *testing.T) {
	s, _ := newStore(t, Options{})
	ctx := context.Background()
	if ok, err := s.Mark(ctx, "t", "reset"); err != nil || ok {
		t.Fatalf("Mark of a table without a verdict: %v, %v", ok, err)
	}
	advance(t, s, "t", at(14, 0))
	if _, err := s.Mark(ctx, "t", "reset"); err != nil {
		t.Fatal(err)
	}
	e, err := s.Acknowledge(ctx, Acknowledge{Table: "t", Reason: "the sink is idempotent", By: "bob"})
	if err != nil {
		t.Fatal(err)
	}
	if e.Action != ActionAcknowledge || e.ClearedMark != "reset" || e.ClearedMarks != 1 || !e.From.Equal(at(14, 0)) || !e.To.Equal(at(14, 0)) {
		t.Errorf("audit entry = %+v", e)
	}
	if v, err := s.Get(ctx, "t"); err != nil || v.Mark != "" || v.Marks != 0 || !v.FinalizedUntil.Equal(at(14, 0)) {
		t.Errorf("after acknowledge: %+v, %v", v, err)
	}
	if _, err := s.Acknowledge(ctx, Acknowledge{Table: "none", Reason: "x", By: "a"}); !errors.Is(err, ErrNotFound) {
		t.Errorf("Acknowledge of a table without a verdict: %v", err)
	}
}

// TestWaitSeesRewind: a wait that began before a rewind keeps waiting for
// its time, and a wait after it blocks until the verdict is back there.
func TestWaitSeesRewind(t *testing.T) {
	s, _ := newStore(t, Options{})
	ctx := context.Background()
	advance(t, s, "t", at(14, 0))
	waiting := goWait(t, ctx, s, "t", at(15, 0))
	listening(t, s, 1)
	if _, err := s.Rewind(ctx, Rewind{Table: "t", To: at(10, 0), Reason: "reset", By: "a"}); err != nil {
		t.Fatal(err)
	}
	after := goWait(t, ctx, s, "t", at(12, 0))
	listening(t, s, 2)
	advance(t, s, "t", at(11, 0))
	select {
	case r := <-after:
		t.Fatalf("Wait(12:00) returned at 11:00: %+v", r)
	case r := <-waiting:
		t.Fatalf("Wait(15:00) returned: %+v", r)
	case <-time.After(200 * time.Millisecond):
	}
	advance(t, s, "t", at(12, 0))
	if r := result(t, after); r.err != nil || !r.v.FinalizedUntil.Equal(at(12, 0)) {
		t.Errorf("Wait(12:00) = %+v", r)
	}
	advance(t, s, "t", at(15, 0))
	if r := result(t, waiting); r.err != nil || !r.v.FinalizedUntil.Equal(at(15, 0)) {
		t.Errorf("Wait(15:00) = %+v", r)
	}
}

// TestWatchSeesRewind: a watcher hears a rewind with its flag set, and
// forward moves without it.
func TestWatchSeesRewind(t *testing.T) {
	s, _ := newStore(t, Options{})
	ctx := context.Background()
	var (
		mu  sync.Mutex
		got []Notification
	)
	stop, err := s.Watch(func(n Notification) {
		if n.Table == "" {
			return // a (re)connect
		}
		mu.Lock()
		got = append(got, n)
		mu.Unlock()
	})
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	eventually(t, "the LISTEN connection", func() bool { return s.lis.backendPID() != 0 })
	advance(t, s, "t", at(14, 0))
	if _, err := s.Rewind(ctx, Rewind{Table: "t", To: at(9, 0), Reason: "r", By: "a"}); err != nil {
		t.Fatal(err)
	}
	count := func() int { mu.Lock(); defer mu.Unlock(); return len(got) }
	eventually(t, "the move and the rewind", func() bool { return count() == 2 })
	mu.Lock()
	defer mu.Unlock()
	if got[0].Rewound || !got[0].FinalizedUntil.Equal(at(14, 0)) || !got[1].Rewound || got[1].Table != "t" || !got[1].FinalizedUntil.Equal(at(9, 0)) {
		t.Errorf("heard %+v", got)
	}
}

// TestSourcesStored: the sources' descriptions are stored with a move, by
// Advance and AdvanceBatch, and kept as they are (even when not UTF-8).
func TestSourcesStored(t *testing.T) {
	s, _ := newStore(t, Options{})
	ctx := context.Background()
	if _, _, err := s.Advance(ctx, Advance{Table: "a", FinalizedUntil: at(1, 0), Sources: []string{"x", "nul\x00"}}); err != nil {
		t.Fatal(err)
	}
	res, err := s.AdvanceBatch(ctx, []Advance{
		{Table: "b", FinalizedUntil: at(1, 0), Sources: []string{"KafkaV2[Subscribe[b]]"}},
		{Table: "c", FinalizedUntil: at(1, 0)},
	})
	if err != nil || res[0].Err != nil || !slices.Equal(res[0].Verdict.Sources, []string{"KafkaV2[Subscribe[b]]"}) {
		t.Fatalf("AdvanceBatch = %+v, %v", res, err)
	}
	for table, want := range map[string][]string{"a": {"x", `nul\u0000`}, "b": {"KafkaV2[Subscribe[b]]"}, "c": nil} {
		v, err := s.Get(ctx, table)
		if err != nil || !slices.Equal(v.Sources, want) {
			t.Errorf("%s: sources %q, %v; want %q", table, v.Sources, err, want)
		}
	}
}

// TestRewindWithFeeders: a rewind takes every feeder's watermark above the
// target back with the table (the next advance cannot undo it), and retires
// the feeders named, in the same transaction: after a checkpoint reset the
// old query id would otherwise hold the table forever.
func TestRewindWithFeeders(t *testing.T) {
	s, _ := newStore(t, Options{})
	ctx := context.Background()
	adv := func(query string, until time.Time) Verdict {
		t.Helper()
		v, _, err := s.Advance(ctx, Advance{Table: "t", FinalizedUntil: until, QueryID: query})
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	adv("old", at(15, 0))
	if v := adv("other", at(14, 0)); !v.FinalizedUntil.Equal(at(15, 0)) {
		t.Fatalf("table = %v (forward-only: a second feeder holds, never lowers)", v.FinalizedUntil)
	}
	if _, err := s.Rewind(ctx, Rewind{Table: "t", To: at(12, 0), Reason: "x", By: "a", Retire: []string{"nope"}}); !errors.Is(err, ErrNoFeeder) {
		t.Fatalf("retiring an unknown feeder: %v, want ErrNoFeeder", err)
	}
	if v, _ := s.Get(ctx, "t"); !v.FinalizedUntil.Equal(at(15, 0)) {
		t.Fatalf("a refused rewind moved the table to %v", v.FinalizedUntil)
	}
	e, err := s.Rewind(ctx, Rewind{Table: "t", To: at(12, 0), Reason: "orders reset", By: "a", Retire: []string{"old"}})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(e.Retired, []string{"old"}) {
		t.Errorf("retired %q", e.Retired)
	}
	fs, err := s.Feeders(ctx, "t")
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range fs {
		switch f.Feeder {
		case "old":
			if !f.Retired() || !strings.HasPrefix(f.RetiredWhy, "rewind ") {
				t.Errorf("old feeder %+v", f)
			}
		case "other":
			if f.Retired() || !f.FinalizedUntil.Equal(at(12, 0)) {
				t.Errorf("other feeder %+v, want its watermark back at 12:00", f)
			}
		}
	}
	// The remaining feeder moves the table on from 12:00; the retired one
	// no longer holds it.
	if v := adv("other", at(13, 0)); !v.FinalizedUntil.Equal(at(13, 0)) {
		t.Errorf("after the rewind, table = %v, want 13:00", v.FinalizedUntil)
	}
}

// After a checkpoint reset the old and the new query share their name: a
// rewind that retires by that name is refused (it would retire the reset
// query too, and another feeder would move the table ahead of the data the
// reset query reprocesses); by the old query's id it retires that one only.
func TestRewindRefusesAmbiguousFeederName(t *testing.T) {
	s, _ := newStore(t, Options{})
	ctx := context.Background()
	adv := func(query, name string, until time.Time) Verdict {
		t.Helper()
		v, _, err := s.Advance(ctx, Advance{Table: "t", FinalizedUntil: until, QueryID: query, QueryName: name})
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	adv("q-old", "orders-v1", at(15, 0))
	adv("q-new", "orders-v1", at(10, 0)) // the reset query, reprocessing
	adv("q-x", "other", at(15, 0))
	_, err := s.Rewind(ctx, Rewind{Table: "t", To: at(9, 0), Reason: "reset", By: "a", Retire: []string{"orders-v1"}})
	if !errors.Is(err, ErrAmbiguousFeeder) || errors.Is(err, ErrNoFeeder) || !strings.Contains(err.Error(), `feeder name "orders-v1" is ambiguous: 2 active feeders`) || !strings.Contains(err.Error(), "q-old, q-new") || !strings.Contains(err.Error(), "by its id") {
		t.Fatalf("rewind retiring by a shared name: %v, want a refusal naming both ids", err)
	}
	if v, _ := s.Get(ctx, "t"); !v.FinalizedUntil.Equal(at(15, 0)) {
		t.Fatalf("a refused rewind moved the table to %v", v.FinalizedUntil)
	}
	e, err := s.Rewind(ctx, Rewind{Table: "t", To: at(9, 0), Reason: "reset", By: "a", Retire: []string{"q-old"}})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(e.Retired, []string{"q-old"}) {
		t.Errorf("retired %q, want q-old only", e.Retired)
	}
	// The other query cannot move the table past the reset query.
	if v := adv("q-x", "other", at(16, 0)); !v.FinalizedUntil.Equal(at(9, 0)) {
		t.Errorf("table = %v, want 09:00 (held by the reset query)", v.FinalizedUntil)
	}
	if v := adv("q-new", "orders-v1", at(11, 0)); !v.FinalizedUntil.Equal(at(11, 0)) {
		t.Errorf("table = %v, want 11:00", v.FinalizedUntil)
	}
}

// TestRewindsListsEachRewoundTable: Store.Rewinds has every table an
// operator rewound, at its rewound_at, and no other (a restart's recovery
// reads it: finalizer.RewindLister).
func TestRewindsListsEachRewoundTable(t *testing.T) {
	s, _ := newStore(t, Options{})
	ctx := context.Background()
	for _, table := range []string{"a", "b"} {
		if _, moved, err := s.Advance(ctx, Advance{Table: table, FinalizedUntil: at(15, 0), QueryID: "q1", RunID: "r1", BatchID: 1}); err != nil || !moved {
			t.Fatalf("advance %s: moved %v, %v", table, moved, err)
		}
	}
	if m, err := s.Rewinds(ctx); err != nil || len(m) != 0 {
		t.Fatalf("before any rewind: %v, %v", m, err)
	}
	if _, err := s.Rewind(ctx, Rewind{Table: "a", To: at(13, 0), Reason: "test", By: "ops"}); err != nil {
		t.Fatal(err)
	}
	v, err := s.Get(ctx, "a")
	if err != nil {
		t.Fatal(err)
	}
	m, err := s.Rewinds(ctx)
	if err != nil || len(m) != 1 || !m["a"].Equal(v.RewoundAt) || v.RewoundAt.IsZero() {
		t.Fatalf("after rewinding a: %v, %v (rewound_at %s)", m, err, v.RewoundAt)
	}
}
