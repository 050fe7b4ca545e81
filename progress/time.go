package progress

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strconv"
	"time"
)

// The range of times ParseTime accepts: what four-digit years can write.
var (
	minTime = time.Date(0, 1, 1, 0, 0, 0, 0, time.UTC)
	maxTime = time.Date(9999, 12, 31, 23, 59, 59, 999999999, time.UTC)
)

// ParseTime reads one time value of a progress (docs/contract.md §3): a JSON
// string holding an RFC 3339 time with any offset, or an ISO-8601 time
// without a zone, read as UTC ("2026-09-28T14:37:12.345"), or a JSON number
// of milliseconds since the Unix epoch (a fraction is kept to the
// nanosecond). A space may stand for the 'T'. The result is in UTC. It
// returns an error for anything else: null, an empty string, another
// layout, another JSON type, or a time outside years 0000-9999.
func ParseTime(raw json.RawMessage) (time.Time, error) {
	b := raw[:skipWSBack(raw, skipWS(raw, 0))]
	b = b[skipWS(b, 0):]
	if len(b) == 0 {
		return time.Time{}, errors.New("parse time: empty")
	}
	switch c := b[0]; {
	case c == '"':
		end, _, err := skipString(b, 0)
		if err != nil || end != len(b) {
			return time.Time{}, fmt.Errorf("parse time %s: invalid JSON string", clip(string(b)))
		}
		body := b[1 : len(b)-1]
		if !plainString(body) {
			body = appendUnquoted(nil, b)
		}
		t, ok := parseTimeBytes(body)
		if !ok {
			return time.Time{}, fmt.Errorf("parse time %s: want RFC 3339, ISO-8601 without a zone (UTC) or epoch milliseconds", clip(string(b)))
		}
		return t, nil
	case c == '-' || (c >= '0' && c <= '9'):
		end, err := skipNumber(b, 0)
		if err != nil || end != len(b) {
			return time.Time{}, fmt.Errorf("parse time %s: invalid JSON number", clip(string(b)))
		}
		t, ok := epochMillis(b)
		if !ok {
			return time.Time{}, fmt.Errorf("parse time %s: epoch milliseconds out of range", clip(string(b)))
		}
		return t, nil
	}
	return time.Time{}, fmt.Errorf("parse time %s: want a string or a number", clip(string(b)))
}

// skipWSBack returns the end of d[i:end] without trailing whitespace.
func skipWSBack(d []byte, i int) int {
	end := len(d)
	for end > i && isWS(d[end-1]) {
		end--
	}
	return end
}

// epochMillis reads a validated JSON number as milliseconds since the
// epoch.
func epochMillis(b []byte) (time.Time, bool) {
	var t time.Time
	if ms, ok := parseInt64(b); ok {
		if ms < minTime.UnixMilli() || ms > maxTime.UnixMilli() {
			return t, false
		}
		t = time.UnixMilli(ms).UTC()
	} else {
		f, err := strconv.ParseFloat(string(b), 64)
		if err != nil || f < float64(minTime.UnixMilli()) || f > float64(maxTime.UnixMilli()) {
			return t, false
		}
		whole := math.Floor(f)
		t = time.UnixMilli(int64(whole)).Add(time.Duration((f - whole) * 1e6)).UTC()
	}
	if t.Before(minTime) || t.After(maxTime) {
		return time.Time{}, false
	}
	return t, true
}

// parseTimeBytes reads a time string (already unquoted) in UTC.
func parseTimeBytes(b []byte) (time.Time, bool) {
	if t, ok := fastUTC(b); ok {
		return t, true
	}
	return parseTimeString(string(b))
}

// The layouts parseTimeString tries after RFC 3339.
const (
	layoutNaive       = "2006-01-02T15:04:05.999999999"
	layoutBasicOffset = "2006-01-02T15:04:05.999999999Z0700"
)

func parseTimeString(s string) (time.Time, bool) {
	if len(s) > 10 && s[10] == ' ' {
		s = s[:10] + "T" + s[11:]
	}
	if t, err := time.Parse(time.RFC3339Nano, s); err == nil {
		return t.UTC(), true
	}
	if t, err := time.ParseInLocation(layoutNaive, s, time.UTC); err == nil {
		return t, true
	}
	if t, err := time.Parse(layoutBasicOffset, s); err == nil {
		return t.UTC(), true
	}
	return time.Time{}, false
}

// fastUTC parses the form Spark writes, "2020-07-29T10:56:56.015Z" (0 to 9
// fractional digits), without allocating. It returns false for anything
// else, which the general path then reads.
func fastUTC(b []byte) (time.Time, bool) {
	n := len(b)
	if n < 20 || b[4] != '-' || b[7] != '-' || b[10] != 'T' || b[13] != ':' || b[16] != ':' || b[n-1] != 'Z' {
		return time.Time{}, false
	}
	year, month, day := digits(b[0:4]), digits(b[5:7]), digits(b[8:10])
	hour, minute, sec := digits(b[11:13]), digits(b[14:16]), digits(b[17:19])
	if year < 0 || month < 1 || month > 12 || day < 1 || day > daysIn(month, year) ||
		hour < 0 || hour > 23 || minute < 0 || minute > 59 || sec < 0 || sec > 59 {
		return time.Time{}, false
	}
	ns := 0
	if frac := b[19 : n-1]; len(frac) > 0 {
		if frac[0] != '.' || len(frac) < 2 || len(frac) > 10 {
			return time.Time{}, false
		}
		if ns = digits(frac[1:]); ns < 0 {
			return time.Time{}, false
		}
		for k := len(frac) - 1; k < 9; k++ {
			ns *= 10
		}
	}
	return time.Date(year, time.Month(month), day, hour, minute, sec, ns, time.UTC), true
}

// digits returns the decimal value of b, or -1 if b is not all digits.
func digits(b []byte) int {
	v := 0
	for _, c := range b {
		if c < '0' || c > '9' {
			return -1
		}
		v = v*10 + int(c-'0')
	}
	return v
}

func daysIn(month, year int) int {
	switch month {
	case 2:
		if year%4 == 0 && (year%100 != 0 || year%400 == 0) {
			return 29
		}
		return 28
	case 4, 6, 9, 11:
		return 30
	}
	return 31
}
