package main

import (
	"bytes"
	"encoding/json"
	"net"
	"net/http"
	"net/http/httptest"
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
	attachJoinWaits(tables, joinWaitsByTable([]finalizer.JoinWait{{Table: "silver.all", QueryID: "0b0b0b0b-bc9c-4be8-97a9-b135d2943028",
		QueryName: "region-eu", RunID: "0b7e5a52-9c1d-4e2f-a3b4-c5d6e7f8a9b0", Since: at,
		LastError: "join feeder: postgresql unavailable"}}))
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

// TestStatusSaysTheJoinWaitsWhilePostgresIsDown: while PostgreSQL is down
// a new feeder's join is retried and its table does not move, but status
// only failed (exit 2) on the control table it could not read: the wait
// showed only in /v1/runs and a metric. It now prints the join waits the
// service reports (only --table's), as text or JSON, and still exits 2.
func TestStatusSaysTheJoinWaitsWhilePostgresIsDown(t *testing.T) {
	at := time.Date(2026, 9, 28, 14, 30, 0, 0, time.UTC)
	waits := []finalizer.JoinWait{
		{Table: "silver.all", QueryID: "0b0b0b0b-bc9c-4be8-97a9-b135d2943028", QueryName: "region-eu",
			RunID: "0b7e5a52-9c1d-4e2f-a3b4-c5d6e7f8a9b0", Since: at, LastError: "join feeder: postgresql unavailable"},
		{Table: "silver.other", QueryID: "0c0c0c0c-bc9c-4be8-97a9-b135d2943028", Since: at},
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/v1/runs" {
			http.NotFound(w, r)
			return
		}
		_ = json.NewEncoder(w).Encode(map[string]any{"runs": []finalizer.TrackerStatus{}, "join_waits": waits})
	}))
	defer srv.Close()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	down := "postgres://u:secret@" + ln.Addr().String() + "/db?sslmode=disable&connect_timeout=2"
	ln.Close() // nothing listens: PostgreSQL down

	code, out, errOut := runCLI(t, "status", "--postgres-url", down, "--http-url", srv.URL)
	if code != exitUsage {
		t.Fatalf("exit %d, want %d; stderr %q", code, exitUsage, errOut)
	}
	for _, want := range []string{
		"silver.all is held until query region-eu (run 0b7e5a52) joins its feeders (waiting since 2026-09-28T14:30:00Z; retried: join feeder: postgresql unavailable)",
		"silver.other is held until query ",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("status with PostgreSQL down does not say %q:\n%s", want, out)
		}
	}
	if strings.Contains(out+errOut, "secret") {
		t.Errorf("the password shown: %q %q", out, errOut)
	}

	code, out, _ = runCLI(t, "status", "--table", "silver.other", "--json", "--postgres-url", down, "--http-url", srv.URL)
	var doc struct {
		JoinWaits []finalizer.JoinWait `json:"join_waits"`
	}
	if err := json.Unmarshal([]byte(out), &doc); err != nil || code != exitUsage {
		t.Fatalf("--json: exit %d, %v:\n%s", code, err, out)
	}
	if len(doc.JoinWaits) != 1 || doc.JoinWaits[0].Table != "silver.other" {
		t.Errorf("--table silver.other --json: join waits %+v", doc.JoinWaits)
	}

	// No table waits: nothing printed but the error.
	code, out, _ = runCLI(t, "status", "--table", "silver.none", "--postgres-url", down, "--http-url", srv.URL)
	if code != exitUsage || out != "" {
		t.Errorf("no wait of the table: exit %d, stdout %q", code, out)
	}
}
