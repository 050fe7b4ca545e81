package main

import (
	"strings"
	"testing"
	"time"

	"github.com/finalizer-dev/finalizer/control"
)

// TestPrintFeedersNames: an expected feeder's configured name is shown in
// full (it was cut to 8 characters like an id, so region-us and region-eu
// both read "region-"), a query id is shortened.
func TestPrintFeedersNames(t *testing.T) {
	var b strings.Builder
	printFeeders(&b, []tableStatus{{Table: "silver.all", HeldBy: "x", Feeders: []feederStatus{
		{Feeder: "region-us", Expected: true, State: "never reported"},
		{Feeder: "region-eu", Expected: true, State: "never reported"},
		{Feeder: "11111111-1111-4111-8111-111111111111", QueryName: "region-ap", FinalizedUntil: time.Date(2026, 9, 28, 12, 0, 0, 0, time.UTC), State: "reporting"},
	}}})
	out := b.String()
	for _, want := range []string{"region-us ", "region-eu ", "11111111 "} {
		if !strings.Contains(out, want) {
			t.Errorf("no %q in\n%s", want, out)
		}
	}
	if strings.Contains(out, "11111111-1111") {
		t.Errorf("a query id not shortened:\n%s", out)
	}
}

// TestHeldByNotExpected: a tracked feeder without a verdict of its own is
// not called "expected" (only the config's feeders: are).
func TestHeldByNotExpected(t *testing.T) {
	if got := heldBy(control.Feeder{Feeder: "id", QueryName: "region-us"}, "reporting", false); strings.Contains(got, "expected") || !strings.Contains(got, "region-us") {
		t.Errorf("heldBy = %q", got)
	}
	if got := heldBy(control.Feeder{Feeder: "region-us", Expected: true}, "never reported", false); got != "held by region-us: expected, never reported" {
		t.Errorf("heldBy = %q", got)
	}
}
