//go:build linux

package tests

import (
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/finalizer-dev/finalizer/internal/pgcluster/pgtest"
)

// TestBcryptHashInConfigFile (issue 9, item 1): a real bcrypt hash as an
// embedded user's password in the config file. Before, the file was
// expanded as a whole before parsing, this hash became the password "a1",
// and a publisher logged in with it. Now the right password logs in and
// "a1" does not.
func TestBcryptHashInConfigFile(t *testing.T) {
	const password = "spark-b6c1f0e9d2"
	const hash = "$2a$11$JSzmxqqqvgjvT5KxSGZhJeRlXaj6aQK6InAzlVnSwAjQ9YGTZgE2O" // of password; "a1" once mangled
	config := `
nats:
  embedded:
    users:
      - {user: spark, password: ` + hash + `, role: publisher}
`
	s := startServe(t, serveOpts{pgURL: pgtest.URL(t), config: config})
	nc, err := nats.Connect(s.natsBare, nats.UserInfo("spark", password))
	if err != nil {
		t.Fatalf("the right password: %v", err)
	}
	nc.Close()
	if nc, err := nats.Connect(s.natsBare, nats.UserInfo("spark", "a1")); !errors.Is(err, nats.ErrAuthorization) {
		if nc != nil {
			nc.Close()
		}
		t.Fatalf(`"a1": err = %v, want an authorization error`, err)
	}
}

// TestHTTPEdge (issue 9, items 4 and 10): a table name PostgreSQL cannot
// hold (%00, %ff) is a 400 with a plain reason, never PostgreSQL's text,
// and writes no log line per request (before: a 500 with PostgreSQL's
// error and one ERROR line each); a 401 closes its connection; a
// connection that sends nothing is closed; and a flood of idle
// connections takes at most the connection cap of file descriptors, after
// which the service still answers and still stores events.
func TestHTTPEdge(t *testing.T) {
	const token = "edge-token-5d1c"
	pgURL := pgtest.URL(t)
	s := startServe(t, serveOpts{pgURL: pgURL, env: []string{"FINALIZER_HTTP_TOKEN=" + token}})
	host := strings.TrimPrefix(s.httpURL, "http://")

	logBefore := len(strings.Split(s.stderr.String(), "\n"))
	for range 50 {
		for _, path := range []string{"/v1/tables/%00", "/v1/tables/%ff", "/v1/tables/a%00b/final?period_end=2026-09-28T14:00:00Z", "/v1/tables/%1b%5b31m"} {
			code, body := httpGet(t, s.httpURL+path, token)
			if code != 400 || !strings.Contains(body, "invalid table name") || strings.Contains(body, "SQLSTATE") || strings.Contains(body, "byte sequence") {
				t.Fatalf("%s: %d %s", path, code, body)
			}
		}
	}
	if n := len(strings.Split(s.stderr.String(), "\n")) - logBefore; n > 5 {
		t.Errorf("200 bad requests wrote %d log lines", n)
	}

	// A 401 closes the connection.
	c, err := net.Dial("tcp", host)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_, _ = c.Write([]byte("GET /v1/tables HTTP/1.1\r\nHost: x\r\n\r\n"))
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	all, err := io.ReadAll(c)
	if err != nil || !strings.HasPrefix(string(all), "HTTP/1.1 401") {
		t.Errorf("401 then close: %v, %.80q", err, all)
	}

	// A connection that sends nothing is closed (header timeout).
	began := time.Now()
	idle, err := net.Dial("tcp", host)
	if err != nil {
		t.Fatal(err)
	}
	defer idle.Close()
	_ = idle.SetReadDeadline(time.Now().Add(30 * time.Second))
	if _, err := idle.Read(make([]byte, 1)); err != io.EOF {
		t.Errorf("idle connection: %v", err)
	}
	if d := time.Since(began); d > 20*time.Second {
		t.Errorf("idle connection closed after %s", d)
	}

	// A flood of idle connections costs at most the cap in descriptors.
	fds := func() int {
		ents, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", s.cmd.Process.Pid))
		if err != nil {
			t.Skipf("no /proc: %v", err)
		}
		return len(ents)
	}
	base := fds()
	var flood []net.Conn
	for range 600 {
		c, err := net.Dial("tcp", host)
		if err != nil {
			break
		}
		flood = append(flood, c)
	}
	time.Sleep(500 * time.Millisecond) // let the server accept what it will
	if n := fds() - base; n > 256+10 {
		t.Errorf("%d idle connections took %d descriptors", len(flood), n)
	}
	for _, c := range flood {
		c.Close()
	}
	eventually(t, "/healthz answers after the flood", func() bool {
		code, _ := httpGet(t, s.httpURL+"/healthz", "")
		return code == 200
	})
	q, r := id(0xe00), id(0xe01)
	if code, o, e := cli(t, nil, "track", "--nats-url", s.natsURL, "--query-id", q, "--run-id", r, "--table", "edge"); code != 0 {
		t.Fatalf("track: %d %s %s", code, o, e)
	}
	connect(t, s.natsURL).publish("progress", q, r, progressAt(q, r, "x", 1, "2026-09-28T13:10:00"))
	waitVerdict(t, pgURL, "edge", "2026-09-28T13:00:00Z")
}

// TestListingsArePaged (issue 9, item 7): /v1/tables and /v1/runs answer
// in pages (?limit=, ?after= the previous page's "next"), so a flood of
// runs cannot make one answer huge; following the pages gives every table
// and run once, and status still shows every run.
func TestListingsArePaged(t *testing.T) {
	pgURL := pgtest.URL(t)
	s := startServe(t, serveOpts{pgURL: pgURL})
	pub := connect(t, s.natsURL)
	q := id(0xf00)
	var tables []string
	for i := range 5 {
		r, table := id(0xf01+i), fmt.Sprintf("page.t%d", i)
		tables = append(tables, table)
		if code, o, e := cli(t, nil, "track", "--nats-url", s.natsURL, "--query-id", q, "--run-id", r, "--table", table); code != 0 {
			t.Fatalf("track: %d %s %s", code, o, e)
		}
		pub.publish("progress", q, r, progressAt(q, r, "x", 1, "2026-09-28T13:10:00"))
	}
	for _, table := range tables {
		waitVerdict(t, pgURL, table, "2026-09-28T13:00:00Z")
	}
	pages := func(path, key string) (items []string, n int) {
		after := ""
		for n = 1; n < 20; n++ {
			var doc map[string]any
			u := s.httpURL + path + "?limit=2"
			if after != "" {
				u += "&after=" + url.QueryEscape(after)
			}
			if code := getJSON(t, u, &doc); code != 200 {
				t.Fatalf("%s: %d", u, code)
			}
			list, _ := doc[key].([]any)
			if len(list) > 2 {
				t.Fatalf("%s: %d items on a page of 2", u, len(list))
			}
			for _, it := range list {
				m := it.(map[string]any)
				items = append(items, fmt.Sprint(m["table"], "/", m["run_id"]))
			}
			next, _ := doc["next"].(string)
			if next == "" {
				return items, n
			}
			after = next
		}
		t.Fatalf("%s: no end after 20 pages", path)
		return nil, 0
	}
	if items, n := pages("/v1/tables", "tables"); len(items) != 5 || n != 3 {
		t.Errorf("/v1/tables: %d tables in %d pages: %v", len(items), n, items)
	}
	if items, n := pages("/v1/runs", "runs"); len(items) != 5 || n != 3 {
		t.Errorf("/v1/runs: %d runs in %d pages: %v", len(items), n, items)
	}
	if code, _ := httpGet(t, s.httpURL+"/v1/runs?limit=x", ""); code != 400 {
		t.Errorf("limit=x: %d", code)
	}
	// ?table= lists that table's runs alone (is-final's and wait's why
	// read no other tracker's status), and nothing for a table no run
	// writes.
	for table, want := range map[string]int{"page.t3": 1, "page.none": 0} {
		var doc struct {
			Runs []struct {
				Table string `json:"table"`
			} `json:"runs"`
			JoinWaits []any `json:"join_waits"`
		}
		if code := getJSON(t, s.httpURL+"/v1/runs?table="+url.QueryEscape(table), &doc); code != 200 || len(doc.Runs) != want || doc.JoinWaits == nil {
			t.Errorf("/v1/runs?table=%s: %d, %+v; want %d run(s) and the join waits' list", table, code, doc, want)
		}
		for _, r := range doc.Runs {
			if r.Table != table {
				t.Errorf("/v1/runs?table=%s lists a run of %s", table, r.Table)
			}
		}
	}
	code, out, e := cli(t, nil, "status", "--postgres-url", pgURL, "--http-url", s.httpURL)
	if code != 0 || strings.Count(out, q[:8]) < 5 {
		t.Errorf("status: %d %s %s", code, out, e)
	}
}
