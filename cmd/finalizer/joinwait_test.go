package main

import (
	"encoding/json"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"

	"github.com/finalizer-dev/finalizer/control"
	"github.com/finalizer-dev/finalizer/finalizer"
)

// TestStatusSaysATableWaitsForAJoin: a table whose new feeder's join did
// not succeed does not move (its trackers hold their advances until it
// joined). `status` and /v1/tables said nothing of it: a silent "not
// yet". The table's held_by names the query, its run and the error, and
// its join_waits list them.
func TestStatusSaysATableWaitsForAJoin(t *testing.T) {
	at := statusAt
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
	if out := printed(tables...); !strings.Contains(out, "silver.all is "+want) {
		t.Errorf("status does not say why silver.all waits:\n%s", out)
	}
}

// TestStatusSaysTheJoinWaitsWhilePostgresIsDown: while PostgreSQL is down
// a new feeder's join is retried and its table does not move, but status
// only failed (exit 2) on the control table it could not read: the wait
// showed only in /v1/runs and a metric. It now prints the join waits the
// service reports (only --table's), as text or JSON, and still exits 2.
func TestStatusSaysTheJoinWaitsWhilePostgresIsDown(t *testing.T) {
	at := statusAt
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

// TestATableHeldByAJoinBeforeItsFirstRowIsListed: a new feeder's join that
// did not succeed wrote no row, so a table with no verdict and no other
// feeder yet was in no listing while that join held it: /v1/tables and
// status left it out, and an operator could not see why it was not
// final. It is listed, held by the join, in its place in the pages.
func TestATableHeldByAJoinBeforeItsFirstRowIsListed(t *testing.T) {
	at := statusAt
	wait := func(table string) []finalizer.JoinWait {
		return []finalizer.JoinWait{{Table: table, QueryID: "0b0b0b0b-bc9c-4be8-97a9-b135d2943028", QueryName: "region-eu", Since: at}}
	}
	waits := map[string][]finalizer.JoinWait{"b.new": wait("b.new"), "d.fed": wait("d.fed"), "z.late": wait("z.late"), "a.early": wait("a.early")}
	vs := []control.Verdict{{Table: "c.old", FinalizedUntil: at}}
	fs := []control.Feeder{{Table: "d.fed", Feeder: "q1"}}

	// One page (after "a.early", through "d.fed"), as /v1/tables reads it:
	// the tables without a row in that range are added, no other.
	got := withWaitingTables(vs, fs, waits, "a.early", "d.fed")
	var names []string
	for _, v := range got {
		names = append(names, v.Table)
	}
	if want := []string{"c.old", "b.new"}; !slices.Equal(names, want) {
		t.Fatalf("page's verdicts %v, want %v", names, want)
	}
	page, next := tablesPage(vs, fs, nil, waits, "a.early", "d.fed", 3, at)
	if next != "d.fed" {
		t.Errorf("next = %q, want d.fed", next)
	}
	if len(page) != 3 || page[0].Table != "b.new" || !strings.HasPrefix(page[0].HeldBy, "held until query region-eu joins its feeders") ||
		len(page[0].JoinWaits) != 1 || !page[0].FinalizedUntil.IsZero() {
		t.Fatalf("page %+v, want b.new first, held by its join", page)
	}
	// A page of 2: the added table takes its place, and the next page
	// starts after the last name shown.
	page, next = tablesPage(vs, fs, nil, waits, "a.early", "d.fed", 2, at)
	if len(page) != 2 || page[0].Table != "b.new" || page[1].Table != "c.old" || next != "c.old" {
		t.Errorf("page of 2: %v, next %q; want b.new, c.old, next c.old", page, next)
	}
	page, next = tablesPage(nil, fs, nil, waits, "c.old", "", 2, at)
	if len(page) != 2 || page[0].Table != "d.fed" || page[1].Table != "z.late" || next != "" {
		t.Errorf("last page: %v, next %q; want d.fed, z.late, next empty", page, next)
	}
	// The last page (no bound) takes every name after after.
	got = withWaitingTables(nil, nil, waits, "d.fed", "")
	if len(got) != 1 || got[0].Table != "z.late" {
		t.Errorf("last page's verdicts %+v, want z.late", got)
	}
	if got := withWaitingTables(vs, fs, nil, "", ""); len(got) != 1 {
		t.Errorf("no join waits: %+v", got)
	}

	// status, every table: the one held before its first row is shown.
	statuses := tableStatuses(withWaitingTables(vs, fs, waits, "", ""), fs, nil, at, "")
	attachJoinWaits(statuses, waits)
	out := printed(statuses...)
	for _, want := range []string{"b.new is held until query region-eu", "z.late is held until query region-eu", "a.early"} {
		if !strings.Contains(out, want) {
			t.Errorf("status lacks %q:\n%s", want, out)
		}
	}
}

// A table held by a join before its first row is one the service writes:
// status --table, is-final and wait do not call it unknown (exit 3, a
// typo) but not final yet.
func TestATableHeldByAJoinIsKnown(t *testing.T) {
	waits := []finalizer.JoinWait{{Table: "b.new", QueryID: "q"}}
	runs := []finalizer.TrackerStatus{{Table: "c.old"}}
	for table, want := range map[string]bool{"b.new": true, "c.old": true, "b.nwe": false} {
		if got := serviceWrites(runs, waits, table); got != want {
			t.Errorf("serviceWrites(%s) = %v, want %v", table, got, want)
		}
	}
}
