package finalizer_test

import (
	"testing"

	"github.com/finalizer-dev/finalizer/finalizer"
)

func TestRuleMatch(t *testing.T) {
	const id = "8d268dc2-bc9c-4be8-97a9-b135d2943028"
	tests := []struct {
		name      string
		rule      finalizer.Rule
		queryName string
		table     string
		ok        bool
	}{
		{"by name", finalizer.Rule{Table: "bronze.orders", Query: "orders-v1"}, "orders-v1", "bronze.orders", true},
		{"other name", finalizer.Rule{Table: "bronze.orders", Query: "orders-v1"}, "orders-v2", "", false},
		{"by id", finalizer.Rule{Table: "t", Query: id}, "", "t", true},
		{"glob with template", finalizer.Rule{Table: "bronze.{name}", Query: "cdc_*"}, "cdc_customers", "bronze.cdc_customers", true},
		{"glob misses", finalizer.Rule{Table: "bronze.{name}", Query: "cdc_*"}, "orders", "", false},
		{"id template", finalizer.Rule{Table: "t_{id}", Query: "*"}, "", "t_" + id, true},
		{"name template without a name", finalizer.Rule{Table: "bronze.{name}", Query: "*"}, "", "", false},
		{"glob on id", finalizer.Rule{Table: "t", Query: "8d268dc2-*"}, "x", "t", true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			table, ok := tc.rule.Match(id, tc.queryName)
			if ok != tc.ok || table != tc.table {
				t.Fatalf("Match = %q, %v; want %q, %v", table, ok, tc.table, tc.ok)
			}
		})
	}
}

func TestRuleValidate(t *testing.T) {
	bad := []finalizer.Rule{
		{Table: "", Query: "q"},
		{Table: "t", Query: ""},
		{Table: "t", Query: "[a-"},
		{Table: "bronze.{nmae}", Query: "q"},
	}
	for _, r := range bad {
		if err := r.Validate(); err == nil {
			t.Errorf("Validate(%+v) = nil, want an error", r)
		}
	}
	if err := (finalizer.Rule{Table: "bronze.{name}_{id}", Query: "cdc_*"}).Validate(); err != nil {
		t.Errorf("valid rule rejected: %v", err)
	}
}

// The feeders of a rule (ADR 0015): expected feeders need one table, and
// retire takes one of its two values.
func TestRuleFeedersValidate(t *testing.T) {
	for name, tc := range map[string]struct {
		rule finalizer.Rule
		ok   bool
	}{
		"feeders of one table":   {finalizer.Rule{Table: "silver.all", Query: "region-*", Feeders: []string{"region-us", "region-eu"}}, true},
		"feeders of a template":  {finalizer.Rule{Table: "silver.{name}", Query: "region-*", Feeders: []string{"region-us"}}, false},
		"an empty feeder":        {finalizer.Rule{Table: "silver.all", Query: "region-*", Feeders: []string{" "}}, false},
		"retire on a clean end":  {finalizer.Rule{Table: "t", Query: "backfill", Retire: finalizer.RetireOnCleanTermination}, true},
		"retire never":           {finalizer.Rule{Table: "t", Query: "backfill", Retire: finalizer.RetireNever}, true},
		"retire on failure, too": {finalizer.Rule{Table: "t", Query: "backfill", Retire: "always"}, false},
	} {
		t.Run(name, func(t *testing.T) {
			if err := tc.rule.Validate(); (err == nil) != tc.ok {
				t.Errorf("Validate = %v, want ok %v", err, tc.ok)
			}
		})
	}
}
