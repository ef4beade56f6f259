package gateway

import "time"

// WithTerminalGrace returns set with terminalGrace replaced by d.
func WithTerminalGrace(set Settings, d time.Duration) Settings {
	set.terminalGrace = d
	return set
}

// WithReadBlock returns set with the hub's readBlock replaced by d.
func WithReadBlock(set Settings, d time.Duration) Settings {
	set.readBlock = d
	return set
}
