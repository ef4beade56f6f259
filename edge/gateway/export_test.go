package gateway

import "time"

// WithTerminalGrace returns set with terminalGrace replaced by d.
func WithTerminalGrace(set Settings, d time.Duration) Settings {
	set.terminalGrace = d
	return set
}
