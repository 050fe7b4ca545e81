package main

import (
	"bytes"
	"strings"
	"testing"
	"time"
)

// statusAt is the time the status tests' tables were moved at.
var statusAt = time.Date(2026, 9, 28, 14, 30, 0, 0, time.UTC)

// printed is status's text for tables, with no runs known.
func printed(tables ...tableStatus) string {
	var out bytes.Buffer
	printStatus(&out, tables, nil, nil, "")
	return out.String()
}

// TestStatusAfterARewindNamesNoBatch: a rewound table's control row has no
// run and no batch (its batch_id is NULL, read as 0); `status` printed its
// BATCH as 0, which reads as a run's first batch (a reset's sign). It
// prints "-" for BY RUN and BATCH, and a run's move as before.
func TestStatusAfterARewindNamesNoBatch(t *testing.T) {
	at := statusAt
	lines := strings.Split(printed(
		tableStatus{Table: "bronze.orders", FinalizedUntil: at, UpdatedAt: at, RewoundAt: at},
		tableStatus{Table: "bronze.users", FinalizedUntil: at, UpdatedAt: at, RunID: "0b7e5a52-9c1d-4e2f-a3b4-c5d6e7f8a9b0", BatchID: new(int64(7))},
	), "\n")
	if f := strings.Fields(lines[1]); len(f) != 6 || f[0] != "bronze.orders" || f[4] != "-" || f[5] != "-" {
		t.Errorf("rewound table's line: %q", lines[1])
	}
	if f := strings.Fields(lines[2]); len(f) != 6 || f[4] != "0b7e5a52" || f[5] != "7" {
		t.Errorf("a run's move: %q", lines[2])
	}
}
