package sqldb

import "time"

// Micros is how every time column is stored on both engines: Unix
// microseconds, UTC. Integer comparison orders them the same everywhere.
func Micros(t time.Time) int64 { return t.UnixMicro() }

// FromMicros turns a stored time back into a time.Time in UTC.
func FromMicros(us int64) time.Time { return time.UnixMicro(us).UTC() }

// NullMicros converts a nullable column: zero time for NULL.
func NullMicros(v *int64) time.Time {
	if v == nil {
		return time.Time{}
	}
	return FromMicros(*v)
}
