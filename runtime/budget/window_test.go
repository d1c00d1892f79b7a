package budget

import (
	"testing"
	"time"
)

func mustLoad(t *testing.T, name string) *time.Location {
	t.Helper()
	loc, err := time.LoadLocation(name)
	if err != nil {
		t.Fatalf("load %s: %v", name, err)
	}
	return loc
}

// TestWindowBounds checks calendar windows across the boundaries where a clock-based
// implementation goes wrong: month ends (31, 30, 28 and 29 days), the year end, ISO
// weeks across a month, and the daylight-saving changes of Europe/Berlin and
// America/New_York, whose days last 23 and 25 hours and whose repeated hour is two
// windows. The instants are injected; nothing reads the machine's clock.
func TestWindowBounds(t *testing.T) {
	berlin := mustLoad(t, "Europe/Berlin")
	newYork := mustLoad(t, "America/New_York")
	havana := mustLoad(t, "America/Havana") // changes its clocks at midnight
	utc := time.UTC
	at := func(loc *time.Location, s string) time.Time {
		t.Helper()
		v, err := time.ParseInLocation("2006-01-02 15:04:05", s, loc)
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	rfc := func(s string) time.Time {
		t.Helper()
		v, err := time.Parse(time.RFC3339, s)
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	for _, tc := range []struct {
		name       string
		w          Window
		loc        *time.Location
		t          time.Time
		start, end string // RFC 3339 with the zone's offset at each
		hours      float64
	}{
		{"month of 31 days, last instant", Month, berlin, at(berlin, "2026-12-31 23:59:59"), "2026-12-01T00:00:00+01:00", "2027-01-01T00:00:00+01:00", 744},
		{"month of 30 days", Month, utc, at(utc, "2026-11-30 12:00:00"), "2026-11-01T00:00:00Z", "2026-12-01T00:00:00Z", 720},
		{"february", Month, utc, at(utc, "2027-02-28 23:00:00"), "2027-02-01T00:00:00Z", "2027-03-01T00:00:00Z", 672},
		{"leap february", Month, utc, at(utc, "2028-02-29 00:00:00"), "2028-02-01T00:00:00Z", "2028-03-01T00:00:00Z", 696},
		{"month across spring forward, Berlin", Month, berlin, at(berlin, "2026-03-15 10:00:00"), "2026-03-01T00:00:00+01:00", "2026-04-01T00:00:00+02:00", 743},
		{"month across fall back, New York", Month, newYork, at(newYork, "2026-11-02 00:30:00"), "2026-11-01T00:00:00-04:00", "2026-12-01T00:00:00-05:00", 721},
		{"first instant of a month", Month, berlin, at(berlin, "2027-01-01 00:00:00"), "2027-01-01T00:00:00+01:00", "2027-02-01T00:00:00+01:00", 744},
		{"the month in Berlin is not the month in UTC", Month, berlin, rfc("2026-11-30T23:30:00Z"), "2026-12-01T00:00:00+01:00", "2027-01-01T00:00:00+01:00", 744},
		{"day of spring forward, Berlin: 23 hours", Day, berlin, at(berlin, "2026-03-29 12:00:00"), "2026-03-29T00:00:00+01:00", "2026-03-30T00:00:00+02:00", 23},
		{"day of fall back, Berlin: 25 hours", Day, berlin, at(berlin, "2026-10-25 02:30:00"), "2026-10-25T00:00:00+02:00", "2026-10-26T00:00:00+01:00", 25},
		{"day of spring forward, New York", Day, newYork, at(newYork, "2026-03-08 03:30:00"), "2026-03-08T00:00:00-05:00", "2026-03-09T00:00:00-04:00", 23},
		{"day of fall back, New York", Day, newYork, at(newYork, "2026-11-01 23:59:00"), "2026-11-01T00:00:00-04:00", "2026-11-02T00:00:00-05:00", 25},
		{"a day whose midnight does not exist", Day, havana, rfc("2026-03-08T12:00:00-04:00"), "2026-03-08T01:00:00-04:00", "2026-03-09T00:00:00-04:00", 23},
		{"the day before it ends at the gap", Day, havana, rfc("2026-03-07T12:00:00-05:00"), "2026-03-07T00:00:00-05:00", "2026-03-08T01:00:00-04:00", 24},
		{"first of the repeated hours, Berlin", Hour, berlin, rfc("2026-10-25T02:30:00+02:00"), "2026-10-25T02:00:00+02:00", "2026-10-25T03:00:00+02:00", 1},
		{"second of the repeated hours, Berlin", Hour, berlin, rfc("2026-10-25T02:30:00+01:00"), "2026-10-25T02:00:00+01:00", "2026-10-25T03:00:00+01:00", 1},
		{"hour after spring forward, New York", Hour, newYork, at(newYork, "2026-03-08 03:10:00"), "2026-03-08T03:00:00-04:00", "2026-03-08T04:00:00-04:00", 1},
		{"hour in a zone with a 45-minute offset", Hour, mustLoad(t, "Asia/Kathmandu"), rfc("2026-06-01T10:20:00Z"), "2026-06-01T16:00:00+05:45", "2026-06-01T17:00:00+05:45", 1},
		{"minute in the first repeated hour", Minute, berlin, rfc("2026-10-25T02:59:59+02:00"), "2026-10-25T02:59:00+02:00", "2026-10-25T03:00:00+02:00", 1.0 / 60},
		{"ISO week from a Sunday, across a month and year", Week, utc, at(utc, "2027-01-03 23:00:00"), "2026-12-28T00:00:00Z", "2027-01-04T00:00:00Z", 168},
		{"ISO week from its Monday", Week, utc, at(utc, "2026-12-07 00:00:00"), "2026-12-07T00:00:00Z", "2026-12-14T00:00:00Z", 168},
		{"week across fall back, Berlin", Week, berlin, at(berlin, "2026-10-25 12:00:00"), "2026-10-19T00:00:00+02:00", "2026-10-26T00:00:00+01:00", 169},
		{"year end, day", Day, newYork, at(newYork, "2026-12-31 23:59:59"), "2026-12-31T00:00:00-05:00", "2027-01-01T00:00:00-05:00", 24},
	} {
		t.Run(tc.name, func(t *testing.T) {
			start, end := tc.w.Bounds(tc.t, tc.loc)
			if !start.Equal(rfc(tc.start)) || !end.Equal(rfc(tc.end)) {
				t.Fatalf("Bounds(%s) = [%s, %s), want [%s, %s)", tc.t.Format(time.RFC3339), start.Format(time.RFC3339), end.Format(time.RFC3339), tc.start, tc.end)
			}
			if tc.t.Before(start) || !tc.t.Before(end) {
				t.Fatalf("%s is not in its own window [%s, %s)", tc.t, start, end)
			}
			if h := end.Sub(start).Hours(); h != tc.hours {
				t.Fatalf("window lasts %v hours, want %v", h, tc.hours)
			}
			// The next window starts where this one ends.
			if next, _ := tc.w.Bounds(end, tc.loc); !next.Equal(end) {
				t.Fatalf("the next window starts at %s, not at this one's end %s", next, end)
			}
		})
	}
}

// TestWindowsTile walks a year in every window and zone, hour by hour: every instant
// is in exactly one window, windows follow each other without gap or overlap.
func TestWindowsTile(t *testing.T) {
	for _, name := range []string{"UTC", "Europe/Berlin", "America/New_York", "America/Havana", "Australia/Lord_Howe"} {
		loc := mustLoad(t, name)
		for _, w := range []Window{Hour, Day, Week, Month} {
			t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
			_, prevEnd := w.Bounds(t0, loc)
			for ts := t0; ts.Before(t0.AddDate(1, 0, 0)); ts = ts.Add(17 * time.Minute) {
				start, end := w.Bounds(ts, loc)
				if ts.Before(start) || !ts.Before(end) {
					t.Fatalf("%s %s: %s outside [%s, %s)", name, w, ts, start, end)
				}
				if start.After(prevEnd) {
					t.Fatalf("%s %s: gap between %s and %s", name, w, prevEnd, start)
				}
				prevEnd = end
			}
		}
	}
}

func TestParseWindow(t *testing.T) {
	for _, s := range []string{"Minute", "Hour", "Day", "Week", "Month"} {
		if w, err := ParseWindow(s); err != nil || string(w) != s {
			t.Errorf("ParseWindow(%q) = %q, %v", s, w, err)
		}
	}
	for _, s := range []string{"", "Year", "month", "30d"} {
		if _, err := ParseWindow(s); err == nil {
			t.Errorf("ParseWindow(%q) accepted", s)
		}
	}
}
