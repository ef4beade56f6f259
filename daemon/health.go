package daemon

import (
	"context"
	"errors"
	"net"
	"net/http"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/labstack/echo/v4"
)

// Check is one dependency /ready reports on, e.g. "redis" or "repo".
type Check struct {
	Name  string
	Probe func(ctx context.Context) error
}

// ReadyReport is the body of /ready: one key per dependency with "ok" or
// "error(reason)", plus the time of the probe. It matches the pipeline
// contract's {queue: ok|error(reason), repo: ..., timestamp} shape.
type ReadyReport struct {
	Ready     bool
	Checks    map[string]string
	Timestamp time.Time
}

// Probe runs every check concurrently with timeout and reports.
func Probe(ctx context.Context, timeout time.Duration, checks ...Check) ReadyReport {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	rep := ReadyReport{Ready: true, Checks: make(map[string]string, len(checks)), Timestamp: time.Now().UTC()}
	var mu sync.Mutex
	var wg sync.WaitGroup
	for _, c := range checks {
		wg.Add(1)
		go func() {
			defer wg.Done()
			status := "ok"
			if err := c.Probe(ctx); err != nil {
				status = "error(" + reason(ctx, err) + ")"
			}
			mu.Lock()
			defer mu.Unlock()
			rep.Checks[c.Name] = status
			if status != "ok" {
				rep.Ready = false
			}
		}()
	}
	wg.Wait()
	return rep
}

// ReadyReasoner is an error that names its /ready reason itself (e.g.
// "auth_failed", "dns_error"), so a dependency can classify its failures.
type ReadyReasoner interface{ ReadyReason() string }

// reason is what /ready shows of a failed check. The page answers without
// authentication, so it names no account: a network failure becomes the
// short reason the contract's examples use (no address either), a refused
// password "auth_failed", and other text loses the user info of its URLs
// and the user and database a driver quotes (pgx: "failed to connect to
// `user=euterpe database=euterpe`: …").
func reason(ctx context.Context, err error) string {
	if ctx.Err() != nil {
		return "timeout"
	}
	var rr ReadyReasoner
	var dns *net.DNSError
	var ne net.Error
	switch {
	case errors.As(err, &rr):
		return rr.ReadyReason()
	case errors.As(err, &dns):
		return "dns_error"
	case errors.Is(err, syscall.ECONNREFUSED):
		return "connection_refused"
	case errors.As(err, &ne) && ne.Timeout():
		return "timeout"
	case strings.Contains(err.Error(), "password authentication failed"):
		return "auth_failed"
	}
	msg := urlAuthority.ReplaceAllString(RedactURL(err.Error()), "://"+redacted)
	msg = dialAddr.ReplaceAllString(msg, redacted)
	return CapMessage(connAccount.ReplaceAllString(msg, "$1="+redacted))
}

// urlAuthority is a URL's user info, host and port; connAccount a
// key=value connection setting that names an account, its database or
// its server; dialAddr an address a driver quotes ("10.0.0.5:5432
// (db.lan): …", "dial tcp 10.0.0.5:5432: …"). A server's name and address
// map the network behind the service for anyone who can reach /ready.
var (
	urlAuthority = regexp.MustCompile(`://(?:[^/?#\s@]*@)?(?:\[[^\]\s]*\]|[^/?#\s:@\[]*)(?::\d+)?`)
	connAccount  = regexp.MustCompile(`\b(user|dbname|database|host|hostaddr|port)=[^\s\x60'",;)]+`)
	dialAddr     = regexp.MustCompile(`(?:\[[0-9A-Fa-f:.%\w]+\]|[\w.-]+):\d{1,5}( \([^()\s]*\))?`)
)

// MountHealth adds GET /healthz (the process answers) and GET /ready (200
// when every check passes, else 503 naming each failing dependency).
func MountHealth(e *echo.Echo, checks ...Check) {
	e.GET("/healthz", func(c echo.Context) error {
		return c.JSON(http.StatusOK, map[string]string{"status": "ok"})
	})
	e.GET("/ready", func(c echo.Context) error {
		rep := Probe(c.Request().Context(), 2*time.Second, checks...)
		body := make(map[string]any, len(rep.Checks)+2)
		for k, v := range rep.Checks {
			body[k] = v
		}
		body["timestamp"] = rep.Timestamp.Format(time.RFC3339Nano)
		status := http.StatusOK
		body["status"] = "ready"
		if !rep.Ready {
			status = http.StatusServiceUnavailable
			body["status"] = "not_ready"
		}
		return c.JSON(status, body)
	})
}
