package main

import (
	"strings"
	"testing"

	"github.com/finalizer-dev/finalizer/finalizer"
)

// TestNegativeTimeoutIsAUsageError: a mistyped --timeout -5s used to make
// wait block forever (a negative timeout read as "no timeout"); a
// scheduler then hangs on a typo. It exits 2 at once, before any
// connection is tried.
func TestNegativeTimeoutIsAUsageError(t *testing.T) {
	for _, args := range [][]string{
		{"wait", "--table", "t", "--until", "2026-09-28T15:00:00Z", "--timeout", "-5s"},
		{"join", "--run-id", "e225d92f-2545-48f8-87a2-9c0309580f8a", "--timeout", "-5s"},
	} {
		code, _, errOut := runCLI(t, args...)
		if code != 2 || !strings.Contains(errOut, "negative") {
			t.Errorf("%s: exit %d, want 2 naming the negative timeout\n%s", args[0], code, errOut)
		}
	}
}

// TestRuleCouldWrite: a rule whose template takes the query's name from
// the table covers only the names its query pattern tracks, so a typo
// under a templated prefix (bronze.nope under cdc_* -> bronze.{name}) is
// an unknown table (exit 3), not a wait on a table nothing will write.
func TestRuleCouldWrite(t *testing.T) {
	id := "e225d92f-2545-48f8-87a2-9c0309580f8a"
	cases := []struct {
		rule  finalizer.Rule
		table string
		want  bool
	}{
		{finalizer.Rule{Table: "bronze.orders", Query: "orders"}, "bronze.orders", true},
		{finalizer.Rule{Table: "bronze.orders", Query: "orders"}, "bronze.order", false},
		{finalizer.Rule{Table: "bronze.{name}", Query: "cdc_*"}, "bronze.cdc_orders", true},
		{finalizer.Rule{Table: "bronze.{name}", Query: "cdc_*"}, "bronze.nope", false},
		{finalizer.Rule{Table: "bronze.{name}", Query: "*"}, "bronze.nope", true},
		{finalizer.Rule{Table: "silver.{name}", Query: "cdc_*"}, "bronze.cdc_orders", false},
		{finalizer.Rule{Table: "{name}.{name}", Query: "a*"}, "ab.ab", true},
		{finalizer.Rule{Table: "{name}.{name}", Query: "a*"}, "ab.ac", false},
		{finalizer.Rule{Table: "q_{id}", Query: "orders"}, "q_" + id, true},
		{finalizer.Rule{Table: "{name}_{id}", Query: id}, "anything_" + id, true},
		{finalizer.Rule{Table: "{name}_{id}", Query: id}, "anything_other", false},
	}
	for _, c := range cases {
		if got := ruleCouldWrite(c.rule, c.table); got != c.want {
			t.Errorf("rule %s <- %s, table %s: %v, want %v", c.rule.Table, c.rule.Query, c.table, got, c.want)
		}
	}
}
