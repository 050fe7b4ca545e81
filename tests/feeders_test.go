//go:build linux

package tests

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/nats-io/nats.go"

	"github.com/finalizer-dev/finalizer/internal/embeddednats"
	"github.com/finalizer-dev/finalizer/internal/pgcluster/pgtest"
)

// Tables written by several queries (ADR 0015).

// tableDoc is GET /v1/tables/{table} as the feeder tests read it.
type tableDoc struct {
	Table          string    `json:"table"`
	FinalizedUntil time.Time `json:"finalized_until"`
	HeldBy         string    `json:"held_by"`
	Feeders        []struct {
		Feeder         string    `json:"feeder"`
		QueryName      string    `json:"query_name"`
		FinalizedUntil time.Time `json:"finalized_until"`
		Expected       bool      `json:"expected"`
		RetiredAt      time.Time `json:"retired_at"`
		State          string    `json:"state"`
		Holds          bool      `json:"holds"`
	} `json:"feeders"`
}

// holdsAt waits a moment for anything in flight, then checks that the
// table's verdict is still want ("" = no row).
func holdsAt(t *testing.T, pgURL, table, want string) {
	t.Helper()
	time.Sleep(700 * time.Millisecond)
	r, ok := readRow(t, pgURL, table)
	switch {
	case want == "" && ok:
		t.Fatalf("%s final until %v, want no verdict yet", table, r.FinalizedUntil)
	case want != "" && (!ok || !r.FinalizedUntil.Equal(utc(want))):
		t.Fatalf("%s at %v (row %v), want held at %s", table, r.FinalizedUntil, ok, want)
	}
}

// The scenario: region-us has committed up to 12:30, region-eu up
// to 14:05, hourly periods, one rule writing both into silver.all. The
// table stays at 12:00 until region-us passes 14:00, then moves; the API,
// the status and the metrics say who holds it.
func TestSeveralQueriesIntoOneTable(t *testing.T) {
	pgURL := pgtest.URL(t)
	s := startServe(t, serveOpts{pgURL: pgURL, config: `
tables:
  - table: silver.all
    query: "region-*"
`})
	pub := connect(t, s.natsURL)
	us, usRun, eu, euRun := id(0x1001), id(0x1002), id(0x1003), id(0x1004)
	watch := watchVerdict(t, pgURL, "silver.all")
	pub.publish("progress", us, usRun, progressAt(us, usRun, "region-us", 1, "2026-09-28T12:30:00"))
	waitVerdict(t, pgURL, "silver.all", "2026-09-28T12:00:00Z")
	pub.publish("progress", eu, euRun, progressAt(eu, euRun, "region-eu", 1, "2026-09-28T14:05:00"))
	eventually(t, "region-eu to be a feeder", func() bool {
		var doc tableDoc
		getJSON(t, s.httpURL+"/v1/tables/silver.all", &doc)
		return len(doc.Feeders) == 2
	})
	holdsAt(t, pgURL, "silver.all", "2026-09-28T12:00:00Z")

	var doc tableDoc
	if code := getJSON(t, s.httpURL+"/v1/tables/silver.all", &doc); code != http.StatusOK {
		t.Fatalf("GET /v1/tables/silver.all: %d", code)
	}
	if doc.HeldBy != "held by region-us at 2026-09-28T12:00:00Z" {
		t.Errorf("held_by = %q", doc.HeldBy)
	}
	for _, f := range doc.Feeders {
		if f.Holds != (f.QueryName == "region-us") || f.State != "reporting" {
			t.Errorf("feeder %+v", f)
		}
	}
	if v := sample(t, s.httpURL, fmt.Sprintf(`finalizer_table_held{feeder=%q,query_name="region-us",table="silver.all"}`, us)); v != 1 {
		t.Errorf("finalizer_table_held of region-us = %v, want 1", v)
	}
	if v := sample(t, s.httpURL, fmt.Sprintf(`finalizer_feeder_watermark_timestamp_seconds{feeder=%q,query_name="region-eu",table="silver.all"}`, eu)); v != float64(utc("2026-09-28T14:00:00Z").Unix()) {
		t.Errorf("region-eu's watermark metric = %v", v)
	}
	code, out, _ := cli(t, nil, "status", "--postgres-url", pgURL, "--http-url", s.httpURL, "--table", "silver.all")
	if code != 0 || !strings.Contains(out, "silver.all is held by region-us at 2026-09-28T12:00:00Z") || !strings.Contains(out, "region-eu") {
		t.Errorf("status: %d\n%s", code, out)
	}
	if code, _, _ := cli(t, nil, "is-final", "--postgres-url", pgURL, "--table", "silver.all", "--period-end", "2026-09-28T13:00:00Z"); code != 1 {
		t.Errorf("is-final 13:00 while region-us is at 12:30: exit %d, want 1", code)
	}

	// region-us catches up: 13:10 moves the table to 13:00, 14:10 to
	// 14:00 (region-eu's), not 14:00 on region-us's word alone.
	pub.publish("progress", us, usRun, progressAt(us, usRun, "region-us", 2, "2026-09-28T13:10:00"))
	waitVerdict(t, pgURL, "silver.all", "2026-09-28T13:00:00Z")
	pub.publish("progress", us, usRun, progressAt(us, usRun, "region-us", 3, "2026-09-28T15:10:00"))
	waitVerdict(t, pgURL, "silver.all", "2026-09-28T14:00:00Z")
	holdsAt(t, pgURL, "silver.all", "2026-09-28T14:00:00Z")
	if code, _, _ := cli(t, nil, "is-final", "--postgres-url", pgURL, "--table", "silver.all", "--period-end", "2026-09-28T14:00:00Z"); code != 0 {
		t.Errorf("is-final 14:00: exit %d, want 0", code)
	}
	getJSON(t, s.httpURL+"/v1/tables/silver.all", &doc)
	if doc.HeldBy != "held by region-eu at 2026-09-28T14:00:00Z" {
		t.Errorf("held_by = %q, want region-eu", doc.HeldBy)
	}
	wentOnlyThrough(t, watch.check(t, "2026-09-28T14:00:00Z"), "2026-09-28T12:00:00Z", "2026-09-28T13:00:00Z", "2026-09-28T14:00:00Z")
}

// An expected feeder that never reported holds its table from the start,
// and still does after a restart of the service; once it reports, the
// table follows the slowest.
func TestExpectedFeederHoldsFromTheStart(t *testing.T) {
	ns, err := embeddednats.Start(embeddednats.Options{Port: embeddednats.RandomPort, StoreDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(ns.Shutdown)
	pgURL := pgtest.URL(t)
	config := `
tables:
  - table: silver.all
    query: "region-*"
    feeders: [region-us, region-eu]
`
	s := startServe(t, serveOpts{pgURL: pgURL, natsURL: ns.ClientURL(), config: config})
	pub := connect(t, ns.ClientURL())
	us, usRun, eu, euRun := id(0x1101), id(0x1102), id(0x1103), id(0x1104)
	pub.publish("progress", eu, euRun, progressAt(eu, euRun, "region-eu", 1, "2026-09-28T14:05:00"))
	eventually(t, "region-eu to report", func() bool {
		var doc tableDoc
		return getJSON(t, s.httpURL+"/v1/tables/silver.all", &doc) == http.StatusOK && strings.Contains(doc.HeldBy, "region-us: expected, never reported")
	})
	holdsAt(t, pgURL, "silver.all", "")

	s.stop()
	s = startServe(t, serveOpts{pgURL: pgURL, natsURL: ns.ClientURL(), config: config})
	pub.publish("progress", eu, euRun, progressAt(eu, euRun, "region-eu", 2, "2026-09-28T15:05:00"))
	eventually(t, "region-eu at 15:00 after the restart", func() bool {
		var doc tableDoc
		getJSON(t, s.httpURL+"/v1/tables/silver.all", &doc)
		for _, f := range doc.Feeders {
			if f.QueryName == "region-eu" && f.FinalizedUntil.Equal(utc("2026-09-28T15:00:00Z")) {
				return strings.Contains(doc.HeldBy, "region-us: expected, never reported")
			}
		}
		return false
	})
	holdsAt(t, pgURL, "silver.all", "")

	pub.publish("progress", us, usRun, progressAt(us, usRun, "region-us", 1, "2026-09-28T12:30:00"))
	waitVerdict(t, pgURL, "silver.all", "2026-09-28T12:00:00Z")
	pub.publish("progress", us, usRun, progressAt(us, usRun, "region-us", 2, "2026-09-28T16:10:00"))
	waitVerdict(t, pgURL, "silver.all", "2026-09-28T15:00:00Z")
	code, out, _ := cli(t, nil, "feeders", "list", "--postgres-url", pgURL, "--table", "silver.all")
	if code != 0 || !strings.Contains(out, "reported as query "+us) || !strings.Contains(out, "silver.all is held by region-eu") {
		t.Errorf("feeders list: %d\n%s", code, out)
	}
}

// A backfill next to the live query: the table follows the slower, the
// backfill's clean termination retires it by rule and the table follows
// the live query alone; a new backfill joining behind holds the table
// without moving it back; one that fails is never retired automatically,
// and the CLI, HTTP and NATS retire it.
func TestBackfillLiveAndRetirement(t *testing.T) {
	pgURL := pgtest.URL(t)
	s := startServe(t, serveOpts{pgURL: pgURL, config: `
tables:
  - table: silver.orders
    query: orders-live
  - table: silver.orders
    query: "orders-backfill*"
    retire: on_clean_termination
`})
	pub := connect(t, s.natsURL)
	watch := watchVerdict(t, pgURL, "silver.orders")
	live, liveRun, bf, bfRun := id(0x1201), id(0x1202), id(0x1203), id(0x1204)
	pub.publish("progress", live, liveRun, progressAt(live, liveRun, "orders-live", 1, "2026-09-28T14:05:00"))
	waitVerdict(t, pgURL, "silver.orders", "2026-09-28T14:00:00Z")
	// The backfill joins behind: the table does not move back, and holds.
	pub.publish("progress", bf, bfRun, progressAt(bf, bfRun, "orders-backfill", 1, "2026-09-28T09:30:00"))
	eventually(t, "the backfill to be a feeder", func() bool {
		var doc tableDoc
		getJSON(t, s.httpURL+"/v1/tables/silver.orders", &doc)
		return strings.HasPrefix(doc.HeldBy, "held by orders-backfill at 2026-09-28T09:00:00Z")
	})
	pub.publish("progress", live, liveRun, progressAt(live, liveRun, "orders-live", 2, "2026-09-28T16:05:00"))
	pub.publish("progress", bf, bfRun, progressAt(bf, bfRun, "orders-backfill", 2, "2026-09-28T15:20:00"))
	waitVerdict(t, pgURL, "silver.orders", "2026-09-28T15:00:00Z")
	// Its clean end retires it: the table follows the live query alone.
	pub.publish("terminated", bf, bfRun, terminatedJSON(bf, bfRun))
	waitVerdict(t, pgURL, "silver.orders", "2026-09-28T16:00:00Z")

	// A second backfill (a new checkpoint: a new query id) joins behind
	// and fails: it is not retired, and holds the table; the status says
	// it has no tracked run.
	bf2, bf2Run := id(0x1205), id(0x1206)
	pub.publish("progress", bf2, bf2Run, progressAt(bf2, bf2Run, "orders-backfill-2", 1, "2026-09-28T10:30:00"))
	pub.publish("terminated", bf2, bf2Run, terminatedWithException(bf2, bf2Run))
	eventually(t, "the failed backfill to show", func() bool {
		var doc tableDoc
		getJSON(t, s.httpURL+"/v1/tables/silver.orders", &doc)
		// Its tracker is gone with the run: the query is silent.
		return doc.HeldBy == "held by orders-backfill-2 at 2026-09-28T10:00:00Z (no tracked run)"
	})
	pub.publish("progress", live, liveRun, progressAt(live, liveRun, "orders-live", 3, "2026-09-28T17:05:00"))
	holdsAt(t, pgURL, "silver.orders", "2026-09-28T16:00:00Z")

	// Retired by the CLI: the table moves to the live query's 17:00.
	code, out, e := cli(t, nil, "feeders", "retire", "--postgres-url", pgURL, "--table", "silver.orders", "--query", "orders-backfill-2", "--reason", "failed backfill, rerun later")
	if code != 0 || !strings.Contains(out, "retired feeder "+bf2) || !strings.Contains(out, "final until 2026-09-28T17:00:00Z (moved)") {
		t.Fatalf("feeders retire: %d\n%s\n%s", code, out, e)
	}
	if code, _, _ := cli(t, nil, "feeders", "retire", "--postgres-url", pgURL, "--table", "silver.orders", "--query", "orders-backfill-2"); code != 2 {
		t.Errorf("retiring it again: exit %d, want 2", code)
	}
	wentOnlyThrough(t, watch.check(t, "2026-09-28T17:00:00Z"), "2026-09-28T14:00:00Z", "2026-09-28T15:00:00Z", "2026-09-28T16:00:00Z", "2026-09-28T17:00:00Z")

	// The HTTP and NATS twins: a third and a fourth backfill, retired.
	bf3, bf3Run, bf4, bf4Run := id(0x1207), id(0x1208), id(0x1209), id(0x120a)
	pub.publish("progress", bf3, bf3Run, progressAt(bf3, bf3Run, "orders-backfill-3", 1, "2026-09-28T11:30:00"))
	pub.publish("progress", bf4, bf4Run, progressAt(bf4, bf4Run, "orders-backfill-4", 1, "2026-09-28T12:30:00"))
	eventually(t, "both to be feeders", func() bool {
		var doc tableDoc
		getJSON(t, s.httpURL+"/v1/tables/silver.orders", &doc)
		return len(doc.Feeders) == 5
	})
	resp, err := http.Post(s.httpURL+"/v1/tables/silver.orders/feeders/orders-backfill-3/retire", "application/json", strings.NewReader(`{"reason":"done"}`))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Errorf("POST retire: %s", resp.Status)
	}
	nc, err := nats.Connect(s.natsURL)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	msg, err := nc.Request("finalizer.api.feeders.retire", []byte(`{"table":"silver.orders","query":"orders-backfill-4","reason":"done"}`), 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	var reply struct {
		OK             bool     `json:"ok"`
		Error          string   `json:"error"`
		Retired        []string `json:"retired"`
		FinalizedUntil string   `json:"finalized_until"`
	}
	if err := json.Unmarshal(msg.Data, &reply); err != nil || !reply.OK || len(reply.Retired) != 1 || reply.Retired[0] != bf4 {
		t.Errorf("NATS retire reply %s: %+v, %v", msg.Data, reply, err)
	}
	holdsAt(t, pgURL, "silver.orders", "2026-09-28T17:00:00Z")
	pub.publish("progress", live, liveRun, progressAt(live, liveRun, "orders-live", 4, "2026-09-28T18:05:00"))
	waitVerdict(t, pgURL, "silver.orders", "2026-09-28T18:00:00Z")

	// Taken back by the CLI, audited: the failed backfill holds the table
	// again from its 10:00 (the table does not move back), and retired
	// again the table moves on.
	code, out, e = cli(t, nil, "feeders", "unretire", "--postgres-url", pgURL, "--table", "silver.orders", "--query", "orders-backfill-2", "--reason", "rerun", "--by", "alice")
	if code != 0 || !strings.Contains(out, "feeder "+bf2+" (orders-backfill-2) holds the table again, from 2026-09-28T10:00:00Z") {
		t.Fatalf("feeders unretire: %d\n%s\n%s", code, out, e)
	}
	if code, _, _ := cli(t, nil, "feeders", "unretire", "--postgres-url", pgURL, "--table", "silver.orders", "--query", "orders-backfill-2"); code != 2 {
		t.Errorf("unretiring an active feeder: exit %d, want 2", code)
	}
	pub.publish("progress", live, liveRun, progressAt(live, liveRun, "orders-live", 5, "2026-09-28T19:05:00"))
	eventually(t, "the taken-back backfill to hold the table", func() bool {
		var doc tableDoc
		getJSON(t, s.httpURL+"/v1/tables/silver.orders", &doc)
		return strings.HasPrefix(doc.HeldBy, "held by orders-backfill-2 at 2026-09-28T10:00:00Z")
	})
	holdsAt(t, pgURL, "silver.orders", "2026-09-28T18:00:00Z")
	if code, out, _ := cli(t, nil, "audit", "--postgres-url", pgURL, "--table", "silver.orders"); code != 0 ||
		!strings.Contains(out, "unretire") || !strings.Contains(out, "alice") || !strings.Contains(out, "rerun") {
		t.Errorf("audit after unretire: %d\n%s", code, out)
	}
	if code, _, e := cli(t, nil, "feeders", "retire", "--postgres-url", pgURL, "--table", "silver.orders", "--query", bf2); code != 0 {
		t.Fatalf("retire again: %d %s", code, e)
	}
	waitVerdict(t, pgURL, "silver.orders", "2026-09-28T19:00:00Z")

	// The HTTP and NATS twins of unretire.
	resp, err = http.Post(s.httpURL+"/v1/tables/silver.orders/feeders/orders-backfill-3/unretire", "application/json", strings.NewReader(`{"reason":"again","by":"bob"}`))
	if err != nil {
		t.Fatal(err)
	}
	var back struct {
		Unretired []string `json:"unretired"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&back); err != nil || resp.StatusCode != http.StatusOK || len(back.Unretired) != 1 || back.Unretired[0] != bf3 {
		t.Errorf("POST unretire: %s, %+v, %v", resp.Status, back, err)
	}
	resp.Body.Close()
	msg, err = nc.Request("finalizer.api.feeders.unretire", []byte(`{"table":"silver.orders","query":"orders-backfill-4","reason":"again","by":"carol"}`), 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	var unreply struct {
		OK        bool     `json:"ok"`
		Unretired []string `json:"unretired"`
	}
	if err := json.Unmarshal(msg.Data, &unreply); err != nil || !unreply.OK || len(unreply.Unretired) != 1 || unreply.Unretired[0] != bf4 {
		t.Errorf("NATS unretire reply %s: %+v, %v", msg.Data, unreply, err)
	}
	pub.publish("progress", live, liveRun, progressAt(live, liveRun, "orders-live", 6, "2026-09-28T20:05:00"))
	holdsAt(t, pgURL, "silver.orders", "2026-09-28T19:00:00Z")
	if code, out, _ := cli(t, nil, "audit", "--postgres-url", pgURL, "--table", "silver.orders"); code != 0 ||
		strings.Count(out, "unretire") != 3 || !strings.Contains(out, "bob") || !strings.Contains(out, "carol") {
		t.Errorf("audit after three unretires: %d\n%s", code, out)
	}
}

// Two replicas and a kill -9 with several feeders of one table, progress
// replayed and out of order: both replicas reach the same verdict, which
// never moves back and never runs ahead of the slowest query's published
// (so committed) data.
func TestSeveralFeedersTwoReplicasKill9(t *testing.T) {
	ns, err := embeddednats.Start(embeddednats.Options{Port: embeddednats.RandomPort, StoreDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(ns.Shutdown)
	pgURL := pgtest.URL(t)
	config := `
tables:
  - table: silver.all
    query: "region-*"
    granularity: minute
    feeders: [region-a, region-b, region-c]
`
	s1 := startServe(t, serveOpts{pgURL: pgURL, natsURL: ns.ClientURL(), config: config})
	s2 := startServe(t, serveOpts{pgURL: pgURL, natsURL: ns.ClientURL(), config: config})
	pub := connect(t, ns.ClientURL())

	type region struct {
		name, q, r string
		published  atomic.Int64 // the highest minute published (Unix seconds), set before publishing
	}
	regions := []*region{{name: "region-a", q: id(0x1301), r: id(0x1302)}, {name: "region-b", q: id(0x1303), r: id(0x1304)}, {name: "region-c", q: id(0x1305), r: id(0x1306)}}
	slowest := func() time.Time {
		m := int64(1 << 62)
		for _, g := range regions {
			m = min(m, g.published.Load())
		}
		return time.Unix(m, 0).UTC()
	}

	// The checker: reads the control table throughout.
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var checkErr atomic.Value
	wg.Add(1)
	go func() {
		defer wg.Done()
		ctx := context.Background()
		conn, err := pgx.Connect(ctx, pgURL)
		if err != nil {
			checkErr.Store(err.Error())
			return
		}
		defer conn.Close(ctx)
		var last time.Time
		for {
			select {
			case <-stop:
				return
			case <-time.After(5 * time.Millisecond):
			}
			var until time.Time
			err := conn.QueryRow(ctx, `SELECT finalized_until FROM public.table_finalization WHERE table_name = 'silver.all'`).Scan(&until)
			if err == pgx.ErrNoRows {
				continue
			}
			if err != nil {
				checkErr.Store(err.Error())
				return
			}
			until = until.UTC()
			bound := slowest() // read after the row: published only grows
			switch {
			case until.Before(last):
				checkErr.Store(fmt.Sprintf("moved back from %v to %v", last, until))
				return
			case until.After(bound):
				checkErr.Store(fmt.Sprintf("final until %v, ahead of the slowest region's data (%v)", until, bound))
				return
			}
			last = until
		}
	}()

	rnd := rand.New(rand.NewPCG(3, 5))
	publish := func(g *region, b int64, minute int) {
		ts := fmt.Sprintf("2026-09-28T13:%02d:30", minute)
		floor := utc(fmt.Sprintf("2026-09-28T13:%02d:00Z", minute)).Unix()
		if floor > g.published.Load() {
			g.published.Store(floor)
		}
		pub.publish("progress", g.q, g.r, progressAt(g.q, g.r, g.name, b, ts))
	}
	minute := map[*region]int{}
	for b := int64(1); b <= 30; b++ {
		g := regions[rnd.IntN(len(regions))]
		if b <= 3 {
			g = regions[b-1] // each region reports once early
		}
		minute[g] += 1 + rnd.IntN(3)
		publish(g, b, min(minute[g], 59))
		if rnd.IntN(4) == 0 && minute[g] > 2 { // a replay of an older progress
			pub.publish("progress", g.q, g.r, progressAt(g.q, g.r, g.name, b-1, fmt.Sprintf("2026-09-28T13:%02d:10", minute[g]-2)))
		}
		if b == 15 {
			s1.kill()
		}
		time.Sleep(20 * time.Millisecond)
	}
	// Every region ends at the same minute.
	for i, g := range regions {
		publish(g, 100+int64(i), 59)
	}
	final := "2026-09-28T13:59:00Z"
	waitVerdict(t, pgURL, "silver.all", final)
	s1 = startServe(t, serveOpts{pgURL: pgURL, natsURL: ns.ClientURL(), config: config})
	for _, s := range []*proc{s1, s2} {
		var doc tableDoc
		getJSON(t, s.httpURL+"/v1/tables/silver.all", &doc)
		if !doc.FinalizedUntil.Equal(utc(final)) || doc.HeldBy != "" || len(doc.Feeders) != 6 {
			t.Errorf("%s: %+v", s.httpURL, doc)
		}
	}
	close(stop)
	wg.Wait()
	if e := checkErr.Load(); e != nil {
		t.Fatal(e)
	}
}

// A query mapped to the table whose first batch is still running (its
// started event only) holds the table: region-eu's 14:05 must not declare
// 12:00-14:00 final while region-us, started, has not committed anything
// yet. Before, a query became a feeder only at its first verdict, so the
// table followed region-eu alone.
func TestStartedFeederHoldsBeforeItReports(t *testing.T) {
	pgURL := pgtest.URL(t)
	s := startServe(t, serveOpts{pgURL: pgURL, config: `
tables:
  - table: silver.started
    query: "region-*"
`})
	pub := connect(t, s.natsURL)
	us, usRun, eu, euRun := id(0x1101), id(0x1102), id(0x1103), id(0x1104)
	pub.publish("started", us, usRun, startedAtJSON(us, usRun, "region-us", "2026-09-28T10:00:00"))
	eventually(t, "region-us to be a feeder", func() bool {
		var doc tableDoc
		getJSON(t, s.httpURL+"/v1/tables/silver.started", &doc)
		return len(doc.Feeders) == 1
	})
	pub.publish("progress", eu, euRun, progressAt(eu, euRun, "region-eu", 1, "2026-09-28T14:05:00"))
	eventually(t, "region-eu to be a feeder", func() bool {
		var doc tableDoc
		getJSON(t, s.httpURL+"/v1/tables/silver.started", &doc)
		return len(doc.Feeders) == 2
	})
	holdsAt(t, pgURL, "silver.started", "")
	var doc tableDoc
	getJSON(t, s.httpURL+"/v1/tables/silver.started", &doc)
	if !strings.Contains(doc.HeldBy, "region-us") {
		t.Errorf("held_by = %q, want region-us", doc.HeldBy)
	}
	pub.publish("progress", us, usRun, progressAt(us, usRun, "region-us", 1, "2026-09-28T12:30:00"))
	waitVerdict(t, pgURL, "silver.started", "2026-09-28T12:00:00Z")
	pub.publish("progress", us, usRun, progressAt(us, usRun, "region-us", 2, "2026-09-28T15:10:00"))
	waitVerdict(t, pgURL, "silver.started", "2026-09-28T14:00:00Z")
}

// The retire guard: a run that ends cleanly does not retire its query
// (retire: on_clean_termination) while another run of the same query (the
// same checkpoint, started again: a restart that overlapped) is still
// tracked into the table, since that run still writes it; the query is
// retired when its last tracked run ends cleanly.
func TestRetireGuardOverlappingRuns(t *testing.T) {
	pgURL := pgtest.URL(t)
	s := startServe(t, serveOpts{pgURL: pgURL, config: `
tables:
  - table: silver.guard
    query: orders-live
  - table: silver.guard
    query: orders-backfill
    retire: on_clean_termination
`})
	pub := connect(t, s.natsURL)
	live, liveRun, bf, run1, run2 := id(0x1301), id(0x1302), id(0x1303), id(0x1304), id(0x1305)
	// The backfill's two runs first (one feeder: one query id), then the
	// live query, which joins ahead and is held by the backfill.
	pub.publish("progress", bf, run1, progressAt(bf, run1, "orders-backfill", 1, "2026-09-28T12:30:00"))
	pub.publish("progress", bf, run2, progressAt(bf, run2, "orders-backfill", 2, "2026-09-28T13:30:00"))
	waitVerdict(t, pgURL, "silver.guard", "2026-09-28T13:00:00Z")
	pub.publish("progress", live, liveRun, progressAt(live, liveRun, "orders-live", 1, "2026-09-28T16:05:00"))
	eventually(t, "the live query to be a feeder", func() bool {
		var doc tableDoc
		getJSON(t, s.httpURL+"/v1/tables/silver.guard", &doc)
		for _, f := range doc.Feeders {
			if f.Feeder == live && f.FinalizedUntil.Equal(utc("2026-09-28T16:00:00Z")) {
				return true
			}
		}
		return false
	})
	bfActive := func() (active, known bool) {
		var doc tableDoc
		getJSON(t, s.httpURL+"/v1/tables/silver.guard", &doc)
		for _, f := range doc.Feeders {
			if f.Feeder == bf {
				return f.RetiredAt.IsZero(), true
			}
		}
		return false, false
	}
	// The first run ends cleanly while the second is tracked: not retired.
	pub.publish("terminated", bf, run1, terminatedJSON(bf, run1))
	eventually(t, "the first run's tracker to end", func() bool {
		var runs struct {
			Runs []struct {
				RunID   string `json:"run_id"`
				Done    bool   `json:"done"`
				Retired bool   `json:"retired"`
			} `json:"runs"`
		}
		getJSON(t, s.httpURL+"/v1/runs", &runs)
		for _, r := range runs.Runs {
			if r.RunID == run1 {
				if r.Retired {
					t.Fatalf("run 1's tracker says it retired its query")
				}
				return r.Done
			}
		}
		return true // gone with its tracker
	})
	if active, known := bfActive(); !known || !active {
		t.Fatalf("the backfill was retired (known %v) by the clean end of one of its two tracked runs", known)
	}
	holdsAt(t, pgURL, "silver.guard", "2026-09-28T13:00:00Z")
	// The last run ends cleanly: retired, and the table follows the live
	// query alone.
	pub.publish("terminated", bf, run2, terminatedJSON(bf, run2))
	waitVerdict(t, pgURL, "silver.guard", "2026-09-28T16:00:00Z")
	if active, known := bfActive(); !known || active {
		t.Errorf("the backfill is not retired after its last run ended cleanly (known %v)", known)
	}
}

// TestRetiredFeederRunningAgainIsNotSilent: a backfill retired on its clean
// end and then restarted from the same checkpoint (the same query id) does
// not hold the table, which may already be final over what it writes. That
// used to be silent: the status said "retired" and the log nothing. The
// service warns when the run is tracked, and the status says the retired
// feeder is reporting.
func TestRetiredFeederRunningAgainIsNotSilent(t *testing.T) {
	pgURL := pgtest.URL(t)
	s := startServe(t, serveOpts{pgURL: pgURL, config: `
tables:
  - table: silver.rerun
    query: rerun-live
  - table: silver.rerun
    query: "rerun-backfill*"
    retire: on_clean_termination
`})
	pub := connect(t, s.natsURL)
	live, liveRun, bf, bfRun, bfRun2 := id(0x1301), id(0x1302), id(0x1303), id(0x1304), id(0x1305)
	pub.publish("progress", bf, bfRun, progressAt(bf, bfRun, "rerun-backfill", 1, "2026-09-28T10:30:00"))
	pub.publish("progress", live, liveRun, progressAt(live, liveRun, "rerun-live", 1, "2026-09-28T14:05:00"))
	waitVerdict(t, pgURL, "silver.rerun", "2026-09-28T10:00:00Z")
	pub.publish("terminated", bf, bfRun, terminatedJSON(bf, bfRun))
	waitVerdict(t, pgURL, "silver.rerun", "2026-09-28T14:00:00Z")

	// Restarted from its checkpoint: the same query id, a new run.
	pub.publish("progress", bf, bfRun2, progressAt(bf, bfRun2, "rerun-backfill", 2, "2026-09-28T11:30:00"))
	s.logged(t, "the warning of a retired feeder running again", "a retired feeder of the table runs again")
	eventually(t, "the status to say the retired feeder reports", func() bool {
		var doc tableDoc
		getJSON(t, s.httpURL+"/v1/tables/silver.rerun", &doc)
		for _, f := range doc.Feeders {
			if f.Feeder == bf {
				return f.State == "retired but reporting"
			}
		}
		return false
	})
	code, out, e := cli(t, nil, "status", "--postgres-url", pgURL, "--http-url", s.httpURL)
	if code != 0 || !strings.Contains(out, "retired but reporting") {
		t.Errorf("status: %d\n%s\n%s", code, out, e)
	}
}
