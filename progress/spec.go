package progress

import (
	"fmt"
	"strconv"
	"strings"
	"time"
)

// TimeKind says where a Spec reads the time of a progress. The zero value
// is not a valid kind; a Spec holding it gives no candidate.
type TimeKind uint8

// The time kinds of docs/contract.md §3.
const (
	// TimeOffset reads a value inside a source's endOffset, at Spec.Pointer.
	TimeOffset TimeKind = iota + 1
	// TimeWatermark reads eventTime.watermark.
	TimeWatermark
	// TimeTrigger reads the progress's own timestamp.
	TimeTrigger
)

// Granularity is the length of a period. The zero value is not a valid
// granularity; Floor and Spec reject it.
type Granularity uint8

// The granularities of docs/contract.md §3.
const (
	Minute Granularity = iota + 1
	Hour
	Day
)

var granularityNames = [...]string{"", "minute", "hour", "day"}

// String returns "minute", "hour" or "day", or "granularity(N)" for an
// invalid value.
func (g Granularity) String() string {
	if g.valid() {
		return granularityNames[g]
	}
	return "granularity(" + strconv.Itoa(int(g)) + ")"
}

func (g Granularity) valid() bool { return g >= Minute && g <= Day }

// ParseGranularity returns the Granularity named s ("minute", "hour" or
// "day"). Any other string is an error.
func ParseGranularity(s string) (Granularity, error) {
	for g := Minute; g <= Day; g++ {
		if granularityNames[g] == s {
			return g, nil
		}
	}
	return 0, fmt.Errorf("granularity %q: want minute, hour or day", s)
}

// SourceAll, as Spec.Source, means every source: the earliest time over
// all of them.
const SourceAll = -1

// The defaults of a tracking spec (docs/contract.md §3), as SpecOptions strings.
const (
	DefaultTime        = "offset:/commit_ts"
	DefaultSource      = "0"
	DefaultGranularity = "hour"
	DefaultTimezone    = "UTC"
	DefaultDelay       = "0s"
)

// Spec is a parsed tracking spec: how to turn a progress into a candidate
// verdict. Build one with ParseSpec. A Spec is a value; it is safe for
// concurrent use.
type Spec struct {
	// Time is where the time is read.
	Time TimeKind
	// Pointer is the RFC 6901 JSON Pointer into the source's endOffset
	// when Time is TimeOffset ("" is the whole endOffset); unused
	// otherwise.
	Pointer string
	// Source is the index into the progress's sources, or SourceAll. For
	// TimeWatermark and TimeTrigger it only picks the EndOffset reported
	// with the candidate.
	Source int
	// Granularity is the length of the periods.
	Granularity Granularity
	// Location is the zone whose wall clock sets period boundaries; nil
	// means UTC.
	Location *time.Location
	// Delay is subtracted from the time before flooring (allowed lateness);
	// it is never negative in a Spec from ParseSpec.
	Delay time.Duration
}

// SpecOptions is a tracking spec as the config file and the command line
// write it. An empty field takes its DefaultX value.
type SpecOptions struct {
	Time        string `json:"time,omitempty" yaml:"time,omitempty"`               // offset:<JSON Pointer>, watermark or trigger
	Source      string `json:"source,omitempty" yaml:"source,omitempty"`           // an index, or all
	Granularity string `json:"granularity,omitempty" yaml:"granularity,omitempty"` // minute, hour or day
	Timezone    string `json:"timezone,omitempty" yaml:"timezone,omitempty"`       // an IANA zone name
	Delay       string `json:"delay,omitempty" yaml:"delay,omitempty"`             // a Go duration, not negative
}

// ParseSpec checks o and returns its Spec. The error names the first bad
// field and its value, e.g. `granularity "week": want minute, hour or day`.
// The timezone must be an IANA name the system (or an embedded time/tzdata)
// knows; "Local" is refused because it depends on the host.
func ParseSpec(o SpecOptions) (Spec, error) {
	var s Spec
	var err error
	if s.Time, s.Pointer, err = parseTimeOption(or(o.Time, DefaultTime)); err != nil {
		return Spec{}, err
	}
	if s.Source, err = parseSource(or(o.Source, DefaultSource)); err != nil {
		return Spec{}, err
	}
	if s.Granularity, err = ParseGranularity(or(o.Granularity, DefaultGranularity)); err != nil {
		return Spec{}, err
	}
	if s.Location, err = parseTimezone(or(o.Timezone, DefaultTimezone)); err != nil {
		return Spec{}, err
	}
	if s.Delay, err = parseDelay(or(o.Delay, DefaultDelay)); err != nil {
		return Spec{}, err
	}
	return s, nil
}

func or(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

func parseTimeOption(v string) (TimeKind, string, error) {
	switch v {
	case "watermark":
		return TimeWatermark, "", nil
	case "trigger":
		return TimeTrigger, "", nil
	}
	ptr, ok := strings.CutPrefix(v, "offset:")
	if !ok {
		return 0, "", fmt.Errorf("time %q: want offset:<JSON Pointer>, watermark or trigger", v)
	}
	if _, err := splitPointer(ptr); err != nil {
		return 0, "", fmt.Errorf("time %q: %w", v, err)
	}
	return TimeOffset, ptr, nil
}

func parseSource(v string) (int, error) {
	if v == "all" {
		return SourceAll, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 0 || strings.HasPrefix(v, "+") {
		return 0, fmt.Errorf("source %q: want a source index (0, 1, ...) or all", v)
	}
	return n, nil
}

func parseTimezone(v string) (*time.Location, error) {
	if v == "Local" {
		return nil, fmt.Errorf("timezone %q: want an IANA zone name such as UTC or Europe/London", v)
	}
	loc, err := time.LoadLocation(v)
	if err != nil {
		return nil, fmt.Errorf("timezone %q: want an IANA zone name such as UTC or Europe/London: %w", v, err)
	}
	return loc, nil
}

func parseDelay(v string) (time.Duration, error) {
	d, err := time.ParseDuration(v)
	if err != nil {
		return 0, fmt.Errorf("delay %q: want a duration such as 0s, 90s or 10m", v)
	}
	if d < 0 {
		return 0, fmt.Errorf("delay %q: must not be negative", v)
	}
	return d, nil
}

// Options returns the SpecOptions that ParseSpec turns back into s; every
// field is filled in, so the result does not depend on the defaults of a
// later version. It is how a track is persisted.
func (s Spec) Options() SpecOptions {
	var t string
	switch s.Time {
	case TimeOffset:
		t = "offset:" + s.Pointer
	case TimeWatermark:
		t = "watermark"
	case TimeTrigger:
		t = "trigger"
	default:
		t = "timekind(" + strconv.Itoa(int(s.Time)) + ")"
	}
	src := "all"
	if s.Source != SourceAll {
		src = strconv.Itoa(s.Source)
	}
	return SpecOptions{
		Time:        t,
		Source:      src,
		Granularity: s.Granularity.String(),
		Timezone:    s.location().String(),
		Delay:       s.Delay.String(),
	}
}

// String returns s in the words of its options, e.g.
// "time=offset:/commit_ts source=0 granularity=hour timezone=UTC delay=0s".
func (s Spec) String() string {
	o := s.Options()
	return "time=" + o.Time + " source=" + o.Source + " granularity=" + o.Granularity +
		" timezone=" + o.Timezone + " delay=" + o.Delay
}

func (s Spec) location() *time.Location {
	if s.Location == nil {
		return time.UTC
	}
	return s.Location
}
