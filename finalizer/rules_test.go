package finalizer_test

import (
	"context"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/finalizer-dev/finalizer/finalizer"
	"github.com/finalizer-dev/finalizer/listener"
	"github.com/finalizer-dev/finalizer/progress"
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

// Issue 18: `*` stopped at `/` (path.Match), so a query named
// ingest/orders was silently untracked by `query: "ingest*"`. A query name
// is not a path: `*` matches any characters.
func TestMatchQuery(t *testing.T) {
	tests := []struct {
		pattern, s string
		want       bool
	}{
		{"ingest*", "ingest/orders", true},
		{"ingest*", "ingest.orders/eu", true},
		{"*orders", "ingest/eu/orders", true},
		{"ingest/*", "ingest/orders", true},
		{"ingest/*", "ingest_orders", false},
		{"ingest*", "Ingest/orders", false}, // case-sensitive
		{"cdc_?", "cdc_a", true},
		{"cdc_?", "cdc_ab", false},
		{"region-[a-e]u", "region-eu", true},
		{"region-[!a-e]u", "region-eu", false},
		{"region-[^a-e]u", "region-us", false},
		{"region-[^a-e]u", "region-xu", true}, // path.Match's negation still reads as one
		{"{orders,users}_raw", "users_raw", true},
		{`lit\*`, "lit*", true},
		{`lit\*`, "litx", false},
		{"exact", "exact", true},
		{"exact", "exactly", false},
		{"[", "[", false}, // does not compile: matches nothing
	}
	for _, tt := range tests {
		if got := finalizer.MatchQuery(tt.pattern, tt.s); got != tt.want {
			t.Errorf("MatchQuery(%q, %q) = %v, want %v", tt.pattern, tt.s, got, tt.want)
		}
	}
	if err := (finalizer.Rule{Table: "t", Query: "["}).Validate(); err == nil {
		t.Error("Validate accepted a pattern that does not compile")
	}
	if table, ok := (finalizer.Rule{Table: "bronze.{name}", Query: "ingest*"}).Match("q", "ingest/orders"); !ok || table != "bronze.ingest/orders" {
		t.Errorf("Match = %q, %v", table, ok)
	}
}

// Issue 18: a name that no rule matches but that is one case or separator
// away from a rule's query is said at WARN with the rule (a silent "not
// yet" says why); a name far from every rule stays a debug line.
func TestNearMissIsLogged(t *testing.T) {
	core, logs := observer.New(zapcore.DebugLevel)
	reg := finalizer.NewRegistry(finalizer.RegistryConfig{
		Bus: newFakeBus(), Store: newFakeStore(), Logger: zap.New(core),
		Rules: []finalizer.Rule{{Table: "bronze.{name}", Query: "ingest_*", Spec: hourSpec(t)}},
	})
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = reg.Close(ctx)
	})
	near, far := "00000000-0000-4000-8000-000000000001", "00000000-0000-4000-8000-000000000002"
	reg.Discovered(listener.Run{QueryID: queryA, RunID: near, Name: "Ingest-orders", Kind: progress.KindStarted})
	reg.Discovered(listener.Run{QueryID: queryA, RunID: far, Name: "reporting", Kind: progress.KindStarted})
	eventually(t, "both runs decided", func() bool { return reg.Known(near) && reg.Known(far) })
	warned := logs.FilterLevelExact(zapcore.WarnLevel).FilterField(zap.String("name", "Ingest-orders"))
	if warned.Len() != 1 || warned.All()[0].ContextMap()["rule_query"] != "ingest_*" {
		t.Fatalf("near miss: %d warnings %v, want one naming the rule ingest_*", warned.Len(), warned.All())
	}
	if n := logs.FilterLevelExact(zapcore.WarnLevel).FilterField(zap.String("name", "reporting")).Len(); n != 0 {
		t.Errorf("a far name warned %d times", n)
	}
	if len(reg.Status()) != 0 {
		t.Errorf("a near miss was tracked: %+v", reg.Status())
	}
}
