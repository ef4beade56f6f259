package main

import (
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// systemd kills the daemon at TimeoutStopSec: with the default grace, a stop
// that uses all of it twice (in-flight requests, then the components) must
// still end before that.
func TestUnitStopTimeoutCoversShutdownGrace(t *testing.T) {
	unit, err := os.ReadFile("../../systemd/euterpe-edge.service")
	require.NoError(t, err)
	m := regexp.MustCompile(`(?m)^TimeoutStopSec=(\S+)$`).FindSubmatch(unit)
	require.NotNil(t, m, "the unit sets no TimeoutStopSec")
	stop, err := time.ParseDuration(string(m[1]))
	require.NoError(t, err, "TimeoutStopSec=%s", m[1])
	cfg, _ := newServeConfig(func(string) string { return "" })
	var grace time.Duration
	for _, s := range cfg.Settings() {
		if s.Env == "EUTERPE_SHUTDOWN_GRACE" {
			grace, err = time.ParseDuration(s.Default)
			require.NoError(t, err)
		}
	}
	require.Positive(t, grace, "EUTERPE_SHUTDOWN_GRACE has no default")
	require.Greater(t, stop, 2*grace, "TimeoutStopSec=%s, EUTERPE_SHUTDOWN_GRACE=%s", m[1], grace)
}

// A stop sends SIGTERM to the daemon alone (KillMode=mixed): with the
// default, systemd would signal the programs of exec backends and ffmpeg
// with it, and a job whose program died so would end as an error instead
// of draining or being recovered. The daemon stops its children itself.
func TestUnitSignalsTheDaemonAlone(t *testing.T) {
	unit, err := os.ReadFile("../../systemd/euterpe-edge.service")
	require.NoError(t, err)
	require.Regexp(t, `(?m)^KillMode=mixed$`, string(unit))
}

// Every drop-in suggested for a library root lists it with a "-": a root
// whose disk is not mounted at boot has no mount point, and a plain
// ReadWritePaths= entry that does not exist stops the unit from starting.
func TestLibraryRootDropInsTolerateAnAbsentDisk(t *testing.T) {
	for _, f := range []string{"../../systemd/euterpe-edge.service", "../../systemd/edge.env.example", "../../README.md"} {
		text, err := os.ReadFile(f)
		require.NoError(t, err)
		for _, m := range regexp.MustCompile(`ReadWritePaths=(\S*)`).FindAllStringSubmatch(string(text), -1) {
			if strings.Contains(m[1], "media") {
				require.True(t, strings.HasPrefix(m[1], "-"), "%s suggests %s", f, m[0])
			}
		}
	}
}
