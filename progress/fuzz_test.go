package progress

import (
	"bytes"
	"encoding/json"
	"path/filepath"
	"reflect"
	"testing"
	"time"
)

// fuzzSpecs are the specs FuzzParse applies to every event it parses.
var fuzzSpecs = []SpecOptions{
	{},
	{Source: "all", Granularity: "day", Timezone: "America/New_York"},
	{Time: "watermark", Delay: "10m", Timezone: "Asia/Kolkata"},
	{Time: "trigger", Source: "all", Granularity: "minute"},
	{Time: "offset:/test5/0"},
	{Time: "offset:", Timezone: "Australia/Lord_Howe"},
}

// FuzzParse checks that Parse never panics, agrees with the encoding/json
// reference implementation, returns only well-formed Events, and that
// Candidate never panics on them and keeps its promises.
func FuzzParse(f *testing.F) {
	for _, line := range readLines(f, sparkLog) {
		f.Add(line, uint8(KindUnknown))
	}
	paths, err := filepath.Glob(filepath.Join("testdata", "twins", "*.json"))
	if err != nil || len(paths) == 0 {
		f.Fatalf("no twins: %v", err)
	}
	for i, p := range paths {
		f.Add(readFile(f, p), uint8(i%5))
	}
	for _, tc := range parseCases {
		f.Add([]byte(tc.data), uint8(tc.kind))
	}
	f.Add(progressDoc(`"sources":[{"startOffset":"\"x\\u00e9\"","endOffset":"{\"commit_ts\":\"2026-09-28T14:37:12.345\"}"}]`), uint8(KindProgress))
	f.Add([]byte(`{"Event":"QueryProgressEvent","progress":{"id":"8C57E1EC-94B5-4C99-B100-F694162DF0B9","runId":"`+fixtureRunID+`","batchId":-1,"sources":[{"endOffset":1e3}]}}`), uint8(KindUnknown))
	var specs []Spec
	for _, o := range fuzzSpecs {
		specs = append(specs, mustSpec(f, o))
	}

	f.Fuzz(func(t *testing.T, data []byte, k uint8) {
		kind := Kind(k % 5)
		orig := bytes.Clone(data)
		ev, err := Parse(data, kind)
		if !bytes.Equal(data, orig) {
			t.Fatal("Parse changed its input")
		}
		ref, refErr := refParse(data, kind)
		if errClass(err) != errClass(refErr) {
			t.Fatalf("Parse error %v, reference error %v", err, refErr)
		}
		if err != nil {
			if ev != nil {
				t.Fatal("an Event with an error")
			}
			return
		}
		if !reflect.DeepEqual(ev, ref) {
			t.Fatalf("Parse and reference differ:\n got %+v\n ref %+v", ev, ref)
		}
		checkEvent(t, ev, kind)
		for _, s := range specs {
			c, ok := s.Candidate(ev)
			if ok {
				checkCandidate(t, s, c, true)
			}
		}
	})
}

// checkEvent checks the invariants of every Event Parse returns.
func checkEvent(t *testing.T, ev *Event, kind Kind) {
	t.Helper()
	if ev.Kind < KindStarted || ev.Kind > KindTerminated || (kind != KindUnknown && ev.Kind != kind) {
		t.Fatalf("kind %v (asked %v)", ev.Kind, kind)
	}
	for _, id := range []string{ev.QueryID, ev.RunID} {
		if !refUUIDRe.MatchString(id) || id != string(bytes.ToLower([]byte(id))) {
			t.Fatalf("id %q", id)
		}
	}
	if ev.Kind != KindProgress && (ev.BatchID != -1 || ev.Sources != nil || ev.Watermark != "") {
		t.Fatalf("a %v event with progress fields: %+v", ev.Kind, ev)
	}
	if !ev.Timestamp.IsZero() && ev.Timestamp.Location() != time.UTC {
		t.Fatalf("timestamp in %v", ev.Timestamp.Location())
	}
	for _, s := range ev.Sources {
		for _, off := range []json.RawMessage{s.StartOffset, s.EndOffset} {
			if off == nil {
				continue
			}
			if !json.Valid(off) || string(appendCompact(nil, off)) != string(off) || string(off) == "null" {
				t.Fatalf("offset %q is not compact JSON", off)
			}
		}
	}
}

// checkCandidate checks the promises of a candidate. EndOffset is valid
// JSON when the Event's offsets are (as they are from Parse).
func checkCandidate(t *testing.T, s Spec, c Candidate, validOffsets bool) {
	t.Helper()
	if c.Until.Location() != time.UTC || c.Time.Location() != time.UTC {
		t.Fatalf("candidate not in UTC: %+v", c)
	}
	if c.Until.After(c.Time.Add(-s.Delay)) {
		t.Fatalf("Until %v after time %v - delay %v", c.Until, c.Time, s.Delay)
	}
	if again := Floor(c.Until, s.Granularity, s.location()); !again.Equal(c.Until) {
		t.Fatalf("Until %v is not a period start (Floor gives %v)", c.Until, again)
	}
	if validOffsets && c.EndOffset != nil && !json.Valid(c.EndOffset) {
		t.Fatalf("EndOffset %q", c.EndOffset)
	}
}

// FuzzCandidate checks that Candidate never panics on any endOffset (even
// invalid JSON in an Event built by hand), pointer, zone and delay, that
// its pointer agrees with a plain decoded lookup, and that a candidate
// keeps its promises.
func FuzzCandidate(f *testing.F) {
	f.Add([]byte(cdcEnd), "/commit_ts", "2026-09-28T14:20:31.000Z", uint8(0), uint8(1), int64(0))
	f.Add([]byte(`{"a/b":{"m~n":[1,"2026-09-28T14:37:12+05:30"]}}`), "/a~1b/m~0n/1", "1970-01-01T00:00:00Z", uint8(3), uint8(2), int64(time.Hour))
	f.Add([]byte(`1790606232345`), "", "", uint8(2), uint8(3), int64(90*time.Second))
	f.Add([]byte(`{"commit_ts":"2026-09-28T14:37:12.345"}`), "/commit_ts", "2026-02-29T14:37:12.3456789", uint8(0), uint8(1), int64(0))
	f.Add([]byte(`{"commit_ts":-62167219200000}`), "/commit_ts", "0000-01-01T00:00:00Z", uint8(5), uint8(0), int64(0))
	f.Add([]byte(`{"commit_ts":"9999-12-31T23:59:59.999999999-23:59"}`), "/commit_ts", "9999-12-31T23:59:59Z", uint8(4), uint8(2), int64(1<<62))
	zones := []string{"UTC", "Europe/London", "America/New_York", "Asia/Kolkata", "Australia/Lord_Howe", "America/Havana", "America/Santiago"}
	var locs []*time.Location
	for _, z := range zones {
		locs = append(locs, loadZone(f, z))
	}
	f.Fuzz(func(t *testing.T, end []byte, ptr, watermark string, zone, g uint8, delay int64) {
		if delay < 0 {
			delay = -delay
		}
		if delay < 0 {
			delay = 0
		}
		ev := &Event{
			Kind: KindProgress, BatchID: 1, Watermark: watermark,
			Timestamp: time.Date(2026, 9, 28, 14, 38, 5, 0, time.UTC),
			Sources:   []Source{{EndOffset: end}, {EndOffset: json.RawMessage(cdcEnd)}},
		}
		loc := locs[int(zone)%len(locs)]
		for _, tk := range []TimeKind{TimeOffset, TimeWatermark, TimeTrigger} {
			for _, src := range []int{0, 1, SourceAll} {
				s := Spec{Time: tk, Pointer: ptr, Source: src, Granularity: Granularity(g%4) + 0, Location: loc, Delay: time.Duration(delay)}
				c, ok := s.Candidate(ev)
				if ok {
					checkCandidate(t, s, c, json.Valid(end))
				}
			}
		}
		// The pointer lookup agrees with a lookup on the decoded value.
		if _, err := splitPointer(ptr); err == nil {
			got, ok := lookupPointer(end, mustTokens(ptr))
			want, wantOK := refLookup(end, ptr)
			if ok != wantOK {
				t.Fatalf("lookup %q in %q: found %v, reference %v", ptr, end, ok, wantOK)
			}
			if ok {
				t1, err1 := ParseTime(got)
				t2, err2 := ParseTime(want)
				if (err1 == nil) != (err2 == nil) || !t1.Equal(t2) {
					t.Fatalf("lookup %q in %q: %s -> %v %v, reference %s -> %v %v", ptr, end, got, t1, err1, want, t2, err2)
				}
			}
		}
		// The fast time paths agree with the general one.
		if t1, ok1 := fastUTC([]byte(watermark)); ok1 {
			t2, ok2 := parseTimeString(watermark)
			if !ok2 || !t1.Equal(t2) {
				t.Fatalf("fastUTC(%q) = %v, time.Parse gives %v %v", watermark, t1, t2, ok2)
			}
		}
		if t1, ok1 := parseTimeBytesIn([]byte(watermark), nil); ok1 {
			t2, ok2 := parseTimeStringIn(watermark, nil)
			if !ok2 || !t1.Equal(t2) {
				t.Fatalf("parseTimeBytesIn(%q) = %v, time.Parse gives %v %v", watermark, t1, t2, ok2)
			}
		}
		// Decoding strings agrees with encoding/json.
		if tok, err := json.Marshal(watermark); err == nil {
			var s string
			if json.Unmarshal(end, &s) == nil && bytes.HasPrefix(bytes.TrimSpace(end), []byte(`"`)) {
				tok = bytes.TrimSpace(end)
			}
			var want string
			_ = json.Unmarshal(tok, &want)
			if got := string(appendUnquoted(nil, tok)); got != want {
				t.Fatalf("appendUnquoted(%q) = %q, encoding/json %q", tok, got, want)
			}
		}
	})
}

func mustTokens(p string) []string {
	tokens, err := splitPointer(p)
	if err != nil {
		panic(err)
	}
	return tokens
}
