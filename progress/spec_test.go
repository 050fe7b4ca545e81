package progress

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"
	"time"

	"gopkg.in/yaml.v3"
)

func TestParseSpec(t *testing.T) {
	london := loadZone(t, "Europe/London")
	cases := []struct {
		name string
		in   SpecOptions
		want Spec
	}{
		{"defaults", SpecOptions{}, Spec{Time: TimeOffset, Pointer: "/commit_ts", Source: 0, Granularity: Hour, Location: time.UTC}},
		{"watermark", SpecOptions{Time: "watermark", Delay: "10m"}, Spec{Time: TimeWatermark, Granularity: Hour, Location: time.UTC, Delay: 10 * time.Minute}},
		{"trigger", SpecOptions{Time: "trigger", Granularity: "minute"}, Spec{Time: TimeTrigger, Granularity: Minute, Location: time.UTC}},
		{"whole offset", SpecOptions{Time: "offset:"}, Spec{Time: TimeOffset, Pointer: "", Granularity: Hour, Location: time.UTC}},
		{"escaped pointer", SpecOptions{Time: "offset:/a~1b/m~0n/0"}, Spec{Time: TimeOffset, Pointer: "/a~1b/m~0n/0", Granularity: Hour, Location: time.UTC}},
		{"all sources", SpecOptions{Source: "all", Granularity: "day", Timezone: "Europe/London"}, Spec{Time: TimeOffset, Pointer: "/commit_ts", Source: SourceAll, Granularity: Day, Location: london}},
		{"source 2", SpecOptions{Source: "2"}, Spec{Time: TimeOffset, Pointer: "/commit_ts", Source: 2, Granularity: Hour, Location: time.UTC}},
		{"source by description", SpecOptions{Source: "description:KafkaV2[Subscribe[orders]]"},
			Spec{Time: TimeOffset, Pointer: "/commit_ts", Source: SourceByDescription, Description: "KafkaV2[Subscribe[orders]]", Granularity: Hour, Location: time.UTC}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ParseSpec(tc.in)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("got %+v, want %+v", got, tc.want)
			}
			// Options round-trips, with every field filled in.
			o := got.Options()
			if o.Time == "" || o.Source == "" || o.Granularity == "" || o.Timezone == "" || o.Delay == "" {
				t.Errorf("Options left a field empty: %+v", o)
			}
			again, err := ParseSpec(o)
			if err != nil || !reflect.DeepEqual(again, got) {
				t.Errorf("ParseSpec(%+v) = %+v, %v; want %+v", o, again, err, got)
			}
		})
	}
}

func TestParseSpecErrors(t *testing.T) {
	cases := []struct {
		in   SpecOptions
		want string
	}{
		{SpecOptions{Granularity: "week"}, `granularity "week": want minute, hour or day`},
		{SpecOptions{Granularity: "Hour"}, `granularity "Hour": want minute, hour or day`},
		{SpecOptions{Time: "commit_ts"}, `time "commit_ts": want offset:<JSON Pointer>, watermark or trigger`},
		{SpecOptions{Time: "offset:commit_ts"}, `time "offset:commit_ts": a JSON Pointer starts with "/"`},
		{SpecOptions{Time: "offset:/a~2"}, `time "offset:/a~2": "~" in a JSON Pointer must be followed by 0 or 1`},
		{SpecOptions{Source: "-1"}, `source "-1": want a source index (0, 1, ...), all, or description:<glob>`},
		{SpecOptions{Source: "first"}, `source "first": want a source index (0, 1, ...), all, or description:<glob>`},
		{SpecOptions{Source: "description:"}, `source "description:": want a description glob`},
		{SpecOptions{Source: "+1"}, `source "+1"`},
		{SpecOptions{Timezone: "Mars/Olympus"}, `timezone "Mars/Olympus": want an IANA zone name`},
		{SpecOptions{Timezone: "Local"}, `timezone "Local": want an IANA zone name`},
		{SpecOptions{Delay: "10"}, `delay "10": want a duration such as 0s, 90s or 10m`},
		{SpecOptions{Delay: "-5m"}, `delay "-5m": must not be negative`},
	}
	for _, tc := range cases {
		t.Run(tc.want, func(t *testing.T) {
			_, err := ParseSpec(tc.in)
			if err == nil || !strings.HasPrefix(err.Error(), tc.want) {
				t.Fatalf("ParseSpec(%+v) error %v, want %q", tc.in, err, tc.want)
			}
		})
	}
}

func TestSpecString(t *testing.T) {
	s, err := ParseSpec(SpecOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := s.String(), "time=offset:/commit_ts source=0 granularity=hour timezone=UTC delay=0s"; got != want {
		t.Errorf("String() = %q, want %q", got, want)
	}
	if got, want := s.Options(), (SpecOptions{Time: DefaultTime, Source: DefaultSource, Granularity: DefaultGranularity, Timezone: DefaultTimezone, Delay: DefaultDelay}); got != want {
		t.Errorf("Options() = %+v, want the defaults %+v", got, want)
	}
	s = Spec{Time: TimeWatermark, Source: SourceAll, Granularity: Day, Location: loadZone(t, "Asia/Kolkata"), Delay: 90 * time.Second}
	if got, want := s.String(), "time=watermark source=all granularity=day timezone=Asia/Kolkata delay=1m30s"; got != want {
		t.Errorf("String() = %q, want %q", got, want)
	}
	// The zero Spec is not valid, and says so.
	if got := (Spec{}).String(); !strings.Contains(got, "timekind(0)") || !strings.Contains(got, "granularity(0)") {
		t.Errorf("zero Spec String() = %q", got)
	}
}

// TestSpecOptionsEncoding checks the keys SpecOptions has in the config
// file and in a persisted track.
func TestSpecOptionsEncoding(t *testing.T) {
	o := SpecOptions{Time: "watermark", Delay: "10m"}
	j, err := json.Marshal(o)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := string(j), `{"time":"watermark","delay":"10m"}`; got != want {
		t.Errorf("JSON %s, want %s", got, want)
	}
	var y SpecOptions
	if err := yaml.Unmarshal([]byte("time: offset:/commit_ts\nsource: all\ngranularity: day\ntimezone: Europe/London\ndelay: 5m\n"), &y); err != nil {
		t.Fatal(err)
	}
	if want := (SpecOptions{Time: "offset:/commit_ts", Source: "all", Granularity: "day", Timezone: "Europe/London", Delay: "5m"}); y != want {
		t.Errorf("YAML gave %+v, want %+v", y, want)
	}
}

func TestParseGranularity(t *testing.T) {
	for _, g := range []Granularity{Minute, Hour, Day} {
		got, err := ParseGranularity(g.String())
		if err != nil || got != g {
			t.Errorf("ParseGranularity(%q) = %v, %v", g.String(), got, err)
		}
	}
	if _, err := ParseGranularity(""); err == nil {
		t.Error(`ParseGranularity("") succeeded`)
	}
	if got := Granularity(7).String(); got != "granularity(7)" {
		t.Errorf("String of an invalid granularity = %q", got)
	}
}
