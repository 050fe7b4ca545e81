package main

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/finalizer-dev/finalizer/finalizer"
)

// TestStatusSaysATableWaitsForAJoin: a table whose new feeder's join did
// not succeed does not move (its trackers hold their advances until it
// joined). `status` and /v1/tables said nothing of it: a silent "not
// yet". The table's held_by names the query, its run and the error, and
// its join_waits list them.
func TestStatusSaysATableWaitsForAJoin(t *testing.T) {
	at := time.Date(2026, 9, 28, 14, 30, 0, 0, time.UTC)
	tables := []tableStatus{
		{Table: "silver.all", FinalizedUntil: at, UpdatedAt: at},
		{Table: "silver.other", FinalizedUntil: at, UpdatedAt: at},
	}
	attachJoinWaits(tables, []finalizer.JoinWait{{Table: "silver.all", QueryID: "0b0b0b0b-bc9c-4be8-97a9-b135d2943028",
		QueryName: "region-eu", RunID: "0b7e5a52-9c1d-4e2f-a3b4-c5d6e7f8a9b0", Since: at,
		LastError: "join feeder: postgresql unavailable"}})
	if len(tables[0].JoinWaits) != 1 || tables[1].JoinWaits != nil || tables[1].HeldBy != "" {
		t.Fatalf("join waits attached: %+v", tables)
	}
	want := "held until query region-eu (run 0b7e5a52) joins its feeders (waiting since 2026-09-28T14:30:00Z; retried: join feeder: postgresql unavailable)"
	if tables[0].HeldBy != want {
		t.Errorf("held_by = %q, want %q", tables[0].HeldBy, want)
	}
	var out bytes.Buffer
	printStatus(&out, tables, nil, nil, "")
	if !strings.Contains(out.String(), "silver.all is "+want) {
		t.Errorf("status does not say why silver.all waits:\n%s", out.String())
	}
}
