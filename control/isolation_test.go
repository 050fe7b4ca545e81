package control

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"
)

// TestAdvanceBatchOneRefusedNeverFailsTheOthers makes PostgreSQL refuse
// the rows of a few tables (a trigger raises an error with a given
// SQLSTATE for them, standing for any reason a row may be refused) inside
// group commits of healthy tables: every healthy table moves, only the
// refused ones carry an error, whatever the code, and the batch as a whole
// does not fail. Before, any code but the three of an offset refusal
// failed every advance of the batch.
func TestAdvanceBatchOneRefusedNeverFailsTheOthers(t *testing.T) {
	s, url := newStore(t, Options{})
	ctx := context.Background()
	conn := connect(t, url)
	for _, q := range []string{
		`CREATE FUNCTION refuse_poison() RETURNS trigger LANGUAGE plpgsql AS $$
		BEGIN
			IF NEW.table_name LIKE 'poison.%' THEN
				RAISE EXCEPTION 'refused %', NEW.table_name USING ERRCODE = split_part(NEW.table_name, '.', 2);
			END IF;
			RETURN NEW;
		END $$`,
		`CREATE TRIGGER refuse_poison BEFORE INSERT OR UPDATE ON public.table_finalization
			FOR EACH ROW EXECUTE FUNCTION refuse_poison()`,
	} {
		if _, err := conn.Exec(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	// SQLSTATEs of several classes: payload too long (pg_notify), a
	// serialization failure, an internal error, a check violation, an
	// out-of-memory, and one made up.
	codes := []string{"22023", "40001", "XX000", "23514", "53200", "P0001", "ZZ999"}
	for round, hour := range []int{13, 14} {
		var as []Advance
		for i := range 300 {
			as = append(as, Advance{Table: fmt.Sprintf("healthy.t%03d", i), FinalizedUntil: at(hour, 0), RunID: "r"})
			if i%50 == 7 {
				code := codes[(i/50+round)%len(codes)]
				as = append(as, Advance{Table: "poison." + code, FinalizedUntil: at(hour, 0)})
			}
		}
		res, err := s.AdvanceBatch(ctx, as)
		if err != nil {
			t.Fatalf("round %d: the batch failed as a whole: %v", round, err)
		}
		for i, r := range res {
			poison := strings.HasPrefix(as[i].Table, "poison.")
			switch {
			case poison && r.Err == nil:
				t.Errorf("round %d: %s: no error", round, as[i].Table)
			case poison && errors.Is(r.Err, ErrUnavailable):
				t.Errorf("round %d: %s: refused row reported as unavailable: %v", round, as[i].Table, r.Err)
			case !poison && r.Err != nil:
				t.Errorf("round %d: healthy %s failed: %v", round, as[i].Table, r.Err)
			case !poison && (!r.Moved || !r.Verdict.FinalizedUntil.Equal(at(hour, 0))):
				t.Errorf("round %d: healthy %s: moved %v to %v", round, as[i].Table, r.Moved, r.Verdict.FinalizedUntil)
			}
		}
	}
	var n int
	if err := conn.QueryRow(ctx, `SELECT count(*) FROM public.table_finalization WHERE finalized_until = $1`, at(14, 0)).Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != 300 {
		t.Fatalf("%d healthy tables at 14:00, want 300", n)
	}
}

// TestTableNameChecked: every name PostgreSQL or pg_notify would refuse
// is refused before it is sent, with ErrInvalidTable and a plain reason,
// by Advance, AdvanceBatch (for that entry only), Get and Wait; the
// longest name accepted, made of the characters JSON escapes the most,
// still moves and is announced.
func TestTableNameChecked(t *testing.T) {
	s, url := newStore(t, Options{})
	ctx := context.Background()
	bad := map[string]string{
		"empty":       "",
		"nul":         "a\x00b",
		"invalid utf": "a\xffb",
		"control":     "a\nb",
		"too long":    strings.Repeat("x", MaxTableNameLen+1),
	}
	for name, table := range bad {
		t.Run(name, func(t *testing.T) {
			_, _, err := s.Advance(ctx, Advance{Table: table, FinalizedUntil: at(13, 0)})
			if !errors.Is(err, ErrInvalidTable) || !errors.Is(err, ErrInvalidAdvance) {
				t.Errorf("Advance: %v", err)
			}
			res, err := s.AdvanceBatch(ctx, []Advance{{Table: table, FinalizedUntil: at(13, 0)}, {Table: "ok." + name, FinalizedUntil: at(13, 0)}})
			if err != nil || !errors.Is(res[0].Err, ErrInvalidTable) || res[1].Err != nil || !res[1].Moved {
				t.Errorf("AdvanceBatch: %v, %+v", err, res)
			}
			if _, err := s.Get(ctx, table); !errors.Is(err, ErrInvalidTable) {
				t.Errorf("Get: %v", err)
			}
			wctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			defer cancel()
			if _, err := s.Wait(wctx, table, at(13, 0)); !errors.Is(err, ErrInvalidTable) {
				t.Errorf("Wait: %v", err)
			}
			if err != nil && strings.Contains(err.Error(), strings.Repeat("x", 100)) {
				t.Errorf("the error repeats the name: %.200s", err)
			}
		})
	}

	lc := connect(t, url)
	if _, err := lc.Exec(ctx, "LISTEN "+NotifyChannel); err != nil {
		t.Fatal(err)
	}
	longest := strings.Repeat("<", MaxTableNameLen)
	if err := CheckTableName(longest); err != nil {
		t.Fatal(err)
	}
	res, err := s.AdvanceBatch(ctx, []Advance{{Table: longest, FinalizedUntil: at(13, 0)}})
	if err != nil || res[0].Err != nil || !res[0].Moved {
		t.Fatalf("longest name: %v, %+v", err, res)
	}
	wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	n, err := lc.WaitForNotification(wctx)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(n.Payload, `\u003c`) || len(n.Payload) >= maxNotifyPayload {
		t.Fatalf("payload of %d bytes", len(n.Payload))
	}
}
