package pipeline

import (
	"testing"
	"time"
)

// TestCheckDayStartedAtTheBoundaries: a day may be submitted from its first
// microsecond, UTC, whatever the location of the clock reading; the next
// is refused up to the last one.
func TestCheckDayStartedAtTheBoundaries(t *testing.T) {
	kiritimati := time.FixedZone("UTC+14", 14*3600)
	honolulu := time.FixedZone("UTC-10", -10*3600)
	lastMoment := time.Date(2026, 3, 1, 23, 59, 59, 999999999, time.UTC)
	for _, tc := range []struct {
		name string
		asof string
		now  time.Time
		ok   bool
	}{
		{"today at its last moment", "2026-03-01", lastMoment, true},
		{"tomorrow at today's last moment", "2026-03-02", lastMoment, false},
		{"tomorrow at its first moment", "2026-03-02", lastMoment.Add(time.Nanosecond), true},
		{"the day after, then", "2026-03-03", lastMoment.Add(time.Nanosecond), false},
		{"yesterday", "2026-02-28", lastMoment, true},
		{"a local date ahead of UTC", "2026-03-02", lastMoment.In(kiritimati), false},
		{"a local date behind UTC", "2026-03-02", lastMoment.Add(time.Nanosecond).In(honolulu), true},
		{"leap day", "2028-02-29", time.Date(2028, 2, 29, 0, 0, 0, 0, time.UTC), true},
		{"not a day: left to Validate", "2026-02-30", lastMoment, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := CheckDayStarted(tc.asof, tc.now)
			if (err == nil) != tc.ok {
				t.Fatalf("CheckDayStarted(%s, %s) = %v, want ok %v", tc.asof, tc.now, err, tc.ok)
			}
			if err != nil && ErrorCode(err) != CodeInvalidMessage {
				t.Fatalf("code %q", ErrorCode(err))
			}
		})
	}
}
