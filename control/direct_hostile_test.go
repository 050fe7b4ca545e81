package control

import (
	"context"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"
)

// TestSoleDirectIsPgxOnHostileValues: the sole statement through
// soleDirect and through pgx agree on values an adversary or a broken
// producer can send: a run id or query id that is not UTF-8 or holds a
// NUL, times before 2000 and 1970 with nanoseconds (floored), far in the
// past and future (the year 1, 9999, beyond PostgreSQL's range), a batch
// id at the int64 limits; and in each case one bad advance fails alone,
// the rest of its group applied.
func TestSoleDirectIsPgxOnHostileValues(t *testing.T) {
	ctx := context.Background()
	direct, _ := newStore(t, Options{})
	viaPgx, _ := newStore(t, Options{})
	viaPgx.direct = false
	type variant struct {
		name string
		set  func(a *Advance)
	}
	variants := []variant{
		{"plain", func(a *Advance) {}},
		{"run not utf8", func(a *Advance) { a.RunID = "r\xff\xfe" }},
		{"run nul", func(a *Advance) { a.RunID = "r\x00x" }},
		{"query not utf8", func(a *Advance) { a.QueryID = "q\xc3" }},
		{"query nul", func(a *Advance) { a.QueryID = "q\x00" }},
		{"query long", func(a *Advance) { a.QueryID = strings.Repeat("é", 5000) }},
		{"end 1999 nanos", func(a *Advance) { a.EndTime = time.Date(1999, 12, 31, 23, 59, 59, 999_999_999, time.UTC) }},
		{"end 1969 nanos", func(a *Advance) { a.EndTime = time.Date(1969, 12, 31, 23, 59, 59, 1_500, time.FixedZone("y", -7*3600)) }},
		{"end year 1", func(a *Advance) { a.EndTime = time.Date(1, 1, 1, 0, 0, 0, 1000, time.UTC) }},
		{"end year 9999", func(a *Advance) { a.EndTime = time.Date(9999, 12, 31, 23, 59, 59, 999_999_000, time.UTC) }},
		{"end year -5000", func(a *Advance) { a.EndTime = time.Date(-5000, 1, 1, 0, 0, 0, 0, time.UTC) }},
		{"end year 300000", func(a *Advance) { a.EndTime = time.Date(300000, 1, 1, 0, 0, 0, 0, time.UTC) }},
		{"end year 2^40", func(a *Advance) { a.EndTime = time.Unix(1<<40, 0) }},
		{"batch max", func(a *Advance) { a.BatchID = 1<<63 - 1 }},
		{"batch min", func(a *Advance) { a.BatchID = -1 << 63 }},
		{"offset deep", func(a *Advance) { a.EndOffset = []byte(`{"a":"\ud800","b":[1e400]}`) }},
		{"sources odd", func(a *Advance) { a.Sources = []string{"\xff", "\x00", "\u2028"} }},
	}
	minute := 0
	for _, v := range variants {
		minute++
		// A group of 8 solo tables, the hostile value on one of them;
		// first verdicts go through the advance statement, so write
		// plain first verdicts, then the boundary with the value.
		var first, second []Advance
		for i := range 8 {
			a := Advance{Table: fmt.Sprintf("h%02d.t%d", minute, i), QueryID: "q", RunID: "r", FinalizedUntil: at(1, 0), BatchID: 1}
			first = append(first, a)
			b := a
			b.FinalizedUntil, b.BatchID = at(2, 0), 2
			if i == 3 {
				v.set(&b)
				if b.QueryID != "q" { // a new feeder of its own: keep the table solo by that query from the start
					first[i].QueryID = b.QueryID
				}
			}
			second = append(second, b)
		}
		var res [2][]AdvanceResult
		var errs [2]error
		for j, s := range []*Store{direct, viaPgx} {
			if _, err := s.AdvanceBatch(ctx, first); err != nil {
				t.Fatalf("%s: first verdicts: %v", v.name, err)
			}
			r, err := s.AdvanceBatch(ctx, second)
			for i := range r {
				r[i].Verdict.UpdatedAt = time.Time{}
				if r[i].Err != nil {
					r[i].Err = fmt.Errorf("%s", r[i].Err.Error())
				}
			}
			res[j], errs[j] = r, err
		}
		if fmt.Sprint(errs[0]) != fmt.Sprint(errs[1]) || !reflect.DeepEqual(res[0], res[1]) {
			t.Errorf("%s: direct\n%v %+v\npgx\n%v %+v", v.name, errs[0], res[0], errs[1], res[1])
			continue
		}
		for i, r := range res[0] {
			if i == 3 {
				t.Logf("%s: the hostile advance: moved %v err %v", v.name, r.Moved, r.Err)
				continue
			}
			if r.Err != nil || !r.Moved {
				t.Errorf("%s: advance %d of the group: moved %v err %v (one bad advance failed a neighbour)", v.name, i, r.Moved, r.Err)
			}
		}
	}
}
