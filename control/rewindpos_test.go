package control

import (
	"context"
	"testing"
	"time"
)

// TestARewindRecordsTheStreamsPosition (ADR 0019, addendum of 2026-12-06,
// "judged by sequence"): finalizer rewind records the event stream's
// position on the row after the rewind committed, for that rewind only:
// once (a second record is refused), not for an older rewind (the row
// rewound again since), and a later rewind clears it (a rewind made
// without NATS must not inherit an earlier one's position). A table with
// no position is not listed.
func TestARewindRecordsTheStreamsPosition(t *testing.T) {
	s, _ := newStore(t, Options{})
	ctx := context.Background()
	created := time.Date(2026, 12, 1, 8, 30, 0, 123456789, time.UTC)
	for _, table := range []string{"t", "u"} {
		advance(t, s, table, at(15, 0))
	}
	e1, err := s.Rewind(ctx, Rewind{Table: "t", To: at(12, 0), Reason: "reset", By: "test"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Rewind(ctx, Rewind{Table: "u", To: at(12, 0), Reason: "reset", By: "test"}); err != nil {
		t.Fatal(err)
	}
	ok, err := s.RecordRewindPosition(ctx, "t", e1.At, StreamPosition{Seq: 4711, Created: created})
	if err != nil || !ok {
		t.Fatalf("record: %v %v, want recorded", ok, err)
	}
	if ok, err := s.RecordRewindPosition(ctx, "t", e1.At, StreamPosition{Seq: 4800, Created: created}); err != nil || ok {
		t.Fatalf("a second record: %v %v, want refused", ok, err)
	}
	got, err := s.RewindPositions(ctx)
	if err != nil {
		t.Fatal(err)
	}
	p, ok := got["t"]
	if len(got) != 1 || !ok || p.Seq != 4711 || !p.RewoundAt.Equal(e1.At) || !SameStream(p.Created, created) {
		t.Fatalf("positions = %+v, want t's alone: sequence 4711 for the rewind at %v, created %v", got, e1.At, created)
	}
	if SameStream(p.Created, created.Add(time.Millisecond)) {
		t.Fatal("a stream created a millisecond later is taken for the same")
	}
	// Rewound again: the position goes; the earlier rewind's is refused.
	e2, err := s.Rewind(ctx, Rewind{Table: "t", To: at(11, 0), Reason: "again", By: "test"})
	if err != nil {
		t.Fatal(err)
	}
	if got, err := s.RewindPositions(ctx); err != nil || len(got) != 0 {
		t.Fatalf("after a second rewind: %+v %v, want no position", got, err)
	}
	if ok, err := s.RecordRewindPosition(ctx, "t", e1.At, StreamPosition{Seq: 4711, Created: created}); err != nil || ok {
		t.Fatalf("a record for the earlier rewind: %v %v, want refused", ok, err)
	}
	if ok, err := s.RecordRewindPosition(ctx, "t", e2.At, StreamPosition{Seq: 5000, Created: created}); err != nil || !ok {
		t.Fatalf("a record for the later rewind: %v %v, want recorded", ok, err)
	}
	// Nothing else on the row moved.
	v, err := s.Get(ctx, "t")
	if err != nil || !v.FinalizedUntil.Equal(at(11, 0)) || !v.RewoundAt.Equal(e2.At) || !v.UpdatedAt.Equal(e2.At) {
		t.Fatalf("row after the record: %+v %v", v, err)
	}
}

// TestARecordedPositionOfAnOlderRewindIsNotUsed: an older binary's
// rewind (schema 6) does not clear the position columns; a position kept
// for an earlier rewind must not be taken for the later one's.
func TestARecordedPositionOfAnOlderRewindIsNotUsed(t *testing.T) {
	s, url := newStore(t, Options{})
	ctx := context.Background()
	advance(t, s, "t", at(15, 0))
	e, err := s.Rewind(ctx, Rewind{Table: "t", To: at(12, 0), Reason: "reset", By: "test"})
	if err != nil {
		t.Fatal(err)
	}
	if ok, err := s.RecordRewindPosition(ctx, "t", e.At, StreamPosition{Seq: 10, Created: time.Now()}); err != nil || !ok {
		t.Fatalf("record: %v %v", ok, err)
	}
	// As an older binary rewinds: rewound_at moves, the columns stay.
	if _, err := connect(t, url).Exec(ctx, `UPDATE table_finalization SET finalized_until = $1, rewound_at = clock_timestamp() WHERE table_name = 't'`, at(11, 0)); err != nil {
		t.Fatal(err)
	}
	if got, err := s.RewindPositions(ctx); err != nil || len(got) != 0 {
		t.Fatalf("positions after an older binary's rewind: %+v %v, want none", got, err)
	}
	v, err := s.Get(ctx, "t")
	if err != nil {
		t.Fatal(err)
	}
	if ok, err := s.RecordRewindPosition(ctx, "t", v.RewoundAt, StreamPosition{Seq: 20, Created: time.Now()}); err != nil || !ok {
		t.Fatalf("a record for the later rewind: %v %v, want recorded", ok, err)
	}
	if got, err := s.RewindPositions(ctx); err != nil || got["t"].Seq != 20 {
		t.Fatalf("positions: %+v %v, want sequence 20", got, err)
	}
}
