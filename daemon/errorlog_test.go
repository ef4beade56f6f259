package daemon_test

import (
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/vesta-cx/euterpe/daemon"
	"github.com/vesta-cx/euterpe/daemon/testsvc"
)

// What net/http logs itself goes to slog's default logger: in the
// daemons, a JSON line at warn, not plain text on the standard log.
func TestHTTPServerErrorLogIsTheDefaultLogger(t *testing.T) {
	testsvc.KeepDefaultLog(t)
	logs := &testsvc.LogBuffer{}
	lg, err := daemon.NewLogger(logs, "info")
	require.NoError(t, err)
	slog.SetDefault(lg)

	srv := daemon.NewHTTPServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusNoContent)
		w.WriteHeader(http.StatusOK) // net/http complains: superfluous
	}))
	ln, err := daemon.Listen("EUTERPE_TEST_ADDR", "127.0.0.1:0")
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- daemon.ServeUntil(ctx, srv, ln, 5*time.Second) }()
	resp, err := http.Get("http://" + ln.Addr().String() + "/")
	require.NoError(t, err)
	resp.Body.Close()
	cancel()
	require.NoError(t, <-served)

	var rec map[string]any
	line := strings.TrimSpace(logs.String())
	require.NoError(t, json.Unmarshal([]byte(line), &rec), "not one JSON line: %q", line)
	require.Equal(t, "WARN", rec["level"])
	require.Contains(t, rec["msg"], "superfluous response.WriteHeader")
}
