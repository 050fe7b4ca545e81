package control

import (
	"context"
	"fmt"
	"reflect"
	"testing"
	"time"
)

// TestSoleDirectIsPgx: a group's sole statement through soleDirect (its
// parameters encoded by this package, its rows read by readMove) returns
// what it returns through pgx, on two databases given the same advances:
// moves, no-ops, NULL and non-NULL provenance, sources jsonb writes back
// otherwise, a table standing at an infinite time (an error of the
// group's, the same through both), and the verdicts left in the table.
func TestSoleDirectIsPgx(t *testing.T) {
	ctx := context.Background()
	direct, _ := newStore(t, Options{})
	viaPgx, _ := newStore(t, Options{})
	viaPgx.direct = false
	if !direct.direct {
		t.Fatal("the default pool does not take the direct way")
	}
	end := time.Date(2026, 12, 1, 10, 3, 4, 123456789, time.FixedZone("x", 3600))
	adv := func(i, minute int) Advance {
		a := Advance{Table: fmt.Sprintf("d.t%02d", i), QueryID: "q", FinalizedUntil: at(10, minute), BatchID: int64(minute)}
		switch i % 4 {
		case 1:
			a.EndTime, a.EndOffset, a.RunID, a.Sources = end, []byte(`{"b": 1, "a":"x"}`), "r", []string{"a", `b"c`, "é<&>"}
		case 2:
			a.Sources, a.EndOffset = []string{}, []byte(`"\u0000"`)
		case 3:
			a.EndTime, a.RunID, a.Sources = end.Add(time.Duration(i)), "r2", []string{"kafka[t]"}
		}
		return a
	}
	run := func(as []Advance) ([][]AdvanceResult, []error) {
		var res [][]AdvanceResult
		var errs []error
		for _, s := range []*Store{direct, viaPgx} {
			r, err := s.AdvanceBatch(ctx, as)
			for i := range r {
				r[i].Verdict.UpdatedAt = time.Time{} // the database's clock
				if r[i].Err != nil {
					r[i].Err = fmt.Errorf("%s", r[i].Err.Error())
				}
			}
			res, errs = append(res, r), append(errs, err)
		}
		return res, errs
	}
	check := func(what string, as []Advance) {
		t.Helper()
		res, errs := run(as)
		if fmt.Sprint(errs[0]) != fmt.Sprint(errs[1]) || !reflect.DeepEqual(res[0], res[1]) {
			t.Errorf("%s: direct\n%v %+v\npgx\n%v %+v", what, errs[0], res[0], errs[1], res[1])
		}
	}
	var first, second, third []Advance
	for i := range 12 {
		first, second, third = append(first, adv(i, 0)), append(second, adv(i, 1)), append(third, adv(i, 1+i%2))
	}
	check("first verdicts", first) // through the advance statement
	check("a boundary", second)    // the sole statement
	check("half of them again", third)
	for _, s := range []*Store{direct, viaPgx} {
		if _, err := s.pool.Exec(ctx, "UPDATE "+s.n.table+" SET finalized_until = 'infinity' WHERE table_name = 'd.t05'"); err != nil {
			t.Fatal(err)
		}
	}
	var fourth []Advance
	for i := range 12 {
		fourth = append(fourth, adv(i, 5))
	}
	check("a table at infinity", fourth)
	for _, s := range []*Store{direct, viaPgx} {
		if _, err := s.pool.Exec(ctx, "DELETE FROM "+s.n.table+" WHERE table_name = 'd.t05'"); err != nil {
			t.Fatal(err)
		}
	}
	var lists [2][]Verdict
	for i, s := range []*Store{direct, viaPgx} {
		vs, err := s.List(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for j := range vs {
			vs[j].UpdatedAt = time.Time{}
		}
		lists[i] = vs
	}
	if !reflect.DeepEqual(lists[0], lists[1]) || len(lists[0]) != 11 {
		t.Errorf("the tables: direct\n%+v\npgx\n%+v", lists[0], lists[1])
	}
	if direct.stats.direct.Load() < 3 || viaPgx.stats.direct.Load() != 0 || viaPgx.stats.soleStatements.Load() < 3 {
		t.Errorf("sole statements through soleDirect: %d and %d of %d; want the first store's 3 or more, the second's none",
			direct.stats.direct.Load(), viaPgx.stats.direct.Load(), viaPgx.stats.soleStatements.Load())
	}
}

// TestSoleDirectOnlyWithPreparedStatements: a pool that does not prepare
// statements (a URL's default_query_exec_mode, e.g. behind a transaction
// pooler) runs the sole statement through pgx.
func TestSoleDirectOnlyWithPreparedStatements(t *testing.T) {
	_, url := newStore(t, Options{})
	for mode, want := range map[string]bool{"": true, "cache_statement": true, "exec": false, "simple_protocol": false, "cache_describe": false} {
		u := url
		if mode != "" {
			sep := "?"
			if containsByte(u, '?') {
				sep = "&"
			}
			u += sep + "default_query_exec_mode=" + mode
		}
		s := openStore(t, u, Options{})
		if s.direct != want {
			t.Errorf("default_query_exec_mode %q: direct %v, want %v", mode, s.direct, want)
		}
		if err := s.Migrate(context.Background()); err != nil {
			t.Fatal(err)
		}
		as := []Advance{{Table: "m.a", QueryID: "q", FinalizedUntil: at(1, 0)}, {Table: "m.b", QueryID: "q", FinalizedUntil: at(1, 0)}}
		for _, minute := range []int{0, 1} {
			for i := range as {
				as[i].FinalizedUntil = at(1+minute, 0)
			}
			if _, err := s.AdvanceBatch(context.Background(), as); err != nil {
				t.Errorf("mode %q: %v", mode, err)
			}
		}
		if got := s.stats.direct.Load() > 0; got != want || s.stats.soleStatements.Load() == 0 {
			t.Errorf("mode %q: %d sole statements, %d through soleDirect", mode, s.stats.soleStatements.Load(), s.stats.direct.Load())
		}
	}
}

func containsByte(s string, b byte) bool {
	for i := range len(s) {
		if s[i] == b {
			return true
		}
	}
	return false
}
