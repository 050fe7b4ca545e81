package progress

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"
)

// progressWith returns a progress event with one source per end offset
// (nil stands for null): a batch that ran, in a query with one streaming
// aggregation, whose sources have caught up (latestOffset = endOffset).
func progressWith(ends ...string) *Event {
	ev := &Event{
		Kind: KindProgress, QueryID: fixtureQueryID, RunID: fixtureRunID, BatchID: 5,
		Timestamp: time.Date(2026, 9, 28, 14, 38, 5, 120e6, time.UTC),
		Watermark: "2026-09-28T14:20:31.000Z",
		Executed:  true, StateOperators: []StateOperator{{Name: "stateStoreSave"}},
	}
	for _, e := range ends {
		var raw json.RawMessage
		if e != "" {
			raw = json.RawMessage(e)
		}
		ev.Sources = append(ev.Sources, Source{Description: "src", EndOffset: raw, LatestOffset: raw})
	}
	return ev
}

func mustSpec(t testing.TB, o SpecOptions) Spec {
	t.Helper()
	s, err := ParseSpec(o)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

const cdcEnd = `{"lsn":"0x0000002A000001F00003","commit_ts":"2026-09-28T14:37:12.345"}`

func TestCandidate(t *testing.T) {
	cases := []struct {
		name   string
		spec   SpecOptions
		ev     *Event
		until  string // RFC 3339; "" = no candidate
		time   string // the time read; "" = do not check
		source int
	}{
		// Reference test 1 and 2: the period holding the end is left out.
		{name: "hour", ev: progressWith(cdcEnd), until: "2026-09-28T14:00:00Z", time: "2026-09-28T14:37:12.345Z"},
		{name: "minute", spec: SpecOptions{Granularity: "minute"}, ev: progressWith(cdcEnd), until: "2026-09-28T14:37:00Z"},
		{name: "day", spec: SpecOptions{Granularity: "day"}, ev: progressWith(cdcEnd), until: "2026-09-28T00:00:00Z"},
		{name: "end on a boundary", ev: progressWith(`{"commit_ts":"2026-09-28T14:00:00"}`), until: "2026-09-28T14:00:00Z"},
		{name: "empty commit_ts", ev: progressWith(`{"lsn":"0x2A","commit_ts":""}`)},
		{name: "missing commit_ts", ev: progressWith(`{"lsn":"0x2A"}`)},
		{name: "null commit_ts", ev: progressWith(`{"lsn":"0x2A","commit_ts":null}`)},
		{name: "unreadable commit_ts", ev: progressWith(`{"commit_ts":"28/09/2026 14:37"}`)},
		{name: "commit_ts an object", ev: progressWith(`{"commit_ts":{"t":1}}`)},
		{name: "null endOffset", ev: progressWith("")},
		{name: "endOffset a number, pointer into it", ev: progressWith(`48279`)},
		// Reference test 3: no sources gives none.
		{name: "no sources", ev: progressWith()},
		{name: "source out of range", spec: SpecOptions{Source: "1"}, ev: progressWith(cdcEnd)},
		{name: "second source", spec: SpecOptions{Source: "1"}, ev: progressWith(cdcEnd, `{"commit_ts":"2026-09-28T12:01:00Z"}`), until: "2026-09-28T12:00:00Z", source: 1},

		// Time values.
		{name: "RFC 3339 with an offset", ev: progressWith(`{"commit_ts":"2026-09-28T16:37:12.345+02:00"}`), until: "2026-09-28T14:00:00Z", time: "2026-09-28T14:37:12.345Z"},
		{name: "epoch milliseconds", ev: progressWith(`{"commit_ts":1790606232345}`), until: "2026-09-28T14:00:00Z", time: "2026-09-28T14:37:12.345Z"},
		{name: "whole offset as epoch ms", spec: SpecOptions{Time: "offset:"}, ev: progressWith(`1790606232345`), until: "2026-09-28T14:00:00Z"},
		{name: "nested pointer", spec: SpecOptions{Time: "offset:/tx/commit/ts"}, ev: progressWith(`{"tx":{"commit":{"ts":"2026-09-28T14:37:12Z"}}}`), until: "2026-09-28T14:00:00Z"},
		{name: "escaped pointer", spec: SpecOptions{Time: "offset:/a~1b/m~0n"}, ev: progressWith(`{"a/b":{"m~n":"2026-09-28T14:37:12Z"},"a":{"b":"2027-01-01T00:00:00Z"}}`), until: "2026-09-28T14:00:00Z"},
		{name: "array index", spec: SpecOptions{Time: "offset:/ts/1"}, ev: progressWith(`{"ts":["2027-01-01T00:00:00Z","2026-09-28T14:37:12Z"]}`), until: "2026-09-28T14:00:00Z"},
		{name: "array index past the end", spec: SpecOptions{Time: "offset:/ts/2"}, ev: progressWith(`{"ts":["2027-01-01T00:00:00Z"]}`)},
		{name: "array index -", spec: SpecOptions{Time: "offset:/ts/-"}, ev: progressWith(`{"ts":["2027-01-01T00:00:00Z"]}`)},
		{name: "array index with a leading zero", spec: SpecOptions{Time: "offset:/ts/01"}, ev: progressWith(`{"ts":["x","2027-01-01T00:00:00Z"]}`)},
		{name: "pointer through a string", spec: SpecOptions{Time: "offset:/commit_ts/0"}, ev: progressWith(cdcEnd)},
		{name: "repeated key: the last counts", ev: progressWith(`{"commit_ts":"2027-01-01T00:00:00","commit_ts":"2026-09-28T14:37:12"}`), until: "2026-09-28T14:00:00Z"},
		{name: "invalid JSON endOffset", ev: progressWith(`{"commit_ts":"2026-09-28T14:37:12"`)},

		// Delay and zones.
		{name: "delay crosses a boundary", spec: SpecOptions{Delay: "40m"}, ev: progressWith(cdcEnd), until: "2026-09-28T13:00:00Z", time: "2026-09-28T14:37:12.345Z"},
		{name: "Kolkata hours", spec: SpecOptions{Timezone: "Asia/Kolkata"}, ev: progressWith(cdcEnd), until: "2026-09-28T14:30:00Z"},
		{name: "New York days", spec: SpecOptions{Granularity: "day", Timezone: "America/New_York"}, ev: progressWith(cdcEnd), until: "2026-09-28T04:00:00Z"},

		// all: the earliest source, and none when any source has no time.
		{name: "all takes the earliest", spec: SpecOptions{Source: "all"}, ev: progressWith(cdcEnd, `{"commit_ts":"2026-09-28T13:05:30.250"}`, `{"commit_ts":"2026-09-28T15:00:00"}`), until: "2026-09-28T13:00:00Z", time: "2026-09-28T13:05:30.25Z", source: 1},
		{name: "all with one source without a time", spec: SpecOptions{Source: "all"}, ev: progressWith(cdcEnd, `{"lsn":"0x2A"}`)},
		{name: "all with a null endOffset", spec: SpecOptions{Source: "all"}, ev: progressWith(cdcEnd, "")},
		{name: "all with no sources", spec: SpecOptions{Source: "all"}, ev: progressWith()},

		// watermark and trigger.
		{name: "watermark", spec: SpecOptions{Time: "watermark"}, ev: progressWith(cdcEnd), until: "2026-09-28T14:00:00Z", time: "2026-09-28T14:20:31Z"},
		{name: "watermark with delay", spec: SpecOptions{Time: "watermark", Delay: "30m"}, ev: progressWith(cdcEnd), until: "2026-09-28T13:00:00Z"},
		{name: "watermark picks the source's offset", spec: SpecOptions{Time: "watermark", Source: "1"}, ev: progressWith(cdcEnd, `{"x":1}`), until: "2026-09-28T14:00:00Z", source: 1},
		{name: "watermark at the epoch", spec: SpecOptions{Time: "watermark"}, ev: func() *Event {
			ev := progressWith(cdcEnd)
			ev.Watermark = "1970-01-01T00:00:00.000Z"
			return ev
		}()},
		{name: "no watermark", spec: SpecOptions{Time: "watermark"}, ev: func() *Event {
			ev := progressWith(cdcEnd)
			ev.Watermark = ""
			return ev
		}()},
		{name: "trigger", spec: SpecOptions{Time: "trigger", Granularity: "minute"}, ev: progressWith(cdcEnd), until: "2026-09-28T14:38:00Z", time: "2026-09-28T14:38:05.12Z"},
		{name: "trigger without a timestamp", spec: SpecOptions{Time: "trigger"}, ev: func() *Event {
			ev := progressWith(cdcEnd)
			ev.Timestamp = time.Time{}
			return ev
		}()},
		{name: "trigger with no sources", spec: SpecOptions{Time: "trigger"}, ev: progressWith()},

		// Events that are not a progress.
		{name: "idle event", ev: &Event{Kind: KindIdle, BatchID: -1}},
		{name: "nil event"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			spec := mustSpec(t, tc.spec)
			c, ok := spec.Candidate(tc.ev)
			if tc.until == "" {
				if ok {
					t.Fatalf("got candidate %+v, want none", c)
				}
				return
			}
			if !ok {
				t.Fatalf("no candidate, want %s", tc.until)
			}
			if want := utc(t, tc.until); !c.Until.Equal(want) || c.Until.Location() != time.UTC {
				t.Errorf("Until %v, want %v", c.Until, want)
			}
			if tc.time != "" && (!c.Time.Equal(utc(t, tc.time)) || c.Time.Location() != time.UTC) {
				t.Errorf("Time %v, want %s", c.Time, tc.time)
			}
			if !c.Until.Before(c.Time.Add(-spec.Delay)) && !c.Until.Equal(c.Time.Add(-spec.Delay)) {
				t.Errorf("Until %v is after the time %v", c.Until, c.Time)
			}
			if c.Source != tc.source || string(c.EndOffset) != string(tc.ev.Sources[tc.source].EndOffset) {
				t.Errorf("source %d endOffset %s, want %d %s", c.Source, c.EndOffset, tc.source, tc.ev.Sources[tc.source].EndOffset)
			}
		})
	}
}

func TestCandidateAllReportsEveryOffset(t *testing.T) {
	spec := mustSpec(t, SpecOptions{Time: "trigger", Source: "all", ProcessingTime: true})
	c, ok := spec.Candidate(progressWith(`{"a":1}`, "", `7`))
	if !ok {
		t.Fatal("no candidate")
	}
	if c.Source != SourceAll || string(c.EndOffset) != `[{"a":1},null,7]` || !json.Valid(c.EndOffset) {
		t.Errorf("source %d endOffset %s", c.Source, c.EndOffset)
	}
}

// TestCandidateOffsetForms is reference test 3: an endOffset that came as
// a string holding JSON and one that came as an object give the same
// candidate, and so do the event-log twins of the fixtures.
func TestCandidateOffsetForms(t *testing.T) {
	quoted, _ := json.Marshal(cdcEnd)
	objectForm := progressDoc(`"sources":[{"description":"cdc","endOffset":` + cdcEnd + `}]`)
	stringForm := progressDoc(`"sources":[{"description":"cdc","endOffset":` + string(quoted) + `}]`)
	spec := mustSpec(t, SpecOptions{})
	var got []Candidate
	for _, doc := range [][]byte{objectForm, stringForm} {
		ev, err := Parse(doc, KindProgress)
		if err != nil {
			t.Fatal(err)
		}
		c, ok := spec.Candidate(ev)
		if !ok {
			t.Fatalf("no candidate from %s", doc)
		}
		got = append(got, c)
	}
	if !got[0].Until.Equal(utc(t, "2026-09-28T14:00:00Z")) || !got[0].Until.Equal(got[1].Until) ||
		string(got[0].EndOffset) != string(got[1].EndOffset) || string(got[0].EndOffset) != cdcEnd {
		t.Errorf("candidates differ: %+v / %+v", got[0], got[1])
	}
	// The twins' candidates are compared in TestParseTwins; check the
	// values of the CDC ones here.
	for _, tc := range []struct {
		twin, spec, until string
	}{
		{"cdc_commit_ts", "", "2026-09-28T14:00:00Z"},
		{"cdc_two_sources", "", "2026-09-28T15:00:00Z"},
		{"cdc_two_sources", "all", "2026-09-28T13:00:00Z"},
		{"kafka_watermark", "", ""},
	} {
		_, epath := twinPaths(tc.twin)
		ev, err := Parse(readFile(t, epath), KindProgress)
		if err != nil {
			t.Fatal(err)
		}
		c, ok := mustSpec(t, SpecOptions{Source: tc.spec}).Candidate(ev)
		if tc.until == "" {
			if ok {
				t.Errorf("%s: candidate %+v, want none (no commit_ts)", tc.twin, c)
			}
			continue
		}
		if !ok || !c.Until.Equal(utc(t, tc.until)) {
			t.Errorf("%s source %q: candidate %+v %v, want %s", tc.twin, tc.spec, c, ok, tc.until)
		}
	}
}

func TestCandidateInvalidSpec(t *testing.T) {
	ev := progressWith(cdcEnd)
	for name, s := range map[string]Spec{
		"zero":             {},
		"no granularity":   {Time: TimeOffset, Pointer: "/commit_ts"},
		"no time kind":     {Granularity: Hour},
		"negative source":  {Time: TimeOffset, Pointer: "/commit_ts", Granularity: Hour, Source: -2},
		"bad pointer":      {Time: TimeOffset, Pointer: "commit_ts", Granularity: Hour},
		"unknown timekind": {Time: 9, Granularity: Hour},
	} {
		if c, ok := s.Candidate(ev); ok {
			t.Errorf("%s: candidate %+v, want none", name, c)
		}
	}
	// A Spec built by hand with a nil Location means UTC.
	s := Spec{Time: TimeOffset, Pointer: "/commit_ts", Granularity: Hour}
	if c, ok := s.Candidate(ev); !ok || !c.Until.Equal(utc(t, "2026-09-28T14:00:00Z")) {
		t.Errorf("nil Location: %+v %v", c, ok)
	}
}

func TestParseTime(t *testing.T) {
	cases := []struct {
		in   string
		want string // RFC 3339; "" = error
	}{
		{`"2020-07-29T10:56:56.015Z"`, "2020-07-29T10:56:56.015Z"},
		{`"2020-07-29T10:56:56Z"`, "2020-07-29T10:56:56Z"},
		{`"2026-09-28T14:37:12.123456789Z"`, "2026-09-28T14:37:12.123456789Z"},
		{`"2026-09-28T20:07:12.345+05:30"`, "2026-09-28T14:37:12.345Z"},
		{`"2026-09-28T11:37:12.345-03:00"`, "2026-09-28T14:37:12.345Z"},
		{`"2026-09-28T14:37:12.345"`, "2026-09-28T14:37:12.345Z"},
		{`"2026-09-28T14:37:12"`, "2026-09-28T14:37:12Z"},
		{`"2026-09-28T14:37:12.3456789"`, "2026-09-28T14:37:12.3456789Z"},
		{`"2026-09-28 14:37:12.345"`, "2026-09-28T14:37:12.345Z"},
		{`"2026-09-28 14:37:12.345Z"`, "2026-09-28T14:37:12.345Z"},
		{`"2026-09-28T16:37:12.345+0200"`, "2026-09-28T14:37:12.345Z"},
		{`"2024-02-29T00:00:00Z"`, "2024-02-29T00:00:00Z"},
		{`"2026-09-28T14:37:12.345\u005a"`, "2026-09-28T14:37:12.345Z"},
		{` "2026-09-28T14:37:12Z" `, "2026-09-28T14:37:12Z"},
		{`1790606232345`, "2026-09-28T14:37:12.345Z"},
		{`1790606232345.5`, "2026-09-28T14:37:12.3455Z"},
		{`1.790606232345e12`, "2026-09-28T14:37:12.345Z"},
		{`-1000`, ""},
		{`0`, ""},
		{`48917`, ""},
		{`1790606232`, ""},
		{`946684800000`, "2000-01-01T00:00:00Z"},
		{`946684799999`, ""},
		{`4102444799999`, "2099-12-31T23:59:59.999Z"},
		{`4102444800000`, ""},
		{`253402300799999`, ""},
		{`253402300800000`, ""},
		{`"2026-09-28 14:37:12.3450000 +02:00"`, "2026-09-28T12:37:12.345Z"},
		{`"2026-09-28 14:37:12 -05:00"`, "2026-09-28T19:37:12Z"},
		{`"2026-09-28 14:37:12.3450000 Z"`, "2026-09-28T14:37:12.345Z"},
		{`1e300`, ""},
		{`""`, ""},
		{`"   "`, ""},
		{`null`, ""},
		{`true`, ""},
		{`{}`, ""},
		{`[]`, ""},
		{``, ""},
		{`"1790606232345"`, ""},
		{`"2026-02-29T00:00:00Z"`, ""},
		{`"2026-13-01T00:00:00Z"`, ""},
		{`"2026-09-28T24:00:00Z"`, ""},
		{`"2026-09-28T14:37:60Z"`, ""},
		{`"2026-09-28"`, ""},
		{`"2026-09-28T14:37:12.Z"`, ""},
		{`"2026-09-28T14:37:12.345`, ""},
		{`01`, ""},
	}
	for _, tc := range cases {
		t.Run(tc.in, func(t *testing.T) {
			got, err := ParseTime(json.RawMessage(tc.in))
			if tc.want == "" {
				if err == nil {
					t.Fatalf("ParseTime(%s) = %v, want an error", tc.in, got)
				}
				return
			}
			if err != nil {
				t.Fatalf("ParseTime(%s): %v", tc.in, err)
			}
			if want := utc(t, tc.want); !got.Equal(want) || got.Location() != time.UTC {
				t.Errorf("ParseTime(%s) = %v, want %v", tc.in, got, want)
			}
		})
	}
	if _, err := ParseTime(json.RawMessage(`"x"`)); err == nil || !strings.Contains(err.Error(), "want RFC 3339") {
		t.Errorf("error %v does not say what is wanted", err)
	}
}

func TestMatchDescription(t *testing.T) {
	for _, tc := range []struct {
		glob, desc string
		want       bool
	}{
		{"KafkaV2[Subscribe[orders]]", "KafkaV2[Subscribe[orders]]", true}, // brackets are literal
		{"KafkaV2[Subscribe[orders]]", "KafkaV2[Subscribe[order]]", false},
		{"*orders*", "KafkaV2[Subscribe[orders]]", true},
		{"*orders*", "DeltaSource[s3://lake/customers]", false},
		{"Delta*customers]", "DeltaSource[s3://lake/customers]", true},
		{"?afka*", "KafkaV2[x]", true},
		{"?afka*", "afka", false},
		{"*", "", true},
		{"", "", true},
		{"", "x", false},
		{"a*b*c", "aXbYbZc", true},
		{"a*b*c", "aXbYbZ", false},
		{"*ü*", "Quelle[ü]", true},
	} {
		if got := MatchDescription(tc.glob, tc.desc); got != tc.want {
			t.Errorf("MatchDescription(%q, %q) = %v, want %v", tc.glob, tc.desc, got, tc.want)
		}
	}
}

// TestCandidateByDescription: a source picked by description follows the
// source when a redeploy swaps the plan's order, where an index would read
// the other one; no match or two matches give no candidate.
func TestCandidateByDescription(t *testing.T) {
	orders := Source{Description: "KafkaV2[Subscribe[orders]]", EndOffset: json.RawMessage(`{"commit_ts":"2026-09-28T15:10:00Z"}`)}
	customers := Source{Description: "KafkaV2[Subscribe[customers]]", EndOffset: json.RawMessage(`{"commit_ts":"2026-09-28T09:10:00Z"}`)}
	run1 := &Event{Kind: KindProgress, BatchID: 7, Sources: []Source{orders, customers}}
	run2 := &Event{Kind: KindProgress, BatchID: 8, Sources: []Source{customers, orders}} // swapped by a redeploy

	byDesc := mustSpec(t, SpecOptions{Source: "description:*[orders]]"})
	byIndex := mustSpec(t, SpecOptions{Source: "0"})
	for i, ev := range []*Event{run1, run2} {
		c, ok := byDesc.Candidate(ev)
		if !ok || !c.Until.Equal(time.Date(2026, 9, 28, 15, 0, 0, 0, time.UTC)) || c.Source != i {
			t.Errorf("run %d by description: %+v, %v", i+1, c, ok)
		}
		if idx, n := byDesc.PickSource(ev); n != 1 || ev.Sources[idx].Description != orders.Description {
			t.Errorf("run %d: PickSource = %d, %d", i+1, idx, n)
		}
	}
	if c, _ := byIndex.Candidate(run2); !c.Until.Equal(time.Date(2026, 9, 28, 9, 0, 0, 0, time.UTC)) {
		t.Errorf("source 0 after the swap reads %v (the customers source), the reason to warn", c.Until)
	}
	for _, glob := range []string{"description:*payments*", "description:KafkaV2*"} {
		s := mustSpec(t, SpecOptions{Source: glob})
		if c, ok := s.Candidate(run1); ok {
			t.Errorf("%s: candidate %+v, want none (no match or several)", glob, c)
		}
	}
	if _, n := mustSpec(t, SpecOptions{Source: "description:KafkaV2*"}).PickSource(run1); n != 2 {
		t.Errorf("PickSource of an ambiguous glob: %d matches, want 2", n)
	}
}

// TestAppendPointerAsSplit checks the pointer's split onto the stack
// against the strings.Split it replaced, on every shape of pointer:
// empty tokens, trailing and doubled slashes, escapes, bad escapes.
func TestAppendPointerAsSplit(t *testing.T) {
	split := func(p string) ([]string, bool) {
		if p == "" {
			return nil, true
		}
		if p[0] != '/' {
			return nil, false
		}
		tokens := strings.Split(p[1:], "/")
		for i, tok := range tokens {
			for j := 0; j < len(tok); j++ {
				if tok[j] == '~' && (j+1 == len(tok) || (tok[j+1] != '0' && tok[j+1] != '1')) {
					return nil, false
				}
			}
			tokens[i] = strings.ReplaceAll(strings.ReplaceAll(tok, "~1", "/"), "~0", "~")
		}
		return tokens, true
	}
	for _, p := range []string{"", "/", "//", "/a", "/a/", "/a//b", "/commit_ts", "/a/b/c/d/e/f", "a", "/~0", "/~1",
		"/~01", "/~10/x", "/~", "/a~", "/~2", "/a/~1b/~0c", "/ü/ç", "/ / "} {
		want, wantOK := split(p)
		var room [4]string
		got, err := appendPointer(room[:0], p)
		if (err == nil) != wantOK || !slices.Equal(got, want) {
			t.Errorf("appendPointer(%q) = %q, %v; strings.Split gives %q, ok %v", p, got, err, want, wantOK)
		}
	}
}
