package progress

import (
	"errors"
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

// SourceByDescription, as Spec.Source, means the one source whose
// description matches Spec.Description.
const SourceByDescription = -2

// DescriptionPrefix starts a source option that picks a source by its
// description: "description:KafkaV2[Subscribe[orders]]",
// "description:*orders*".
const DescriptionPrefix = "description:"

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
	// Source is the index into the progress's sources, SourceAll, or
	// SourceByDescription. For TimeWatermark and TimeTrigger it only picks
	// the EndOffset reported with the candidate.
	Source int
	// Description is the glob that picks the source when Source is
	// SourceByDescription: "*" matches any run of characters, "?" one
	// character, and every other character itself (brackets included, as
	// Spark's descriptions are full of them). Exactly one source must
	// match; none or several give no candidate.
	Description string
	// Granularity is the length of the periods.
	Granularity Granularity
	// Location is the zone whose wall clock sets period boundaries; nil
	// means UTC.
	Location *time.Location
	// Delay is subtracted from the time before flooring (allowed lateness);
	// it is never negative in a Spec from ParseSpec.
	Delay time.Duration

	// Unit is the unit of a time written as a JSON number (TimeOffset
	// only); the zero value is milliseconds.
	Unit TimeUnit
	// NaiveLocation is the zone of a time written without one (TimeOffset
	// only); nil means UTC.
	NaiveLocation *time.Location
	// LateRowsFiltered (TimeWatermark only) is the user's word that the
	// table never receives a row whose time is below the progress's
	// watermark, so the watermark is used whatever the query's stateful
	// operators (ADR 0012). Without it, a watermark is used only from a
	// query whose stateful operators are all ones whose output Spark
	// bounds by the watermark.
	LateRowsFiltered bool
	// ProcessingTime (TimeTrigger only) is the user's word that the
	// table's time column is Spark's processing time (current_timestamp(),
	// the batch's timestamp). Without it, the trigger time is used only
	// from a progress whose every tracked source had caught up (endOffset
	// equal to latestOffset).
	ProcessingTime bool
	// QuietAfter, when not zero, finalizes quiet periods (ADR 0014): once
	// the source is known to have caught up at a time T (an idle event, a
	// progress of a trigger that ran nothing, or a progress whose every
	// tracked source's endOffset equals its latestOffset), the candidate
	// becomes floor(T - QuietAfter - Delay) when that is later. It is the
	// user's word that no row the source still delivers carries a time
	// before T - QuietAfter. TimeOffset and TimeTrigger only.
	QuietAfter time.Duration
}

// QuietOptions is the `quiet:` option of a rule: {after: 5m}.
type QuietOptions struct {
	// After bounds the source's capture latency and the clock skew between
	// the source and the Spark driver; required, no default.
	After string `json:"after,omitempty" yaml:"after,omitempty"`
}

// TimeUnit is the unit of a time written as a JSON number.
type TimeUnit uint8

// The units of numeric times.
const (
	Millis TimeUnit = iota // the default
	Seconds
	Micros
)

var unitNames = [...]string{"ms", "s", "us"}

// String returns "ms", "s" or "us".
func (u TimeUnit) String() string {
	if int(u) < len(unitNames) {
		return unitNames[u]
	}
	return "unit(" + strconv.Itoa(int(u)) + ")"
}

// ParseTimeUnit returns the TimeUnit named s ("ms", "s" or "us").
func ParseTimeUnit(s string) (TimeUnit, error) {
	for i, n := range unitNames {
		if n == s {
			return TimeUnit(i), nil
		}
	}
	return 0, fmt.Errorf("unit %q: want ms, s or us (the unit of a time written as a number)", s)
}

// SpecOptions is a tracking spec as the config file and the command line
// write it. An empty field takes its DefaultX value.
type SpecOptions struct {
	Time        string `json:"time,omitempty" yaml:"time,omitempty"`               // offset:<JSON Pointer>, watermark or trigger
	Source      string `json:"source,omitempty" yaml:"source,omitempty"`           // an index, all, or description:<glob>
	Granularity string `json:"granularity,omitempty" yaml:"granularity,omitempty"` // minute, hour or day
	Timezone    string `json:"timezone,omitempty" yaml:"timezone,omitempty"`       // an IANA zone name
	Delay       string `json:"delay,omitempty" yaml:"delay,omitempty"`             // a Go duration, not negative

	// The guards' options (ADR 0012); empty and false are the defaults.
	Unit             string `json:"unit,omitempty" yaml:"unit,omitempty"`                             // ms, s or us: numeric offset times
	NaiveTimezone    string `json:"naive_timezone,omitempty" yaml:"naive_timezone,omitempty"`         // IANA zone of zone-less offset times
	LateRowsFiltered bool   `json:"late_rows_filtered,omitempty" yaml:"late_rows_filtered,omitempty"` // watermark: the table never gets a row below it
	ProcessingTime   bool   `json:"processing_time,omitempty" yaml:"processing_time,omitempty"`       // trigger: the column is current_timestamp()

	// Quiet finalizes quiet periods (ADR 0014); nil = off.
	Quiet *QuietOptions `json:"quiet,omitempty" yaml:"quiet,omitempty"`
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
	if s.Source, s.Description, err = parseSource(or(o.Source, DefaultSource)); err != nil {
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
	if o.Unit != "" {
		if s.Time != TimeOffset {
			return Spec{}, fmt.Errorf("unit %q: only for time: offset:... (a watermark and a trigger time are never numbers)", o.Unit)
		}
		if s.Unit, err = ParseTimeUnit(o.Unit); err != nil {
			return Spec{}, err
		}
	}
	if o.NaiveTimezone != "" {
		if s.Time != TimeOffset {
			return Spec{}, fmt.Errorf("naive_timezone %q: only for time: offset:... (Spark writes watermark and trigger times in UTC)", o.NaiveTimezone)
		}
		loc, err := parseTimezone(o.NaiveTimezone)
		if err != nil {
			return Spec{}, fmt.Errorf("naive_%w", err)
		}
		if loc != time.UTC {
			s.NaiveLocation = loc
		}
	}
	if o.LateRowsFiltered {
		if s.Time != TimeWatermark {
			return Spec{}, errors.New("late_rows_filtered: only for time: watermark")
		}
		s.LateRowsFiltered = true
	}
	if o.ProcessingTime {
		if s.Time != TimeTrigger {
			return Spec{}, errors.New("processing_time: only for time: trigger")
		}
		s.ProcessingTime = true
	}
	if o.Quiet != nil {
		if s.QuietAfter, err = parseQuiet(s.Time, o.Quiet.After); err != nil {
			return Spec{}, err
		}
	}
	return s, nil
}

// parseQuiet checks the quiet option's after.
func parseQuiet(kind TimeKind, after string) (time.Duration, error) {
	if kind == TimeWatermark {
		return 0, errors.New("quiet: not with time: watermark (Spark does not move a watermark without data, and a watermark says nothing about arrival); use it with offset: or trigger")
	}
	if after == "" {
		return 0, errors.New("quiet.after: required, no default: how late a row may still arrive after its source was caught up (capture latency plus clock skew), e.g. quiet: {after: 5m}")
	}
	d, err := time.ParseDuration(after)
	if err != nil {
		return 0, fmt.Errorf("quiet.after %q: want a duration such as 5m", after)
	}
	if d <= 0 {
		return 0, fmt.Errorf("quiet.after %q: must be more than 0", after)
	}
	return d, nil
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

func parseSource(v string) (int, string, error) {
	if v == "all" {
		return SourceAll, "", nil
	}
	if glob, ok := strings.CutPrefix(v, DescriptionPrefix); ok {
		if glob == "" {
			return 0, "", fmt.Errorf("source %q: want a description glob after %q, e.g. %s*orders*", v, DescriptionPrefix, DescriptionPrefix)
		}
		return SourceByDescription, glob, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 0 || strings.HasPrefix(v, "+") {
		return 0, "", fmt.Errorf("source %q: want a source index (0, 1, ...), all, or %s<glob>", v, DescriptionPrefix)
	}
	return n, "", nil
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
	var src string
	switch s.Source {
	case SourceAll:
		src = "all"
	case SourceByDescription:
		src = DescriptionPrefix + s.Description
	default:
		src = strconv.Itoa(s.Source)
	}
	o := SpecOptions{
		Time:             t,
		Source:           src,
		Granularity:      s.Granularity.String(),
		Timezone:         s.location().String(),
		Delay:            s.Delay.String(),
		LateRowsFiltered: s.LateRowsFiltered,
		ProcessingTime:   s.ProcessingTime,
	}
	if s.Unit != Millis {
		o.Unit = s.Unit.String()
	}
	if s.NaiveLocation != nil {
		o.NaiveTimezone = s.NaiveLocation.String()
	}
	if s.QuietAfter > 0 {
		o.Quiet = &QuietOptions{After: s.QuietAfter.String()}
	}
	return o
}

// String returns s in the words of its options, e.g.
// "time=offset:/commit_ts source=0 granularity=hour timezone=UTC delay=0s".
func (s Spec) String() string {
	o := s.Options()
	out := "time=" + o.Time + " source=" + o.Source + " granularity=" + o.Granularity +
		" timezone=" + o.Timezone + " delay=" + o.Delay
	if o.Unit != "" {
		out += " unit=" + o.Unit
	}
	if o.NaiveTimezone != "" {
		out += " naive_timezone=" + o.NaiveTimezone
	}
	if o.LateRowsFiltered {
		out += " late_rows_filtered=true"
	}
	if o.ProcessingTime {
		out += " processing_time=true"
	}
	if o.Quiet != nil {
		out += " quiet.after=" + o.Quiet.After
	}
	return out
}

// The signals that a source is caught up (ADR 0014), as status and
// metrics name them.
const (
	SignalIdleEvent      = "idle_event"       // a QueryIdleEvent (Spark 3.5+)
	SignalNoDataProgress = "no_data_progress" // a progress of a trigger that ran nothing (Spark 3.0-3.4)
	SignalCaughtUp       = "caught_up"        // every tracked source's endOffset equals its latestOffset
)

// QuietAt reports whether a progress shows the rule's sources caught up,
// at which time and by which signal: a progress of a trigger that ran no
// batch with no input rows (every source had nothing new when Spark asked,
// after the progress's timestamp), or one whose every tracked source (the
// rule's, or every one under SourceAll) reports a latestOffset equal to its
// endOffset. A source without latestOffset is never caught up this way. It
// returns false when s has no QuietAfter or ev is not a progress with a
// timestamp.
func (s Spec) QuietAt(ev *Event) (time.Time, string, bool) {
	if s.QuietAfter <= 0 || ev == nil || ev.Kind != KindProgress || ev.Timestamp.IsZero() || len(ev.Sources) == 0 {
		return time.Time{}, "", false
	}
	if !ev.Executed && ev.NumInputRows == 0 && nothingRead(ev) && noneBehind(ev) {
		return ev.Timestamp.UTC(), SignalNoDataProgress, true
	}
	if s.Source != SourceAll {
		i, n := s.PickSource(ev)
		if n != 1 {
			return time.Time{}, "", false
		}
		s.Source = i
	}
	if s.behind(ev) != "" {
		return time.Time{}, "", false
	}
	return ev.Timestamp.UTC(), SignalCaughtUp, true
}

// nothingRead reports whether every source's startOffset equals its
// endOffset: the trigger read nothing (Spark records the committed offsets
// as both when it runs no batch).
func nothingRead(ev *Event) bool {
	for _, src := range ev.Sources {
		if src.StartOffset == nil || src.EndOffset == nil || !sameJSON(src.StartOffset, src.EndOffset) {
			return false
		}
	}
	return true
}

// noneBehind reports whether no source reports a latestOffset other than
// its endOffset. A trigger that ran nothing although its source had more
// (Kafka's minOffsetsPerTrigger holds a trigger until enough records wait)
// is no sign that the source was quiet.
func noneBehind(ev *Event) bool {
	for _, src := range ev.Sources {
		if src.LatestOffset != nil && !sameJSON(src.LatestOffset, src.EndOffset) {
			return false
		}
	}
	return true
}

// QuietUntil is the candidate a source caught up at t supports:
// floor(t - QuietAfter - Delay). Zero when s has no QuietAfter.
func (s Spec) QuietUntil(t time.Time) time.Time {
	if s.QuietAfter <= 0 {
		return time.Time{}
	}
	return Floor(t.Add(-s.QuietAfter-s.Delay), s.Granularity, s.location())
}

// PickSource returns the index of the source s reads in ev and how many
// sources the Spec's choice matched: for an index, 1 when it is in range
// (else 0); for SourceAll, -1 and the number of sources; for
// SourceByDescription, the matching source and the number of matches
// (usable only when that is 1).
func (s Spec) PickSource(ev *Event) (index, matches int) {
	if ev == nil {
		return -1, 0
	}
	switch {
	case s.Source == SourceAll:
		return SourceAll, len(ev.Sources)
	case s.Source == SourceByDescription:
		index = -1
		for i, src := range ev.Sources {
			if MatchDescription(s.Description, src.Description) {
				if matches == 0 {
					index = i
				}
				matches++
			}
		}
		return index, matches
	case s.Source >= 0 && s.Source < len(ev.Sources):
		return s.Source, 1
	}
	return -1, 0
}

// MatchDescription reports whether a source description matches glob:
// "*" matches any run of characters (none included), "?" any one
// character, and every other character only itself.
func MatchDescription(glob, desc string) bool {
	g, d := []rune(glob), []rune(desc)
	// The classic wildcard walk: on a mismatch, go back to the last star
	// and let it swallow one more character.
	gi, di, star, mark := 0, 0, -1, 0
	for di < len(d) {
		switch {
		case gi < len(g) && (g[gi] == '?' || (g[gi] != '*' && g[gi] == d[di])):
			gi++
			di++
		case gi < len(g) && g[gi] == '*':
			star, mark = gi, di
			gi++
		case star >= 0:
			gi = star + 1
			mark++
			di = mark
		default:
			return false
		}
	}
	for gi < len(g) && g[gi] == '*' {
		gi++
	}
	return gi == len(g)
}

func (s Spec) location() *time.Location {
	if s.Location == nil {
		return time.UTC
	}
	return s.Location
}
