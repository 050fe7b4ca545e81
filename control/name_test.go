package control

import (
	"context"
	"errors"
	"strings"
	"testing"
)

func TestParseTableName(t *testing.T) {
	for _, tc := range []struct {
		in           string
		schema, name string
		bad          bool
	}{
		{in: "public.table_finalization", schema: "public", name: "table_finalization"},
		{in: "table_finalization", schema: "public", name: "table_finalization"},
		{in: "Ops.Verdicts", schema: "ops", name: "verdicts"},
		{in: "_s.t$1", schema: "_s", name: "t$1"},
		{in: "select.user", schema: "select", name: "user"}, // keywords are fine: always quoted
		{in: "", bad: true},
		{in: ".t", bad: true},
		{in: "s.", bad: true},
		{in: "a.b.c", bad: true},
		{in: `x"; DROP TABLE y; --`, bad: true},
		{in: `"quoted".t`, bad: true},
		{in: "s.t;", bad: true},
		{in: "s.t x", bad: true},
		{in: "1t", bad: true},
		{in: "s.tä", bad: true},
		{in: "s." + strings.Repeat("n", 56), schema: "s", name: strings.Repeat("n", 56)},
		{in: "s." + strings.Repeat("n", 57), bad: true}, // no room for _schema
		{in: strings.Repeat("s", 64) + ".t", bad: true},
	} {
		t.Run(tc.in, func(t *testing.T) {
			schema, name, err := ParseTableName(tc.in)
			if tc.bad {
				if !errors.Is(err, ErrInvalidName) {
					t.Fatalf("ParseTableName(%q) = %q, %q, %v; want ErrInvalidName", tc.in, schema, name, err)
				}
				return
			}
			if err != nil || schema != tc.schema || name != tc.name {
				t.Fatalf("ParseTableName(%q) = %q, %q, %v; want %q, %q", tc.in, schema, name, err, tc.schema, tc.name)
			}
		})
	}
}

func TestOpenRejectsBadName(t *testing.T) {
	_, err := Open(context.Background(), "postgres://127.0.0.1:1/x", Options{Table: `t"; DROP TABLE x; --`})
	if !errors.Is(err, ErrInvalidName) {
		t.Fatalf("err = %v, want ErrInvalidName", err)
	}
}
