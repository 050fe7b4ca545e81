package main

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/finalizer-dev/finalizer/finalizer"
	"github.com/finalizer-dev/finalizer/progress"
)

// TestTimeGuideExamples loads every config of docs/time-guide.md as the
// service loads a config file, and checks that each says what its section
// says: the guide cannot rot.
func TestTimeGuideExamples(t *testing.T) {
	raw, err := os.ReadFile("../../docs/time-guide.md")
	if err != nil {
		t.Fatal(err)
	}
	sections := map[string]func(t *testing.T, rules []finalizer.Rule){
		"CDC, partitioned by commit time": func(t *testing.T, rs []finalizer.Rule) {
			s := one(t, rs).Spec
			if s.Time != progress.TimeOffset || s.Pointer != "/commit_ts" || s.Source != progress.SourceAll || s.NaiveLocation == nil || s.QuietAfter <= 0 {
				t.Errorf("spec %s: want offset:/commit_ts over all sources with a naive_timezone", s)
			}
		},
		"Kafka, partitioned by ingestion time": func(t *testing.T, rs []finalizer.Rule) {
			s := one(t, rs).Spec
			if s.Time != progress.TimeTrigger || s.ProcessingTime || s.Delay <= 0 {
				t.Errorf("spec %s: want trigger without processing_time, with a delay for the clock skew", s)
			}
		},
		"A processing-time column": func(t *testing.T, rs []finalizer.Rule) {
			if s := one(t, rs).Spec; s.Time != progress.TimeTrigger || !s.ProcessingTime {
				t.Errorf("spec %s: want trigger with processing_time", s)
			}
		},
		"Windowed aggregation, append mode, by window end": func(t *testing.T, rs []finalizer.Rule) {
			if s := one(t, rs).Spec; s.Time != progress.TimeWatermark || s.LateRowsFiltered || s.Delay != 0 {
				t.Errorf("spec %s: want a plain watermark", s)
			}
		},
		"Windowed aggregation, append mode, by window start": func(t *testing.T, rs []finalizer.Rule) {
			if s := one(t, rs).Spec; s.Time != progress.TimeWatermark || s.LateRowsFiltered || s.Delay < time.Hour {
				t.Errorf("spec %s: want a watermark with a delay of at least the 1h window", s)
			}
		},
		"Stream-stream join": func(t *testing.T, rs []finalizer.Rule) {
			if s := one(t, rs).Spec; s.Time != progress.TimeWatermark || !s.LateRowsFiltered {
				t.Errorf("spec %s: a join needs late_rows_filtered", s)
			}
		},
		"Stateless event time": func(t *testing.T, rs []finalizer.Rule) {
			if s := one(t, rs).Spec; s.Time != progress.TimeWatermark || s.LateRowsFiltered {
				t.Errorf("spec %s: want a watermark without the opt-in (the query drops late rows itself)", s)
			}
		},
		"foreachBatch writing several tables": func(t *testing.T, rs []finalizer.Rule) {
			if len(rs) < 2 {
				t.Fatalf("%d rules, want one per table", len(rs))
			}
			for _, r := range rs[1:] {
				if r.Query != rs[0].Query || r.Table == rs[0].Table {
					t.Errorf("rules %+v and %+v: want one query, several tables", rs[0], r)
				}
			}
		},
	}
	heading := regexp.MustCompile(`(?m)^## (.+)$`)
	block := regexp.MustCompile("(?s)```yaml\n(.*?)```")
	locs := heading.FindAllStringSubmatchIndex(string(raw), -1)
	seen := map[string]bool{}
	for i, loc := range locs {
		title := string(raw[loc[2]:loc[3]])
		end := len(raw)
		if i+1 < len(locs) {
			end = locs[i+1][0]
		}
		body := string(raw[loc[1]:end])
		blocks := block.FindAllStringSubmatch(body, -1)
		check, ok := sections[title]
		if !ok {
			if len(blocks) > 0 {
				t.Errorf("section %q has a config this test does not check", title)
			}
			continue
		}
		seen[title] = true
		if len(blocks) != 1 {
			t.Errorf("section %q: %d yaml blocks, want 1", title, len(blocks))
			continue
		}
		t.Run(title, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "finalizer.yaml")
			if err := os.WriteFile(path, []byte(blocks[0][1]), 0o600); err != nil {
				t.Fatal(err)
			}
			cfg := defaultConfig()
			if err := loadConfigFile(path, &cfg); err != nil {
				t.Fatal(err)
			}
			rules, err := cfg.rules()
			if err != nil {
				t.Fatal(err)
			}
			check(t, rules)
		})
		// The summary table links to the section.
		anchor := "(#" + strings.ToLower(strings.NewReplacer(" ", "-", ",", "").Replace(title)) + ")"
		if !strings.Contains(string(raw), anchor) {
			t.Errorf("the summary table has no link %s", anchor)
		}
	}
	for title := range sections {
		if !seen[title] {
			t.Errorf("docs/time-guide.md has no section %q", title)
		}
	}
}

func one(t *testing.T, rs []finalizer.Rule) finalizer.Rule {
	t.Helper()
	if len(rs) != 1 {
		t.Fatalf("%d rules, want 1", len(rs))
	}
	return rs[0]
}

// A rule with quiet and time: watermark is a config error that names the
// field (issue 15).
func TestQuietWithWatermarkIsAConfigError(t *testing.T) {
	path := filepath.Join(t.TempDir(), "finalizer.yaml")
	body := "tables:\n  - table: t\n    query: q\n    time: watermark\n    quiet: {after: 5m}\n"
	if err := os.WriteFile(path, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg := defaultConfig()
	if err := loadConfigFile(path, &cfg); err != nil {
		t.Fatal(err)
	}
	_, err := cfg.rules()
	if err == nil || !strings.Contains(err.Error(), "tables[0]") || !strings.Contains(err.Error(), "quiet: not with time: watermark") {
		t.Fatalf("rules() = %v, want an error naming tables[0] and quiet", err)
	}
	body = "tables:\n  - table: t\n    query: q\n    quiet: {after: 5m}\n"
	if err := os.WriteFile(path, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg = defaultConfig()
	if err := loadConfigFile(path, &cfg); err != nil {
		t.Fatal(err)
	}
	rules, err := cfg.rules()
	if err != nil || len(rules) != 1 || rules[0].Spec.QuietAfter != 5*time.Minute {
		t.Fatalf("rules() = %+v, %v; want quiet after 5m", rules, err)
	}
}
