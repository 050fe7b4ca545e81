package control

import (
	"context"
	"testing"
	"time"
)

// BenchmarkAdvance measures one Advance round trip: "moving" moves the
// verdict every time (an UPDATE and a NOTIFY), "noop" offers the standing
// period again (the statement finds nothing to do).
func BenchmarkAdvance(b *testing.B) {
	s, _ := newStore(b, Options{})
	ctx := context.Background()
	b.Run("moving", func(b *testing.B) {
		base := at(0, 0)
		for i := 0; b.Loop(); i++ {
			_, moved, err := s.Advance(ctx, Advance{Table: "moving", FinalizedUntil: base.Add(time.Duration(i+1) * time.Minute), BatchID: int64(i)})
			if err != nil {
				b.Fatal(err)
			}
			if !moved {
				b.Fatal("did not move")
			}
		}
	})
	b.Run("noop", func(b *testing.B) {
		if _, _, err := s.Advance(ctx, Advance{Table: "noop", FinalizedUntil: at(14, 0)}); err != nil {
			b.Fatal(err)
		}
		for b.Loop() {
			_, moved, err := s.Advance(ctx, Advance{Table: "noop", FinalizedUntil: at(14, 0)})
			if err != nil {
				b.Fatal(err)
			}
			if moved {
				b.Fatal("moved")
			}
		}
	})
}
