package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// bench --curve-from draws a saved curve again, without running the bench.
func TestBenchCurveFrom(t *testing.T) {
	dir := t.TempDir()
	saved := filepath.Join(dir, "curve.out")
	body := "MEASURE ...\n" + `{"curve":[{"runs":1000,"track_s":0.4,"rss_no_gc_per_run_kib":30},{"runs":10000,"track_s":4,"rss_no_gc_per_run_kib":15}]}` + "\n"
	if err := os.WriteFile(saved, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	svg := filepath.Join(dir, "curve.svg")
	var stdout, stderr bytes.Buffer
	cmd := newBenchCmd(&stdout, &stderr)
	cmd.SetArgs([]string{"--curve-from", saved, "--svg", svg})
	if err := cmd.Execute(); err != nil {
		t.Fatalf("%v: %s", err, stderr.String())
	}
	if !strings.Contains(stdout.String(), "N=10000") || !strings.Contains(stdout.String(), `{"curve":`) {
		t.Errorf("stdout lacks the table or the JSON:\n%s", stdout.String())
	}
	b, err := os.ReadFile(svg)
	if err != nil || !strings.Contains(string(b), "<svg") || !strings.Contains(string(b), "10k") {
		t.Errorf("the SVG was not drawn: %v", err)
	}
	// A file without a curve is refused, naming it.
	if err := os.WriteFile(saved, []byte("nothing\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd = newBenchCmd(&stdout, &stderr)
	cmd.SetArgs([]string{"--curve-from", saved})
	if err := cmd.Execute(); err == nil || !strings.Contains(err.Error(), "no curve") {
		t.Errorf("err = %v, want it to say there is no curve", err)
	}
}
