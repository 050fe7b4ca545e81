package actions

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/finalizer-dev/finalizer/progress"
)

func TestPeriods(t *testing.T) {
	ny, err := time.LoadLocation("America/New_York")
	if err != nil {
		t.Fatal(err)
	}
	utc := func(s string) time.Time {
		v, err := time.Parse(time.RFC3339, s)
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	cases := []struct {
		name     string
		from, to string
		g        progress.Granularity
		loc      *time.Location
		want     string
	}{
		{"jump of three hours", "2026-09-28T12:00:00Z", "2026-09-28T15:00:00Z", progress.Hour, nil, "12 13 14"},
		{"one hour", "2026-09-28T12:00:00Z", "2026-09-28T13:00:00Z", progress.Hour, nil, "12"},
		{"first verdict: its last period only", "", "2026-09-28T15:00:00Z", progress.Hour, nil, "14"},
		{"no move", "2026-09-28T12:00:00Z", "2026-09-28T12:00:00Z", progress.Hour, nil, ""},
		{"backwards", "2026-09-28T12:00:00Z", "2026-09-28T11:00:00Z", progress.Hour, nil, ""},
		{"minutes", "2026-09-28T12:58:00Z", "2026-09-28T13:01:00Z", progress.Minute, nil, "12:58 12:59 13:00"},
		// 2026-11-01 in New York is 25 hours long (clocks go back).
		{"a 25-hour day", "2026-11-01T04:00:00Z", "2026-11-03T05:00:00Z", progress.Day, ny, "11-01 11-02"},
		// 2026-03-08 is 23 hours long.
		{"a 23-hour day", "2026-03-07T05:00:00Z", "2026-03-09T04:00:00Z", progress.Day, ny, "03-07 03-08"},
		// The repeated hour 01:00 is two periods.
		{"the repeated hour", "2026-11-01T04:00:00Z", "2026-11-01T07:00:00Z", progress.Hour, ny, "00 01 01"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var from time.Time
			if c.from != "" {
				from = utc(c.from)
			}
			ps, skipped := Periods(from, utc(c.to), c.g, c.loc)
			loc := c.loc
			if loc == nil {
				loc = time.UTC
			}
			var got []string
			var prev time.Time
			for _, p := range ps {
				if !prev.IsZero() && !p[0].Equal(prev) {
					t.Errorf("gap: %v after %v", p[0], prev)
				}
				prev = p[1]
				f := "15"
				switch c.g {
				case progress.Minute:
					f = "15:04"
				case progress.Day:
					f = "01-02"
				}
				got = append(got, p[0].In(loc).Format(f))
			}
			if strings.Join(got, " ") != c.want || skipped != 0 {
				t.Errorf("got %q (skipped %d), want %q", strings.Join(got, " "), skipped, c.want)
			}
		})
	}
}

func TestEventIDs(t *testing.T) {
	p := time.Date(2026, 9, 28, 12, 0, 0, 0, time.UTC)
	a, b := EventID("t", p, 0), EventID("t", p, 1)
	if a == b || a != EventID("t", p.In(time.FixedZone("x", 3600)), 0) || a == EventID("t", p.Add(time.Hour), 0) || a == EventID("u", p, 0) || len(a) != 32 {
		t.Errorf("ids: %s %s", a, b)
	}
}

func TestSubject(t *testing.T) {
	for table, want := range map[string]string{
		"bronze.orders":  "p.final.bronze.orders",
		"a b*>.c":        "p.final.a%20b%2A%3E.c",
		"x..y":           "p.final.x.%00.y",
		"caf\u00e9":      "p.final.caf%C3%A9",
		"100%":           "p.final.100%25",
		"plain_name-1":   "p.final.plain_name-1",
		"schema.tab\tle": "p.final.schema.tab%09le",
	} {
		if got := Subject("p.final", table); got != want {
			t.Errorf("Subject(%q) = %q, want %q", table, got, want)
		}
	}
}

func TestMarkerPath(t *testing.T) {
	p := time.Date(2026, 9, 28, 14, 5, 0, 0, time.UTC)
	for _, c := range []struct {
		tmpl, table string
		g           progress.Granularity
		want        string
	}{
		{"/m/{table}/{period}/_SUCCESS", "bronze.orders", progress.Hour, "/m/bronze.orders/2026-09-28T14/_SUCCESS"},
		{"/m/{table}/{period}/_SUCCESS", "bronze.orders", progress.Day, "/m/bronze.orders/2026-09-28/_SUCCESS"},
		{"/m/{table}/{period}/_SUCCESS", "t", progress.Minute, "/m/t/2026-09-28T14-05/_SUCCESS"},
		{"/m/{table}/dt={date}/hr={hour}/_SUCCESS", "t", progress.Hour, "/m/t/dt=2026-09-28/hr=14/_SUCCESS"},
		// A table name never leaves its directory.
		{"/m/{table}/_SUCCESS", "../../etc", progress.Hour, "/m/..%2F..%2Fetc/_SUCCESS"},
		{"/m/{table}/_SUCCESS", "..", progress.Hour, "/m/%2E%2E/_SUCCESS"},
		{"/m/{table}/_SUCCESS", "a/b", progress.Hour, "/m/a%2Fb/_SUCCESS"},
	} {
		if got := MarkerPath(c.tmpl, c.table, p, c.g, nil); got != c.want {
			t.Errorf("MarkerPath(%q, %q) = %q, want %q", c.tmpl, c.table, got, c.want)
		}
	}
}

func TestSignVerify(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	ts := fmt.Sprint(now.Unix())
	body := []byte(`{"id":"x"}`)
	sig := Sign([]byte("k"), ts, body)
	if err := Verify([]byte("k"), ts, sig, body, now, time.Minute); err != nil {
		t.Fatal(err)
	}
	for name, err := range map[string]error{
		"other key":  Verify([]byte("j"), ts, sig, body, now, time.Minute),
		"other body": Verify([]byte("k"), ts, sig, []byte(`{"id":"y"}`), now, time.Minute),
		"old":        Verify([]byte("k"), ts, sig, body, now.Add(time.Hour), time.Minute),
		"other time": Verify([]byte("k"), fmt.Sprint(now.Unix()+1), sig, body, now, time.Minute),
	} {
		if err == nil {
			t.Errorf("%s: verified", name)
		}
	}
}

func TestTemplateRegexp(t *testing.T) {
	re := templateRegexp("bronze.{name}_v{id}")
	for s, want := range map[string]bool{"bronze.orders_v1": true, "bronze.x_v": true, "bronzeXorders_v1": false, "bronze.orders": false} {
		if re.MatchString(s) != want {
			t.Errorf("%q: %v", s, !want)
		}
	}
}

// TestPythonVerifier runs the README's Python verifier
// (examples/verify_webhook.py) against Sign: a valid signature passes, a
// changed body or key fails. It needs python3 (skipped without it).
func TestPythonVerifier(t *testing.T) {
	py, err := exec.LookPath("python3")
	if err != nil {
		if os.Getenv("FINALIZER_REQUIRE_PYTHON") == "1" {
			t.Fatalf("python3 is required (FINALIZER_REQUIRE_PYTHON=1): %v", err)
		}
		t.Skip("no python3")
	}
	ts := strconv.FormatInt(time.Now().Unix(), 10)
	body := []byte(`{"id":"a290e3fc0bd42d9acbd4ebb89657e866","table":"bronze.orders"}`)
	sig := Sign([]byte("k3y"), ts, body)
	run := func(key string, b []byte) error {
		cmd := exec.Command(py, "../../examples/verify_webhook.py", key, ts, sig)
		cmd.Stdin = bytes.NewReader(b)
		return cmd.Run()
	}
	if err := run("k3y", body); err != nil {
		t.Fatalf("a valid signature failed: %v", err)
	}
	if run("other", body) == nil || run("k3y", append(body, ' ')) == nil {
		t.Error("a wrong key or body verified")
	}
}
