package main

import (
	"os"
	"regexp"
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
