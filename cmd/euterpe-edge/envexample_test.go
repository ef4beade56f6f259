package main

import (
	"os"
	"testing"

	"github.com/stretchr/testify/require"
	"github.com/vesta-cx/euterpe/daemon"
)

// The example environment file, shipped as the package's conffile
// /etc/euterpe/edge.env, shows real settings with their real defaults.
func TestEnvExampleMatchesSettings(t *testing.T) {
	text, err := os.ReadFile("../../systemd/edge.env.example")
	require.NoError(t, err)
	cfg, _ := newServeConfig(func(string) string { return "" })
	require.NoError(t, daemon.CheckEnvExample(string(text), cfg.Settings()))
}
