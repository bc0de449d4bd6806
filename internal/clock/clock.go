// Package clock reads the time for engines that have no clock of their own.
package clock

import "time"

// OrNow returns t, or the system clock's reading when t is zero, in UTC at
// microsecond resolution: the resolution every engine stores times at.
func OrNow(t time.Time) time.Time {
	if t.IsZero() {
		t = time.Now()
	}
	return t.UTC().Truncate(time.Microsecond)
}
