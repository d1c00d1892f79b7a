package budget

import (
	"fmt"
	"time"
)

// Window is a calendar period a Budget's limit holds over (spec/budgets.md, "Windows"):
// aligned to the calendar of a time zone, never a sliding duration, so that "500 USD a
// month" resets on the first of the month at midnight where the team is.
type Window string

// The windows of a limit.
const (
	Minute Window = "Minute"
	Hour   Window = "Hour"
	Day    Window = "Day"
	// Week is an ISO week: from Monday 00:00 to the next Monday 00:00.
	Week Window = "Week"
	// Month is a calendar month, from the first at 00:00 to the first of the next.
	Month Window = "Month"
)

// ParseWindow returns the window named s.
func ParseWindow(s string) (Window, error) {
	switch w := Window(s); w {
	case Minute, Hour, Day, Week, Month:
		return w, nil
	}
	return "", fmt.Errorf("window must be one of Minute, Hour, Day, Week and Month")
}

// Bounds returns the window that holds t in loc: its start (inclusive) and its end
// (exclusive), the start of the next one.
//
// Minutes and hours are measured on the instant, not the wall clock: in the hour a
// daylight-saving change repeats (02:00–03:00 twice in Europe/Berlin in October) each
// of the two hours is a window of its own, and an hour is always 60 minutes. Days,
// weeks and months follow the wall clock: a day is 23 or 25 hours across a change, a
// week or month as long as the calendar says. A midnight that does not exist (a zone
// that changes its clocks at 00:00) starts the day at the first instant that does.
func (w Window) Bounds(t time.Time, loc *time.Location) (start, end time.Time) {
	local := t.In(loc)
	switch w {
	case Minute:
		start = local.Add(-time.Duration(local.Second())*time.Second - time.Duration(local.Nanosecond()))
		return start, start.Add(time.Minute)
	case Hour:
		start = local.Add(-time.Duration(local.Minute())*time.Minute - time.Duration(local.Second())*time.Second - time.Duration(local.Nanosecond()))
		return start, start.Add(time.Hour)
	case Week:
		back := (int(local.Weekday()) + 6) % 7 // days since Monday
		y, m, d := local.Date()
		return midnight(y, m, d-back, loc), midnight(y, m, d-back+7, loc)
	case Month:
		y, m, _ := local.Date()
		return midnight(y, m, 1, loc), midnight(y, m+1, 1, loc)
	default: // Day
		y, m, d := local.Date()
		return midnight(y, m, d, loc), midnight(y, m, d+1, loc)
	}
}

// midnight is the first instant of the day y-m-d in loc. time.Date normalizes a
// wall-clock time a change skipped forward, so a skipped midnight becomes the first
// instant after the gap; one that a change repeats is its first occurrence.
func midnight(y int, m time.Month, d int, loc *time.Location) time.Time {
	t := time.Date(y, m, d, 0, 0, 0, 0, loc)
	if t.Hour() != 0 {
		// Skipped forward: time.Date may have normalized back into the previous day.
		if t.Day() != time.Date(y, m, d, 12, 0, 0, 0, loc).Day() {
			t = t.Add(time.Hour)
		}
		t = t.Add(-time.Duration(t.Minute())*time.Minute - time.Duration(t.Second())*time.Second)
	}
	return t
}
