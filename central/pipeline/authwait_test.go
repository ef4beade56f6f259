package pipeline

import (
	"context"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/labstack/echo/v4"
	"github.com/vesta-cx/euterpe/daemon"
	"github.com/vesta-cx/euterpe/daemon/lease"
)

// A client that leaves while its operator-token lookup waits out a
// database outage stops the retries at once: no waiting out the back-off
// for nobody, and no "database unreachable" alert for a request nobody
// is waiting on.
func TestAuthRetriesStopWhenTheClientLeaves(t *testing.T) {
	var logs strings.Builder
	log := slog.New(slog.NewTextHandler(&logs, nil))
	a := &API{Log: log, Attempts: 5, Backoff: lease.Backoff{Base: 2 * time.Second, Cap: 2 * time.Second}, Budget: time.Minute}
	down := func(echo.HandlerFunc) echo.HandlerFunc {
		return func(echo.Context) error {
			return daemon.Errorf(http.StatusServiceUnavailable, "unavailable", "the operator store cannot be reached")
		}
	}
	e := daemon.NewEcho(log)
	a.Mount(e, down)
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(100*time.Millisecond, cancel)
	start := time.Now()
	e.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest(http.MethodGet, "/v1/pipeline/dlq", nil).WithContext(ctx))
	if took := time.Since(start); took > time.Second {
		t.Errorf("the lookup went on %s after the client left", took)
	}
	if strings.Contains(logs.String(), "level=ERROR") {
		t.Errorf("an error logged for a request nobody waits on:\n%s", logs.String())
	}
}
