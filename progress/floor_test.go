package progress

import (
	"testing"
	"time"
	_ "time/tzdata" // the zones below, even where the system has no tzdata
)

func loadZone(t testing.TB, name string) *time.Location {
	t.Helper()
	loc, err := time.LoadLocation(name)
	if err != nil {
		t.Fatal(err)
	}
	return loc
}

func TestFloor(t *testing.T) {
	cases := []struct {
		name string
		zone string
		t    string // RFC 3339
		g    Granularity
		want string // RFC 3339, UTC
	}{
		// Reference test 1: an end at 14:37:12.345 (UTC).
		{"minute", "UTC", "2026-09-28T14:37:12.345Z", Minute, "2026-09-28T14:37:00Z"},
		{"hour", "UTC", "2026-09-28T14:37:12.345Z", Hour, "2026-09-28T14:00:00Z"},
		{"day", "UTC", "2026-09-28T14:37:12.345Z", Day, "2026-09-28T00:00:00Z"},
		{"on a boundary", "UTC", "2026-09-28T14:00:00Z", Hour, "2026-09-28T14:00:00Z"},
		{"just before a boundary", "UTC", "2026-09-28T13:59:59.999999999Z", Hour, "2026-09-28T13:00:00Z"},
		{"before 1970", "UTC", "1969-12-31T23:59:30.5Z", Minute, "1969-12-31T23:59:00Z"},
		{"a time in another zone", "UTC", "2026-09-28T01:37:12+03:00", Day, "2026-09-27T00:00:00Z"},

		// Europe/London, 2026-03-29: 01:00 GMT becomes 02:00 BST (a 23-hour day).
		{"London spring day", "Europe/London", "2026-03-29T12:00:00Z", Day, "2026-03-29T00:00:00Z"},
		{"London spring next day", "Europe/London", "2026-03-29T23:30:00Z", Day, "2026-03-29T23:00:00Z"},
		{"London last GMT hour", "Europe/London", "2026-03-29T00:59:59Z", Hour, "2026-03-29T00:00:00Z"},
		{"London first BST hour", "Europe/London", "2026-03-29T01:30:00Z", Hour, "2026-03-29T01:00:00Z"},
		// 2026-10-25: 02:00 BST becomes 01:00 GMT (a 25-hour day, 01:xx twice).
		{"London autumn day", "Europe/London", "2026-10-25T12:00:00Z", Day, "2026-10-24T23:00:00Z"},
		{"London autumn day, early", "Europe/London", "2026-10-24T23:00:00Z", Day, "2026-10-24T23:00:00Z"},
		{"London autumn next day", "Europe/London", "2026-10-26T00:00:00Z", Day, "2026-10-26T00:00:00Z"},
		{"London 01:30 BST", "Europe/London", "2026-10-25T00:30:00Z", Hour, "2026-10-25T00:00:00Z"},
		{"London 01:30 GMT", "Europe/London", "2026-10-25T01:30:00Z", Hour, "2026-10-25T01:00:00Z"},

		// America/New_York, 2026-03-08: 02:00 EST becomes 03:00 EDT.
		{"New York spring day", "America/New_York", "2026-03-08T20:00:00Z", Day, "2026-03-08T05:00:00Z"},
		{"New York spring next day", "America/New_York", "2026-03-09T04:00:00Z", Day, "2026-03-09T04:00:00Z"},
		{"New York 01:30 EST", "America/New_York", "2026-03-08T06:30:00Z", Hour, "2026-03-08T06:00:00Z"},
		{"New York 03:30 EDT", "America/New_York", "2026-03-08T07:30:00Z", Hour, "2026-03-08T07:00:00Z"},
		// 2026-11-01: 02:00 EDT becomes 01:00 EST.
		{"New York autumn day", "America/New_York", "2026-11-02T04:59:59Z", Day, "2026-11-01T04:00:00Z"},
		{"New York autumn next day", "America/New_York", "2026-11-02T05:00:00Z", Day, "2026-11-02T05:00:00Z"},
		{"New York 01:30 EDT", "America/New_York", "2026-11-01T05:30:00Z", Hour, "2026-11-01T05:00:00Z"},
		{"New York 01:30 EST", "America/New_York", "2026-11-01T06:30:00Z", Hour, "2026-11-01T06:00:00Z"},
		{"New York 01:59:59 EST minute", "America/New_York", "2026-11-01T06:59:59Z", Minute, "2026-11-01T06:59:00Z"},

		// Asia/Kolkata, +05:30: hours start at :30 UTC, days at 18:30 UTC.
		{"Kolkata hour", "Asia/Kolkata", "2026-09-28T14:37:12.345Z", Hour, "2026-09-28T14:30:00Z"},
		{"Kolkata hour before :30", "Asia/Kolkata", "2026-09-28T14:29:59Z", Hour, "2026-09-28T13:30:00Z"},
		{"Kolkata day", "Asia/Kolkata", "2026-09-28T14:37:12.345Z", Day, "2026-09-27T18:30:00Z"},
		{"Kolkata minute", "Asia/Kolkata", "2026-09-28T14:37:12.345Z", Minute, "2026-09-28T14:37:00Z"},

		// Australia/Lord_Howe moves by 30 minutes. 2024-04-07 02:00 +11
		// becomes 01:30 +10:30: the second 01:30-02:00 starts at the change.
		{"Lord Howe 01:45 +11", "Australia/Lord_Howe", "2024-04-06T14:45:00Z", Hour, "2024-04-06T14:00:00Z"},
		{"Lord Howe 01:45 +10:30", "Australia/Lord_Howe", "2024-04-06T15:15:00Z", Hour, "2024-04-06T15:00:00Z"},
		{"Lord Howe 02:10 +10:30", "Australia/Lord_Howe", "2024-04-06T15:40:00Z", Hour, "2024-04-06T15:30:00Z"},
		// 2024-10-06 02:00 +10:30 becomes 02:30 +11: 02:00-03:00 is 30 minutes.
		{"Lord Howe 01:45 +10:30 spring", "Australia/Lord_Howe", "2024-10-05T15:15:00Z", Hour, "2024-10-05T14:30:00Z"},
		{"Lord Howe 02:45 +11", "Australia/Lord_Howe", "2024-10-05T15:45:00Z", Hour, "2024-10-05T15:30:00Z"},
		{"Lord Howe day", "Australia/Lord_Howe", "2024-10-06T12:00:00Z", Day, "2024-10-05T13:30:00Z"},

		// America/Havana changes at midnight. 2024-03-10 00:00 CST becomes
		// 01:00 CDT: the day starts at 01:00.
		{"Havana skipped midnight", "America/Havana", "2024-03-10T16:00:00Z", Day, "2024-03-10T05:00:00Z"},
		{"Havana day before", "America/Havana", "2024-03-10T04:59:59Z", Day, "2024-03-09T05:00:00Z"},
		{"Havana first hour", "America/Havana", "2024-03-10T05:30:00Z", Hour, "2024-03-10T05:00:00Z"},
		// 2024-11-03 01:00 CDT becomes 00:00 CST: the day starts at the first midnight.
		{"Havana 00:30 CDT", "America/Havana", "2024-11-03T04:30:00Z", Day, "2024-11-03T04:00:00Z"},
		{"Havana 00:30 CST", "America/Havana", "2024-11-03T05:30:00Z", Day, "2024-11-03T04:00:00Z"},
		{"Havana 00:30 CST hour", "America/Havana", "2024-11-03T05:30:00Z", Hour, "2024-11-03T05:00:00Z"},

		// America/Santiago, 2024-04-07 00:00 -03 becomes 23:00 -04 on the 6th:
		// the 6th lasts 25 hours, the 7th starts at the later midnight.
		{"Santiago 23:30 -03", "America/Santiago", "2024-04-07T02:30:00Z", Day, "2024-04-06T03:00:00Z"},
		{"Santiago 23:30 -04", "America/Santiago", "2024-04-07T03:30:00Z", Day, "2024-04-06T03:00:00Z"},
		{"Santiago 23:30 -04 hour", "America/Santiago", "2024-04-07T03:30:00Z", Hour, "2024-04-07T03:00:00Z"},
		{"Santiago next day", "America/Santiago", "2024-04-07T04:00:00Z", Day, "2024-04-07T04:00:00Z"},
		// 2024-09-08 00:00 -04 becomes 01:00 -03.
		{"Santiago skipped midnight", "America/Santiago", "2024-09-08T15:00:00Z", Day, "2024-09-08T04:00:00Z"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			loc := loadZone(t, tc.zone)
			in := utc(t, tc.t)
			got := Floor(in, tc.g, loc)
			if want := utc(t, tc.want); !got.Equal(want) {
				t.Fatalf("Floor(%s, %v, %s) = %s (%s), want %s (%s)", tc.t, tc.g, tc.zone,
					got.Format(time.RFC3339), got.In(loc).Format(time.RFC3339), tc.want, utc(t, tc.want).In(loc).Format(time.RFC3339))
			}
			if got.Location() != time.UTC {
				t.Errorf("result in %v, want UTC", got.Location())
			}
			if again := Floor(got, tc.g, loc); !again.Equal(got) {
				t.Errorf("not idempotent: Floor(%s) = %s", got, again)
			}
		})
	}
}

// TestFloorDayLengths checks the lengths of days around DST changes: the
// distance between the starts of consecutive days.
func TestFloorDayLengths(t *testing.T) {
	cases := []struct {
		zone string
		day  string // noon UTC of the day
		want time.Duration
	}{
		{"Europe/London", "2026-03-29T12:00:00Z", 23 * time.Hour},
		{"Europe/London", "2026-10-25T12:00:00Z", 25 * time.Hour},
		{"Europe/London", "2026-07-01T12:00:00Z", 24 * time.Hour},
		{"America/New_York", "2026-03-08T12:00:00Z", 23 * time.Hour},
		{"America/New_York", "2026-11-01T12:00:00Z", 25 * time.Hour},
		{"Asia/Kolkata", "2026-03-29T12:00:00Z", 24 * time.Hour},
		{"America/Havana", "2024-03-10T12:00:00Z", 23 * time.Hour},
		{"America/Havana", "2024-11-03T12:00:00Z", 25 * time.Hour},
		{"America/Santiago", "2024-04-06T12:00:00Z", 25 * time.Hour},
		{"America/Santiago", "2024-09-08T12:00:00Z", 23 * time.Hour},
		{"Australia/Lord_Howe", "2024-04-07T00:00:00Z", 24*time.Hour + 30*time.Minute},
		{"Australia/Lord_Howe", "2024-10-06T00:00:00Z", 23*time.Hour + 30*time.Minute},
	}
	for _, tc := range cases {
		t.Run(tc.zone+" "+tc.day[:10], func(t *testing.T) {
			loc := loadZone(t, tc.zone)
			start := Floor(utc(t, tc.day), Day, loc)
			// The next day starts at the first instant Floor moves to.
			next := start
			for probe := start; probe.Sub(start) < 27*time.Hour; probe = probe.Add(time.Minute) {
				if f := Floor(probe, Day, loc); f.After(start) {
					next = f
					break
				}
			}
			if got := next.Sub(start); got != tc.want {
				t.Errorf("day from %s to %s lasts %v, want %v", start, next, got, tc.want)
			}
		})
	}
}

// TestFloorProperties sweeps DST days minute by minute: Floor is never
// after t, is idempotent, never moves back as t moves on, and a result is
// the start of a wall-clock period or a change of UTC offset.
func TestFloorProperties(t *testing.T) {
	sweeps := []struct {
		zone, from string
	}{
		{"Europe/London", "2026-03-28T12:00:00Z"},
		{"Europe/London", "2026-10-24T12:00:00Z"},
		{"America/New_York", "2026-03-07T12:00:00Z"},
		{"America/New_York", "2026-10-31T12:00:00Z"},
		{"Asia/Kolkata", "2026-09-27T12:00:00Z"},
		{"Australia/Lord_Howe", "2024-04-05T12:00:00Z"},
		{"Australia/Lord_Howe", "2024-10-04T12:00:00Z"},
		{"America/Havana", "2024-03-09T00:00:00Z"},
		{"America/Havana", "2024-11-02T00:00:00Z"},
		{"America/Santiago", "2024-04-05T12:00:00Z"},
		{"America/Santiago", "2024-09-07T00:00:00Z"},
		{"UTC", "2026-09-28T00:00:00Z"},
	}
	for _, sw := range sweeps {
		loc := loadZone(t, sw.zone)
		from := utc(t, sw.from)
		for _, g := range []Granularity{Minute, Hour, Day} {
			var prev time.Time
			for in := from; in.Before(from.Add(48 * time.Hour)); in = in.Add(7*time.Minute + 13*time.Second) {
				got := Floor(in, g, loc)
				if got.After(in) {
					t.Fatalf("%s %v: Floor(%s) = %s is after it", sw.zone, g, in, got)
				}
				if got.Before(prev) {
					t.Fatalf("%s %v: Floor(%s) = %s moved back from %s", sw.zone, g, in, got, prev)
				}
				if again := Floor(got, g, loc); !again.Equal(got) {
					t.Fatalf("%s %v: Floor(%s) = %s, Floor of that = %s", sw.zone, g, in, got, again)
				}
				if limit := map[Granularity]time.Duration{Minute: time.Minute, Hour: time.Hour, Day: 26 * time.Hour}[g]; in.Sub(got) >= limit {
					t.Fatalf("%s %v: Floor(%s) = %s is too far back", sw.zone, g, in, got)
				}
				lt := got.In(loc)
				_, off := lt.Zone()
				_, offBefore := got.Add(-time.Nanosecond).In(loc).Zone()
				onWall := lt.Second() == 0 && lt.Nanosecond() == 0 &&
					(g == Minute || lt.Minute() == 0) && (g != Day || lt.Hour() == 0)
				if !onWall && off == offBefore {
					t.Fatalf("%s %v: Floor(%s) = %s (%s) is neither a wall-clock boundary nor an offset change",
						sw.zone, g, in, got, lt.Format(time.RFC3339))
				}
				prev = got
			}
		}
	}
}

func TestFloorInvalid(t *testing.T) {
	now := utc(t, "2026-09-28T14:37:12Z")
	if got := Floor(now, 0, nil); !got.IsZero() {
		t.Errorf("Floor with granularity 0 = %v, want the zero Time", got)
	}
	if got := Floor(now, Hour, nil); !got.Equal(utc(t, "2026-09-28T14:00:00Z")) {
		t.Errorf("Floor with a nil location = %v", got)
	}
}
