//go:build linux

package tests

import (
	"encoding/json"
	"os"
	"os/exec"
	"regexp"
	"sort"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"

	"github.com/finalizer-dev/finalizer/internal/pgcluster/pgtest"
)

const (
	dashboardFile = "../deploy/grafana/finalizer-dashboard.json"
	rulesFile     = "../deploy/prometheus/finalizer-rules.yaml"
	rulesTestFile = "../deploy/prometheus/finalizer-rules_test.yaml"
)

// metricName finds the names of the service's own series in PromQL and
// in prose: finalizer_*, and the Go and process collectors' go_* and
// process_*.
var metricName = regexp.MustCompile(`\b(?:finalizer|go|process)_[a-z0-9_]*[a-z0-9]\b`)

// namesIn returns every metric name in every string of a decoded JSON or
// YAML document.
func namesIn(doc any, into map[string]bool) {
	switch v := doc.(type) {
	case string:
		for _, n := range metricName.FindAllString(v, -1) {
			into[n] = true
		}
	case map[string]any:
		for _, x := range v {
			namesIn(x, into)
		}
	case []any:
		for _, x := range v {
			namesIn(x, into)
		}
	}
}

func names(t *testing.T, path string) map[string]bool {
	t.Helper()
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var doc any
	if strings.HasSuffix(path, ".json") {
		err = json.Unmarshal(raw, &doc)
	} else {
		err = yaml.Unmarshal(raw, &doc)
	}
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	out := map[string]bool{}
	namesIn(doc, out)
	return out
}

// Every metric the Grafana dashboard and the alert rules use exists on
// /metrics of a running service, so a renamed metric breaks the build; and
// they cover what the operations section says to watch.
func TestDashboardAndRulesUseTheServiceMetrics(t *testing.T) {
	pgURL := pgtest.URL(t)
	s := startServe(t, serveOpts{pgURL: pgURL, config: `
tables:
  - table: bronze.orders
    query: orders-v1
    time: offset:/commit_ts
    actions:
      - marker: {path: "` + t.TempDir() + `/{table}/{period}/_SUCCESS"}
  - table: bronze.none
    query: none-v1
    time: offset:/commit_ts
`})
	pub := connect(t, s.natsURL)
	pub.publish("started", queryA, runA, startedJSON(queryA, runA, "orders-v1"))
	pub.publish("progress", queryA, runA, cdcProgressJSON(queryA, runA, "orders-v1", "2026-09-28T13:10:00"))
	waitVerdict(t, pgURL, "bronze.orders", "2026-09-28T13:00:00Z")
	// A run whose progress has no usable time: held by a guard.
	pub.publish("started", queryC, runC, startedJSON(queryC, runC, "orders-v1"))
	pub.publish("progress", queryC, runC, progressWithOffset(queryC, runC, 1, `{"lsn":"0x27"}`))
	eventually(t, "the held series", func() bool { return strings.Contains(metricText(t, s.httpURL), "finalizer_held_runs{") })
	// A second query into the same table: a table of two feeders, one holding it.
	queryD, runD := id(901), id(902)
	pub.publish("started", queryD, runD, startedJSON(queryD, runD, "orders-v1"))
	pub.publish("progress", queryD, runD, cdcProgressJSON(queryD, runD, "orders-v1", "2026-09-28T12:10:00"))
	eventually(t, "the feeder series", func() bool { return strings.Contains(metricText(t, s.httpURL), "finalizer_table_held{") })
	// A table tracked without a verdict yet: its missing series.
	queryE, runE := id(903), id(904)
	pub.publish("started", queryE, runE, startedJSON(queryE, runE, "none-v1"))
	eventually(t, "the missing series", func() bool {
		return strings.Contains(metricText(t, s.httpURL), `finalizer_verdict_missing_seconds{table="bronze.none"}`)
	})
	// The lag is exported once the tracker has observed the move.
	eventually(t, "the lag series", func() bool { return strings.Contains(metricText(t, s.httpURL), "finalizer_verdict_lag_seconds{") })

	exposed := map[string]bool{}
	for _, line := range strings.Split(metricText(t, s.httpURL), "\n") {
		if f := strings.Fields(line); len(f) == 4 && f[0] == "#" && f[1] == "TYPE" {
			exposed[f[2]] = true // a histogram's own name, besides its _bucket, _sum, _count
			continue
		}
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		exposed[strings.FieldsFunc(line, func(r rune) bool { return r == '{' || r == ' ' })[0]] = true
	}
	for file, must := range map[string][]string{
		dashboardFile: {"finalizer_verdict_lag_seconds", "finalizer_advances_total", "finalizer_advance_failures_total",
			"finalizer_events_total", "finalizer_candidates_total", "finalizer_tracked_runs", "finalizer_stale_runs",
			"finalizer_postgres_up", "finalizer_nats_up", "finalizer_held_runs", "finalizer_feeder_lag_seconds"},
		rulesFile: {"finalizer_verdict_lag_seconds", "finalizer_verdict_missing_seconds", "finalizer_advance_failures_total", "finalizer_stale_runs", "finalizer_ready",
			"finalizer_held_runs", "finalizer_action_oldest_pending_seconds", "finalizer_action_dead"},
	} {
		used := names(t, file)
		var missing []string
		for n := range used {
			if !exposed[n] {
				missing = append(missing, n)
			}
		}
		sort.Strings(missing)
		if len(missing) > 0 {
			t.Errorf("%s uses metrics that /metrics does not have: %v", file, missing)
		}
		for _, n := range must {
			if !used[n] {
				t.Errorf("%s does not use %s", file, n)
			}
		}
	}
}

// The alert rules are valid, and their unit tests (fire when they should,
// not before) pass.
func TestAlertRulesPassPromtool(t *testing.T) {
	promtool := need(t, "FINALIZER_REQUIRE_PROMTOOL", "promtool")
	for _, args := range [][]string{{"check", "rules", rulesFile}, {"test", "rules", rulesTestFile}} {
		out, err := exec.Command(promtool, args...).CombinedOutput()
		if err != nil {
			t.Errorf("promtool %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
}

// Every alert of the rules file has its row in the README's table of
// alerts ("Dashboard and alerts"), and the table names no alert the file
// lacks: an operator reads the table to know what can page them.
func TestReadmeListsEveryAlert(t *testing.T) {
	raw, err := os.ReadFile(rulesFile)
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Groups []struct {
			Rules []struct {
				Alert string `yaml:"alert"`
			} `yaml:"rules"`
		} `yaml:"groups"`
	}
	if err := yaml.Unmarshal(raw, &doc); err != nil {
		t.Fatal(err)
	}
	inRules := map[string]bool{}
	for _, g := range doc.Groups {
		for _, r := range g.Rules {
			if r.Alert != "" {
				inRules[r.Alert] = true
			}
		}
	}
	readme, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	inReadme := map[string]bool{}
	for _, m := range regexp.MustCompile("(?m)^\\| `(Finalizer[A-Za-z]+)` \\|").FindAllStringSubmatch(string(readme), -1) {
		inReadme[m[1]] = true
	}
	if len(inRules) == 0 {
		t.Fatalf("no alert found in %s", rulesFile)
	}
	for a := range inRules {
		if !inReadme[a] {
			t.Errorf("alert %s of %s has no row in README.md's table of alerts", a, rulesFile)
		}
	}
	for a := range inReadme {
		if !inRules[a] {
			t.Errorf("README.md's table of alerts lists %s, which %s does not define", a, rulesFile)
		}
	}
}
