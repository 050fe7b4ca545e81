package progress

import "time"

// Floor returns the start, as a UTC instant, of the period of granularity
// g that holds t on the wall clock of loc (nil means UTC). The result is
// never after t, and Floor of the result is the result.
//
// A day is a calendar date of loc: it starts at the first instant whose
// local date is that date (local midnight, or the end of a DST gap when
// midnight is skipped), so DST days last 23 or 25 hours. A minute or hour
// is one of the wall clock under the UTC offset in effect at t (what
// java.time's truncatedTo gives when clocks move by whole hours): the hour
// repeated when clocks go back is two periods of one hour each (01:00 EDT,
// then 01:00 EST), the skipped hour has none, and in a zone whose offset
// is not whole hours (Asia/Kolkata, +05:30) hours start at :30 UTC. When
// an offset change falls inside a wall-clock hour (a 30-minute DST shift,
// as on Lord Howe Island), a period starts at the change. See
// ADR/0003-time-and-periods.md.
//
// An invalid g (not Minute, Hour or Day) gives the zero Time.
func Floor(t time.Time, g Granularity, loc *time.Location) time.Time {
	if loc == nil {
		loc = time.UTC
	}
	switch g {
	case Minute:
		return floorWall(t, 60, loc)
	case Hour:
		return floorWall(t, 3600, loc)
	case Day:
		return floorDay(t, loc)
	}
	return time.Time{}
}

// floorWall floors t to a multiple of unit seconds of the wall clock under
// the offset in effect at t, and no earlier than the start of that offset.
func floorWall(t time.Time, unit int64, loc *time.Location) time.Time {
	lt := t.In(loc)
	_, off := lt.Zone()
	wall := lt.Unix() + int64(off)
	rem := wall % unit
	if rem < 0 {
		rem += unit
	}
	r := time.Unix(lt.Unix()-rem, 0).UTC()
	if start, _ := lt.ZoneBounds(); !start.IsZero() && start.After(r) {
		if _, o := r.In(loc).Zone(); o != off {
			r = start.UTC()
		}
	}
	return r
}

// maxOffset bounds the UTC offset of any zone, local mean times included.
const maxOffset = 17 * time.Hour

// floorDay returns the first instant whose date in loc is t's date in loc.
func floorDay(t time.Time, loc *time.Location) time.Time {
	lt := t.In(loc)
	y, m, d := lt.Date()
	midnight := time.Date(y, m, d, 0, 0, 0, 0, time.UTC).Unix() // wall seconds
	// Walk the zone periods from before the earliest instant that can have
	// this date; in each, the first instant with this date (or a later one)
	// is the period's start, or midnight under the period's offset.
	p := time.Unix(midnight, 0).Add(-maxOffset).In(loc)
	for k := 0; k < 64 && !p.After(lt); k++ {
		start, end := p.ZoneBounds()
		_, off := p.Zone()
		if !onOrAfter(p, y, m, d) {
			p2 := time.Unix(midnight-int64(off), 0).In(loc)
			if (start.IsZero() || !p2.Before(start)) && (end.IsZero() || p2.Before(end)) && !p2.Before(p) {
				p = p2
			} else if !end.IsZero() {
				p = end.In(loc)
				continue
			} else {
				break
			}
		}
		if onOrAfter(p, y, m, d) && !p.After(lt) {
			return p.UTC()
		}
		break
	}
	// Unreachable for real zones; stay at or before t regardless.
	return floorWall(t, 86400, loc)
}

// onOrAfter reports whether the local date of t is on or after y-m-d.
func onOrAfter(t time.Time, y int, m time.Month, d int) bool {
	ty, tm, td := t.Date()
	if ty != y {
		return ty > y
	}
	if tm != m {
		return tm > m
	}
	return td >= d
}

// Next returns the start of the period of granularity g that follows the
// period starting at start (a value Floor returned), as a UTC instant:
// the first instant after start whose Floor is not start. It probes every
// quarter of an hour (minute: every minute, day: every hour), so no
// period is skipped, however long DST makes it. An invalid g gives the
// zero Time.
func Next(start time.Time, g Granularity, loc *time.Location) time.Time {
	var step time.Duration
	switch g {
	case Minute:
		step = time.Minute
	case Hour:
		step = 15 * time.Minute
	case Day:
		step = time.Hour
	default:
		return time.Time{}
	}
	base := Floor(start, g, loc)
	for t := start.Add(step); ; t = t.Add(step) {
		if f := Floor(t, g, loc); f.After(base) {
			return f
		}
	}
}
