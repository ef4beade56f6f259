package console_test

import (
	"io"
	"log/slog"
	"testing"

	"github.com/labstack/echo/v4"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/vesta-cx/euterpe/daemon"
	"github.com/vesta-cx/euterpe/edge/console"
	"github.com/vesta-cx/euterpe/edge/jobs"
)

// mounted serves a console over store's jobs, with its own metrics
// registry and a quiet log.
func mounted(t *testing.T, store *jobs.Store) *echo.Echo {
	t.Helper()
	c, err := console.New(console.Deps{Jobs: store, Metrics: prometheus.NewRegistry()})
	require.NoError(t, err)
	e := daemon.NewEcho(slog.New(slog.NewTextHandler(io.Discard, nil)))
	c.Mount(e)
	return e
}
