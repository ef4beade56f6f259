package daemon

import "testing"

func TestDefaultStateDir(t *testing.T) {
	for _, tc := range []struct {
		name, unit, stateDirectory, want string
	}{
		{"edge outside systemd", "euterpe", "", "/var/lib/euterpe"},
		{"central outside systemd", "euterpe-central", "", "/var/lib/euterpe-central"},
		{"under systemd the unit's directory wins", "euterpe-central", "/var/lib/elsewhere", "/var/lib/elsewhere"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv("STATE_DIRECTORY", tc.stateDirectory)
			if got := DefaultStateDir(tc.unit); got != tc.want {
				t.Errorf("DefaultStateDir(%q) = %q, want %q", tc.unit, got, tc.want)
			}
		})
	}
}
