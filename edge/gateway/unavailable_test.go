package gateway_test

import (
	"context"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"
	"github.com/vesta-cx/euterpe/daemon"
	"github.com/vesta-cx/euterpe/edge/gateway"
	"github.com/vesta-cx/euterpe/edge/jobs"
)

// A gateway whose Redis cannot be reached (here: nothing listens on its
// port, as while Redis restarts) answers 503 redis_unavailable with
// Retry-After on every route that reads or writes a job, never 500, so a
// client retries with its Idempotency-Key.
func TestRedisDownAnswers503(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := l.Addr().String()
	require.NoError(t, l.Close())
	opt := &redis.Options{Addr: addr, MaxRetries: -1, DialTimeout: time.Second}
	rdb := redis.NewClient(opt)
	t.Cleanup(func() { _ = rdb.Close() })
	set := testSettings()
	set.RetryAfter = 2
	gw := gateway.New(slog.New(slog.NewTextHandler(io.Discard, nil)), set, jobs.NewStore(rdb), opt)
	e := daemon.NewEcho(slog.New(slog.NewTextHandler(io.Discard, nil)))
	gw.Mount(e)
	ln, err := daemon.Listen("EUTERPE_TEST_ADDR", "127.0.0.1:0")
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = daemon.ServeUntil(ctx, daemon.NewHTTPServer(e), ln, 5*time.Second) }()
	t.Cleanup(func() { cancel(); <-done })
	base := "http://" + ln.Addr().String()
	const id = "0b6a4c1e-8a57-4f43-9d5e-7b1f1f3f0c11"
	for _, tc := range []struct{ method, path, body string }{
		{http.MethodPost, "/v1/jobs", `{"task":"tool","payload":{}}`},
		{http.MethodGet, "/v1/jobs/" + id, ""},
		{http.MethodPost, "/v1/jobs/" + id + "/cancel", ""},
		{http.MethodGet, "/v1/jobs/" + id + "/events", ""},
	} {
		t.Run(tc.method+" "+tc.path, func(t *testing.T) {
			req, err := http.NewRequest(tc.method, base+tc.path, strings.NewReader(tc.body))
			require.NoError(t, err)
			req.Header.Set("Content-Type", "application/json")
			resp, err := http.DefaultClient.Do(req)
			require.NoError(t, err)
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			require.Equal(t, http.StatusServiceUnavailable, resp.StatusCode, "%s", b)
			require.Contains(t, string(b), `"redis_unavailable"`)
			require.Equal(t, "2", resp.Header.Get("Retry-After"))
		})
	}
}
