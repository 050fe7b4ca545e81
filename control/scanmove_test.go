package control

import (
	"context"
	"encoding/json"
	"reflect"
	"testing"
	"time"
)

// TestReadMoveIsScanVerdict: on rows of every kind notifyAndReturn can
// return (NULLs, marks, a rewind, sources jsonb writes back with spaces
// and escapes, an infinite time, jsonb null), readMove returns exactly
// what scanVerdict does, or declines (ok false) where scanVerdict fails.
func TestReadMoveIsScanVerdict(t *testing.T) {
	_, url := newStore(t, Options{})
	ctx := context.Background()
	conn := connect(t, url)
	rowsOf := []string{
		`true, 'a', '2026-01-01 12:00:00.123456+00', '2026-01-01 12:03:00+05', '{"b": 1, "a": [1, 2]}', 'q', 'r', 5, '["kafka[t]"]', '2026-01-02 00:00:00+00', NULL, NULL, 0, NULL, 1, true, 0`,
		`false, 'b', NULL, NULL, NULL, NULL, NULL, NULL, NULL, '1999-12-31 23:59:59.999999+00', 'reset', '1970-01-01 00:00:00+00', 3, '1850-06-01 00:00:00.5+00', 0, false, 7`,
		`true, 'c', '2026-01-01 12:00:00+00', NULL, '"\\u0000x"', '', '', -1, '["a", "b\"c", "é\u00e9", "<&>"]', now(), '', now(), 9223372036854775807, now(), 2, true, 1`,
		`true, 'd', '2026-01-01 12:00:00+00', NULL, 'null', 'q', 'r', 0, '[]', now(), NULL, NULL, 0, NULL, 0, true, 0`,
		`true, 'e', '2026-01-01 12:00:00+00', NULL, '1', 'q', 'r', 0, 'null', now(), NULL, NULL, 0, NULL, 0, true, 0`,
		`true, 'f', '2026-01-01 12:00:00+00', NULL, '{}', 'q', 'r', 0, '["a", 1, {"x": "y"}]', now(), NULL, NULL, 0, NULL, 0, true, 0`,
		`true, 'g', '2026-01-01 12:00:00+00', NULL, '{}', 'q', 'r', 0, '{"a": "b"}', now(), NULL, NULL, 0, NULL, 0, true, 0`,
		`true, 'h', 'infinity', NULL, NULL, 'q', 'r', 0, NULL, now(), NULL, NULL, 0, NULL, 0, true, 0`,
		`true, 'i', '2026-01-01 12:00:00+00', '-infinity', NULL, 'q', 'r', 0, NULL, now(), NULL, NULL, 0, NULL, 0, true, 0`,
		`true, NULL, '2026-01-01 12:00:00+00', NULL, NULL, 'q', 'r', 0, NULL, now(), NULL, NULL, 0, NULL, 0, true, 0`,
		`true, 'k', '2026-01-01 12:00:00+00', NULL, NULL, 'q', 'r', 0, NULL, NULL, NULL, NULL, 0, NULL, 0, true, 0`,
		`true, 'l', '2026-01-01 12:00:00+00', NULL, NULL, 'q', 'r', 0, NULL, now(), NULL, NULL, NULL, NULL, 0, NULL, 0`,
	}
	fast := 0
	for n, row := range rowsOf {
		for _, written := range []string{"c17::bigint", "c17::integer"} {
			q := `SELECT c1::bool, c2::text, c3::timestamptz, c4::timestamptz, c5::jsonb, c6::text, c7::text, c8::bigint, c9::jsonb,
	c10::timestamptz, c11::text, c12::timestamptz, c13::bigint, c14::timestamptz, c15::integer, c16::bool, ` + written + `
FROM (VALUES (` + row + `)) AS r(c1, c2, c3, c4, c5, c6, c7, c8, c9, c10, c11, c12, c13, c14, c15, c16, c17)`
			rows, err := conn.Query(ctx, q)
			if err != nil {
				t.Fatal(err)
			}
			if !rows.Next() {
				t.Fatalf("row %d: %v", n, rows.Err())
			}
			fds := rows.FieldDescriptions()
			if !fastMoves(fds) {
				t.Fatalf("fastMoves refuses the columns %v", fds)
			}
			v, mv, solo, w, ok := readMove(fds, rows.RawValues())
			var (
				wantMv, wantSolo bool
				notified, wantW  int64
			)
			want, err := scanVerdict(rows, &wantMv, &notified, &wantSolo, &wantW)
			rows.Close()
			switch {
			case err != nil && ok:
				t.Errorf("row %d: scanVerdict fails (%v), readMove returns %+v", n, err, v)
			case err == nil && !ok:
				t.Errorf("row %d: readMove declines a row scanVerdict reads: %+v", n, want)
			case ok:
				fast++
				if !reflect.DeepEqual(v, want) || mv != wantMv || solo != wantSolo || w != wantW {
					t.Errorf("row %d: readMove\n%+v %v %v %d\nscanVerdict\n%+v %v %v %d", n, v, mv, solo, w, want, wantMv, wantSolo, wantW)
				}
			}
		}
	}
	if fast != 2*7 {
		t.Errorf("readMove read %d rows; want 14", fast)
	}
}

// TestGroupStatementsReadFast: what the sole, advance and settle
// statements return is read by readMove (fastMoves accepts it).
func TestGroupStatementsReadFast(t *testing.T) {
	s, _ := newStore(t, Options{})
	ctx := context.Background()
	a := Advance{Table: "s.t", QueryID: "q", FinalizedUntil: at(12, 0), Sources: []string{"x"}, EndOffset: []byte(`{"o":1}`)}
	if _, _, err := s.Advance(ctx, a); err != nil { // the first verdict: the advance statement
		t.Fatal(err)
	}
	b := &batch{as: []Advance{a}}
	r, err := newBatchRow(0, a)
	if err != nil {
		t.Fatal(err)
	}
	k := feederKey{a.Table, a.QueryID}
	b.rows.put(k, r)
	c := b.columns([]feederKey{k})
	payload := c.payloads[0] + c.untils[0].Format(time.RFC3339Nano) + s.n.notifyEnd
	for name, q := range map[string]struct {
		sql  string
		args []any
	}{
		"sole":    {s.sql.sole, []any{c.tables, c.feeders, c.untils, c.ends, c.offsets, c.runs, c.batches, c.srcs, c.payloads, c.knowns}},
		"soleOne": {s.sql.soleOne, []any{c.tables[0], c.untils[0], c.ends[0], c.offsets[0], c.feeders[0], c.runs[0], c.batches[0], payload, c.srcs[0], c.knowns[0]}},
		"advance": {s.sql.advance, []any{c.tables, c.feeders, c.names, c.untils, c.ends, c.offsets, c.runs, c.batches, c.srcs, c.payloads, c.knowns}},
		"settle":  {s.sql.settle, []any{c.tables, c.payloads}},
	} {
		rows, err := s.pool.Query(ctx, q.sql, q.args...)
		if err != nil {
			t.Fatal(name, err)
		}
		if !rows.Next() {
			t.Fatalf("%s: no row: %v", name, rows.Err())
		}
		if !fastMoves(rows.FieldDescriptions()) {
			t.Errorf("%s: readMove cannot read its rows: %v", name, rows.FieldDescriptions())
		}
		rows.Close()
	}
}

// FuzzReadSources: readSources returns what json.Unmarshal into a
// []string returns (errors ignored), on any input.
func FuzzReadSources(f *testing.F) {
	for _, s := range []string{`[]`, `["a"]`, `["a", "b"]`, ` [ "a" , "b" ] `, `["a","b"]`, `["a\"b"]`, `["é"]`, "[\"\xff\"]", `null`,
		`["a", 1]`, `{"a": "b"}`, `["a",]`, `["a"]]`, `[["a"]]`, `"a"`, `["\u00e9"]`, "[\"a\tb\"]", `[ ]`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, src []byte) {
		var want []string
		_ = json.Unmarshal(src, &want)
		if got := readSources(src); !reflect.DeepEqual(got, want) {
			t.Errorf("readSources(%q) = %#v, json.Unmarshal %#v", src, got, want)
		}
	})
}

// FuzzSourcesJSON: sourcesJSON writes what json.Marshal and jsonbSafe
// write, on any descriptions.
func FuzzSourcesJSON(f *testing.F) {
	for _, s := range []string{"", "a", "kafka[t]", `b"c`, "é", "<&>", "\x00", "\xff", "a\\b", "\u2028"} {
		f.Add(s, "x", 2)
	}
	f.Fuzz(func(t *testing.T, a, b string, n int) {
		descs := []string{a, b, a + b}[:max(0, n%4)]
		want, err := json.Marshal(descs)
		if err != nil {
			t.Fatal(err)
		}
		got, err := sourcesJSON(descs)
		if err != nil || got != string(jsonbSafe(want)) {
			t.Errorf("sourcesJSON(%q) = %v, %v; want %s", descs, got, err, jsonbSafe(want))
		}
	})
}
