package daemon

import "os"

// DefaultStateDir is where a daemon keeps its state when EUTERPE_STATE_DIR is
// not set: the directory systemd's StateDirectory= hands the unit through
// $STATE_DIRECTORY, else /var/lib/<unit>, which is what the unit's
// StateDirectory=<unit> creates. Each program names its own directory (the
// edge "euterpe", central "euterpe-central"), so the two run side by side on
// one machine, under systemd or not, without sharing a database file or a
// key.
func DefaultStateDir(unit string) string {
	if d := os.Getenv("STATE_DIRECTORY"); d != "" {
		return d
	}
	return "/var/lib/" + unit
}
