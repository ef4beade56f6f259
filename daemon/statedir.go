package daemon

import "os"

// DefaultStateDir is where a daemon keeps its state when EUTERPE_STATE_DIR is
// not set: the directory systemd's StateDirectory= hands the unit through
// $STATE_DIRECTORY, else /var/lib/euterpe, which is what StateDirectory=euterpe
// creates.
func DefaultStateDir() string {
	if d := os.Getenv("STATE_DIRECTORY"); d != "" {
		return d
	}
	return "/var/lib/euterpe"
}
