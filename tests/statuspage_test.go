//go:build linux

package tests

import (
	"context"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/finalizer-dev/finalizer/internal/pgcluster/pgtest"
)

// need returns the path of a tool the test needs. Without it the test is
// skipped, or fails when env is set (CI sets it: a skip there hides a
// missing install).
func need(t *testing.T, env string, names ...string) string {
	t.Helper()
	for _, n := range names {
		if p, err := exec.LookPath(n); err == nil {
			return p
		}
	}
	if os.Getenv(env) != "" {
		t.Fatalf("%s not found on PATH, and %s is set", strings.Join(names, " or "), env)
	}
	t.Skipf("%s not found on PATH (set %s to make this a failure)", strings.Join(names, " or "), env)
	return ""
}

// browser starts a headless Chromium driven over the DevTools protocol;
// it stops with the test.
func browser(t *testing.T) context.Context {
	t.Helper()
	exe := need(t, "FINALIZER_REQUIRE_CHROMIUM", "chromium", "chromium-browser", "google-chrome")
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(exe),
		chromedp.NoSandbox, // CI runs as root
		chromedp.WindowSize(1280, 900),
		chromedp.UserDataDir(t.TempDir()),
	)
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancelCtx := chromedp.NewContext(actx)
	ctx, cancelTimeout := context.WithTimeout(ctx, 3*time.Minute)
	t.Cleanup(func() {
		cancelTimeout()
		cancelCtx()
		cancelAlloc()
	})
	return ctx
}

// jsUntil polls a JavaScript expression in the page until it returns want.
func jsUntil(t *testing.T, ctx context.Context, what, expr, want string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	var got string
	for time.Now().Before(deadline) {
		var err error
		if got, err = chromedp.Run(ctx, chromedp.Evaluate[string](expr)); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		if got == want {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("%s: %q, want %q", what, got, want)
}

// text is a JavaScript expression: the trimmed text of the first element
// matching a CSS selector, or "" when there is none.
func text(selector string) string {
	return `(function(){var e=document.querySelector(` + jsString(selector) + `);return e?e.textContent.trim():""})()`
}

func jsString(s string) string {
	return "'" + strings.NewReplacer(`\`, `\\`, `'`, `\'`).Replace(s) + "'"
}

// The status page from a running service in a real browser: a verdict
// appears, moves live after a publish (no reload), and a silent run turns
// stale. The screenshot is kept under the test's temp dir (and copied to
// $FINALIZER_ARTIFACTS_DIR when set).
func TestStatusPageLiveInBrowser(t *testing.T) {
	ctx := browser(t)
	pgURL := pgtest.URL(t)
	s := startServe(t, serveOpts{pgURL: pgURL, config: `
tracking:
  stale_after: 4s
tables:
  - table: bronze.orders
    query: orders-v1
    time: offset:/commit_ts
    granularity: hour
`})
	pub := connect(t, s.natsURL)

	if err := chromedp.Do(ctx, chromedp.Navigate(s.httpURL+"/")); err != nil {
		t.Fatal(err)
	}
	jsUntil(t, ctx, "the live stream", `document.getElementById("live").dataset.state`, "live")
	jsUntil(t, ctx, "the empty tables", `String(!document.querySelector("#tables tr.empty").hidden)`, "true")
	if _, err := chromedp.Run(ctx, chromedp.Evaluate[bool](`window.notReloaded = true`)); err != nil {
		t.Fatal(err)
	}

	pub.publish("started", queryA, runA, startedJSON(queryA, runA, "orders-v1"))
	pub.publish("progress", queryA, runA, cdcProgressJSON(queryA, runA, "orders-v1", "2026-09-28T13:10:00"))
	row := `#tables tr[data-key="bronze.orders"]`
	jsUntil(t, ctx, "the verdict appears", text(row+" td.until"), "2026-09-28 13:00:00Z")
	jsUntil(t, ctx, "the run appears", text(`#runs tr[data-key="`+runA+` bronze.orders"] th code`), runA[:8])

	pub.publish("progress", queryA, runA, cdcProgressJSON(queryA, runA, "orders-v1", "2026-09-28T14:05:00"))
	jsUntil(t, ctx, "the verdict moves", text(row+" td.until"), "2026-09-28 14:00:00Z")
	jsUntil(t, ctx, "the page was not reloaded", `String(window.notReloaded === true)`, "true")
	jsUntil(t, ctx, "the lag is a number", `String(/^\d+d\d+h$/.test(`+text(row+" .lag-text")+`))`, "true")
	jsUntil(t, ctx, "the timeline is drawn", `String(document.querySelector("`+`#tables tr[data-key='bronze.orders'] polyline").getAttribute("points").split(" ").length >= 3)`, "true")

	// Silent for longer than stale_after: the run, and the table it holds,
	// say so in words (and colour).
	jsUntil(t, ctx, "the run turns stale", text(`#runs tr[data-key="`+runA+` bronze.orders"] .badge`), "stale")
	jsUntil(t, ctx, "the table says why", `String(`+text(row+" td.held")+`.includes("is stale: no event since"))`, "true")
	jsUntil(t, ctx, "the table's state", text(row+" td.state .badge"), "stale")
	jsUntil(t, ctx, "still the same page", `String(window.notReloaded === true)`, "true")

	// Accessible: real tables with headers, and words for every colour.
	jsUntil(t, ctx, "column headers", `String(document.querySelectorAll("#tables thead th[scope=col]").length)`, "7")
	jsUntil(t, ctx, "row headers", `String(document.querySelectorAll("#tables tbody th[scope=row]").length)`, "1")
	jsUntil(t, ctx, "every badge has words", `String(Array.from(document.querySelectorAll(".badge")).every(function(b){return b.textContent.trim()!==""}))`, "true")

	png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100)) // quality 100: PNG
	if err != nil {
		t.Fatal(err)
	}
	shot := filepath.Join(t.TempDir(), "statuspage.png")
	if err := os.WriteFile(shot, png, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("screenshot: %s (%d bytes)", shot, len(png))
	if dir := os.Getenv("FINALIZER_ARTIFACTS_DIR"); dir != "" {
		if err := os.MkdirAll(dir, 0o755); err == nil {
			_ = os.WriteFile(filepath.Join(dir, "statuspage.png"), png, 0o644)
		}
	}
}

// The page, its stream and its assets follow the API's token rule.
func TestStatusPageNeedsTheToken(t *testing.T) {
	const token = "s3cret-page-token"
	s := startServe(t, serveOpts{pgURL: pgtest.URL(t), args: []string{"--http-token", token}})
	for _, path := range []string{"/", "/status/events", "/status/assets/page.js", "/status/assets/page.css"} {
		if code, body := httpGet(t, s.httpURL+path, ""); code != http.StatusUnauthorized {
			t.Errorf("GET %s without the token: %d, want 401 (%.80s)", path, code, body)
		}
		if code, _ := httpGet(t, s.httpURL+path, "wrong"); code != http.StatusUnauthorized {
			t.Errorf("GET %s with a wrong token: %d, want 401", path, code)
		}
	}
	for path, want := range map[string]string{"/": "<h1>finalizer</h1>", "/status/assets/page.js": "EventSource"} {
		if code, body := httpGet(t, s.httpURL+path, token); code != http.StatusOK || !strings.Contains(body, want) {
			t.Errorf("GET %s with the token: %d, want 200 and %q", path, code, want)
		}
	}
}
