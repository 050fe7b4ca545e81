package progress

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math/big"
	"strconv"
	"time"
)

// The range of times ParseTime accepts: what four-digit years can write.
var (
	minTime = time.Date(0, 1, 1, 0, 0, 0, 0, time.UTC)
	maxTime = time.Date(9999, 12, 31, 23, 59, 59, 999999999, time.UTC)
)

// ErrImplausible means a time written as a JSON number is not a plausible
// time in its unit: before 2000-01-01 or from 2100-01-01 on (a Kafka
// partition offset, epoch seconds read as milliseconds, a counter).
var ErrImplausible = errors.New("implausible time")

// The plausible range of a time written as a number.
var (
	plausibleFrom = time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC)
	plausibleTo   = time.Date(2100, 1, 1, 0, 0, 0, 0, time.UTC)
)

// ParseTime reads one time value of a progress (docs/contract.md §3) with the
// default options: zone-less times are UTC, numbers are milliseconds. See
// ParseTimeIn.
func ParseTime(raw json.RawMessage) (time.Time, error) {
	return ParseTimeIn(raw, Millis, nil)
}

// ParseTimeIn reads one time value of a progress: a JSON string holding an
// RFC 3339 time with any offset, the text form of SQL Server's
// datetimeoffset ("2026-09-28 14:37:12.3450000 +02:00"), or an ISO-8601
// time without a zone ("2026-09-28T14:37:12.345"), read in naive (nil
// means UTC; a wall-clock time that a DST change repeats or skips is read
// as the earliest instant it can stand for); or a JSON number in unit
// since the Unix epoch (a fraction is kept to the nanosecond). A space may
// stand for the 'T'. The result is in UTC. It returns an error for
// anything else: null, an empty string, another layout, another JSON type,
// a time outside years 0000-9999, or a number that is not a plausible time
// in its unit (before 2000 or from 2100 on; the error wraps
// ErrImplausible).
func ParseTimeIn(raw json.RawMessage, unit TimeUnit, naive *time.Location) (time.Time, error) {
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
		t, ok := parseTimeBytesIn(body, naive)
		if !ok {
			return time.Time{}, fmt.Errorf("parse time %s: want RFC 3339, ISO-8601 without a zone or a number of %s since the epoch", clip(string(b)), unit)
		}
		return t, nil
	case c == '-' || (c >= '0' && c <= '9'):
		end, err := skipNumber(b, 0)
		if err != nil || end != len(b) {
			return time.Time{}, fmt.Errorf("parse time %s: invalid JSON number", clip(string(b)))
		}
		t, ok := epochNumber(b, unit)
		if !ok {
			return time.Time{}, fmt.Errorf("parse time %s: %w: as %s since the epoch it is not between 2000 and 2100", clip(string(b)), ErrImplausible, unit)
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

// unitNanos is the length of one unit in nanoseconds.
func unitNanos(u TimeUnit) int64 {
	switch u {
	case Seconds:
		return 1e9
	case Micros:
		return 1e3
	}
	return 1e6
}

// epochNumber reads a validated JSON number as a count of unit since the
// epoch; false when it is not a plausible time.
func epochNumber(b []byte, unit TimeUnit) (time.Time, bool) {
	per := unitNanos(unit)
	lo, hi := plausibleFrom.UnixNano()/per, plausibleTo.UnixNano()/per
	var t time.Time
	if n, ok := parseInt64(b); ok {
		if n < lo || n >= hi {
			return t, false
		}
		t = time.Unix(0, n*per).UTC()
	} else {
		// A fraction or an exponent, read exactly: a float64 rounds
		// 1764550799999.9999999 up to the hour 01:00:00 it is 100 ns
		// short of, and the period holding the batch's end would be
		// declared final. The nanoseconds are truncated (towards "not yet").
		if len(b) > 64 {
			return t, false // no plausible time is written that long
		}
		if i := bytes.IndexAny(b, "eE"); i >= 0 {
			// Bound the exponent before big.Rat expands it (1e999999999).
			if e, err := strconv.Atoi(string(b[i+1:])); err != nil || e > 40 || e < -40 {
				return t, false
			}
		}
		r, ok := new(big.Rat).SetString(string(b))
		if !ok {
			return t, false
		}
		r.Mul(r, new(big.Rat).SetInt64(per))
		ns := new(big.Int).Quo(r.Num(), r.Denom()) // toward zero
		if r.Sign() < 0 || !ns.IsInt64() || ns.Int64() < lo*per || ns.Int64() >= hi*per {
			return t, false
		}
		t = time.Unix(0, ns.Int64()).UTC()
	}
	if t.Before(plausibleFrom) || !t.Before(plausibleTo) {
		return time.Time{}, false
	}
	return t, true
}

// parseTimeBytes reads a time string (already unquoted) in UTC.
func parseTimeBytes(b []byte) (time.Time, bool) { return parseTimeBytesIn(b, nil) }

// parseTimeBytesIn reads a time string (already unquoted); a zone-less one
// is read in naive (nil = UTC).
func parseTimeBytesIn(b []byte, naive *time.Location) (time.Time, bool) {
	if t, ok := fastUTC(b); ok {
		return t, true
	}
	if naive == nil || naive == time.UTC {
		// The ISO-8601 time without a zone that CDC offsets carry
		// (commit_ts), read in UTC: without the general path's attempts
		// at RFC 3339 first, which fail and allocate their error.
		if n := len(b); n >= 19 && b[n-1] >= '0' && b[n-1] <= '9' {
			z := make([]byte, 0, 40)
			if t, ok := fastUTC(append(append(z, b...), 'Z')); ok {
				return t, true
			}
		}
	}
	return parseTimeStringIn(string(b), naive)
}

// The layouts parseTimeString tries after RFC 3339.
const (
	layoutNaive       = "2006-01-02T15:04:05.999999999"
	layoutBasicOffset = "2006-01-02T15:04:05.999999999Z0700"
	// SQL Server's datetimeoffset as text: a space before the offset.
	layoutSpaceOffset = "2006-01-02T15:04:05.999999999 Z07:00"
)

func parseTimeString(s string) (time.Time, bool) { return parseTimeStringIn(s, nil) }

func parseTimeStringIn(s string, naive *time.Location) (time.Time, bool) {
	if len(s) > 10 && s[10] == ' ' {
		s = s[:10] + "T" + s[11:]
	}
	if t, err := time.Parse(time.RFC3339Nano, s); err == nil {
		return t.UTC(), realOffset(t)
	}
	if t, err := time.ParseInLocation(layoutNaive, s, time.UTC); err == nil {
		if naive != nil && naive != time.UTC {
			return wallToInstant(t, naive), true
		}
		return t, true
	}
	if t, err := time.Parse(layoutBasicOffset, s); err == nil {
		return t.UTC(), realOffset(t)
	}
	if t, err := time.Parse(layoutSpaceOffset, s); err == nil {
		return t.UTC(), realOffset(t)
	}
	return time.Time{}, false
}

// maxZoneOffset is the widest UTC offset a zone has (Kiribati, +14:00; the
// western-most is -12:00), and the range of SQL Server's datetimeoffset.
const maxZoneOffset = 14 * 60 * 60

// realOffset reports whether t's UTC offset is one a clock can have. The
// parser takes any two-digit hour (-23:59 reads a time almost a day later
// than it was written); such a time is no time.
func realOffset(t time.Time) bool {
	_, off := t.Zone()
	return off >= -maxZoneOffset && off <= maxZoneOffset
}

// wallToInstant returns the earliest instant whose wall clock in loc is
// the wall clock that u (in UTC) shows: of the two instants of a repeated
// hour, the first; for a wall-clock time a DST gap skips, the earliest of
// the offsets around the gap. Earlier is the side of "not yet".
func wallToInstant(u time.Time, loc *time.Location) time.Time {
	var best, fallback time.Time
	for _, probe := range [...]time.Time{u.Add(-36 * time.Hour), u, u.Add(36 * time.Hour)} {
		_, off := probe.In(loc).Zone()
		t := u.Add(-time.Duration(off) * time.Second)
		if fallback.IsZero() || t.Before(fallback) {
			fallback = t
		}
		w := t.In(loc)
		y, mo, d := w.Date()
		if time.Date(y, mo, d, w.Hour(), w.Minute(), w.Second(), w.Nanosecond(), time.UTC).Equal(u) &&
			(best.IsZero() || t.Before(best)) {
			best = t
		}
	}
	if best.IsZero() {
		best = fallback
	}
	return best.UTC()
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
