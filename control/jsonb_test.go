package control

import (
	"context"
	"encoding/json"
	neturl "net/url"
	"strings"
	"testing"
)

func TestJSONBSafe(t *testing.T) {
	for _, tc := range []struct {
		name, in, want string
	}{
		{"plain", `{"commit_ts":"2026-09-28T14:05:00","lsn":"0x27"}`, `{"commit_ts":"2026-09-28T14:05:00","lsn":"0x27"}`},
		{"other escapes kept", `{"a":"\u00e9\n\"\\"}`, `{"a":"\u00e9\n\"\\"}`},
		{"nul escape", `{"a":"x\u0000y"}`, `{"a":"x\\u0000y"}`},
		{"nul escape in a key", `{"k\u0000":1}`, `{"k\\u0000":1}`},
		{"escaped backslash before u0000 is no nul", `{"a":"\\u0000"}`, `{"a":"\\u0000"}`},
		{"lone high surrogate", `{"a":"\ud800"}`, `{"a":"\\ud800"}`},
		{"high surrogate before a non-surrogate", `{"a":"\uD800\u0041"}`, `{"a":"\\uD800\u0041"}`},
		{"lone low surrogate", `["\udc00"]`, `["\\udc00"]`},
		{"surrogate pair kept", `{"a":"\ud83d\ude00"}`, `{"a":"\ud83d\ude00"}`},
		{"invalid utf-8", "{\"a\":\"x\xffy\"}", `{"a":"x\ufffdy"}`},
		{"valid utf-8 kept", `{"a":"é😀"}`, `{"a":"é😀"}`},
		{"numbers and structure untouched", `[1e3,-0.5,true,null,{"u":"\u0000"}]`, `[1e3,-0.5,true,null,{"u":"\\u0000"}]`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := string(jsonbSafe([]byte(tc.in)))
			if got != tc.want {
				t.Fatalf("jsonbSafe(%s) = %s, want %s", tc.in, got, tc.want)
			}
			if !json.Valid([]byte(got)) {
				t.Fatalf("jsonbSafe(%s) = %s is not JSON", tc.in, got)
			}
		})
	}
}

// An end offset holding what jsonb refuses does not block the verdict:
// the advance moves it and stores the offset escaped.
func TestAdvanceOffsetJSONBRefuses(t *testing.T) {
	s, _ := newStore(t, Options{})
	ctx := context.Background()
	for i, off := range []string{`{"commit_ts":"2026-09-28T14:05:00","note":"a\u0000b"}`, `{"x":"\ud800"}`, "{\"x\":\"\xfe\"}"} {
		until := at(14+i, 0)
		v, moved, err := s.Advance(ctx, Advance{Table: "t", FinalizedUntil: until, EndOffset: json.RawMessage(off), RunID: "r", BatchID: int64(i)})
		if err != nil || !moved || !v.FinalizedUntil.Equal(until) {
			t.Fatalf("advance with offset %q: %+v moved=%v err=%v", off, v, moved, err)
		}
		if len(v.EndOffset) == 0 || !json.Valid(v.EndOffset) {
			t.Fatalf("stored offset %q", v.EndOffset)
		}
	}
	v, err := s.Get(ctx, "t")
	if err != nil {
		t.Fatal(err)
	}
	if string(v.EndOffset) != `{"x": "\ufffd"}` && string(v.EndOffset) != `{"x": "�"}` {
		t.Errorf("last stored offset %s", v.EndOffset)
	}
}

// An offset the database refuses even after jsonbSafe (a database whose
// encoding is LATIN1 refuses a \u escape of a character it lacks) is left out:
// the verdict moves with end_offset NULL.
func TestAdvanceOffsetRefusedIsDropped(t *testing.T) {
	_, url := newStore(t, Options{})
	conn := connect(t, url)
	ctx := context.Background()
	u, err := neturl.Parse(url)
	if err != nil {
		t.Fatal(err)
	}
	name := strings.TrimPrefix(u.Path, "/") + "_latin1"
	if _, err := conn.Exec(ctx, `CREATE DATABASE `+name+` ENCODING 'LATIN1' LC_COLLATE 'C' LC_CTYPE 'C' TEMPLATE template0`); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = conn.Exec(context.Background(), `DROP DATABASE IF EXISTS `+name+` WITH (FORCE)`) })
	u.Path = "/" + name
	s := openStore(t, u.String(), Options{})
	if err := s.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	v, moved, err := s.Advance(ctx, Advance{Table: "t", FinalizedUntil: at(14, 0), EndOffset: json.RawMessage(`{"a":"\u4e2d"}`), RunID: "r"})
	if err != nil || !moved || !v.FinalizedUntil.Equal(at(14, 0)) {
		t.Fatalf("advance: %+v moved=%v err=%v", v, moved, err)
	}
	if v.EndOffset != nil {
		t.Errorf("end offset %s, want NULL", v.EndOffset)
	}
}
