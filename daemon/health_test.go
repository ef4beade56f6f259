package daemon

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/labstack/echo/v4"
	"github.com/stretchr/testify/require"
)

func TestReadyNamesFailingDependency(t *testing.T) {
	var down atomic.Bool
	e := NewEcho(slog.New(slog.NewTextHandler(io.Discard, nil)))
	MountHealth(e,
		Check{Name: "redis", Probe: func(context.Context) error {
			if down.Load() {
				return errors.New("connection refused")
			}
			return nil
		}},
		Check{Name: "repo", Probe: func(context.Context) error { return nil }},
	)
	get := func(path string) (int, map[string]any) {
		rec := httptest.NewRecorder()
		e.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, path, nil))
		var body map[string]any
		require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &body))
		return rec.Code, body
	}
	code, body := get("/ready")
	require.Equal(t, http.StatusOK, code)
	require.Equal(t, "ok", body["redis"])

	down.Store(true)
	code, body = get("/ready")
	require.Equal(t, http.StatusServiceUnavailable, code)
	require.Equal(t, "error(connection refused)", body["redis"])
	require.Equal(t, "ok", body["repo"])
	require.NotEmpty(t, body["timestamp"])

	code, _ = get("/healthz")
	require.Equal(t, http.StatusOK, code, "alive even when not ready")
}

func TestErrorHandlerShape(t *testing.T) {
	e := NewEcho(slog.New(slog.NewTextHandler(io.Discard, nil)))
	e.GET("/busy", func(c echo.Context) error {
		return &APIError{Status: http.StatusTooManyRequests, Code: "backpressure", Message: "slow down", RetryAfter: 3}
	})
	e.GET("/boom", func(c echo.Context) error { return errors.New("db password=hunter2 exploded") })
	rec := httptest.NewRecorder()
	e.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/busy", nil))
	require.Equal(t, http.StatusTooManyRequests, rec.Code)
	require.Equal(t, "3", rec.Header().Get("Retry-After"))
	require.JSONEq(t, `{"error":{"code":"backpressure","message":"slow down"}}`, rec.Body.String())

	rec = httptest.NewRecorder()
	e.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/boom", nil))
	require.Equal(t, http.StatusInternalServerError, rec.Code)
	require.NotContains(t, rec.Body.String(), "hunter2")

	rec = httptest.NewRecorder()
	e.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/nowhere", nil))
	require.Equal(t, http.StatusNotFound, rec.Code)
	require.Contains(t, rec.Body.String(), `"code":"not_found"`)
}

func TestWatchdogOnlyWhileHealthy(t *testing.T) {
	var healthy atomic.Bool
	var checks, pings atomic.Int32
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		WatchdogLoop(ctx, 10*time.Millisecond, func(context.Context) error {
			if healthy.Load() {
				return nil
			}
			checks.Add(1)
			return errors.New("redis down")
		}, func() { pings.Add(1) }, slog.New(slog.NewTextHandler(io.Discard, nil)))
	}()
	// Failed checks are counted rather than waited for: a loop starved of
	// its ticks would show no ping without having been gated.
	require.Eventually(t, func() bool { return checks.Load() >= 3 }, 10*time.Second, 5*time.Millisecond)
	require.Zero(t, pings.Load(), "no WATCHDOG=1 while unhealthy")
	healthy.Store(true)
	require.Eventually(t, func() bool { return pings.Load() >= 2 }, 10*time.Second, 5*time.Millisecond)
	cancel()
	<-done
}

func TestServeUntilGraceful(t *testing.T) {
	ln, err := Listen("EUTERPE_TEST_ADDR", "127.0.0.1:0")
	require.NoError(t, err)
	started := make(chan struct{})
	srv := NewHTTPServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		close(started)
		time.Sleep(100 * time.Millisecond)
		w.WriteHeader(http.StatusNoContent)
	}))
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() { errc <- ServeUntil(ctx, srv, ln, 2*time.Second) }()
	respc := make(chan int, 1)
	go func() {
		resp, err := http.Get("http://" + ln.Addr().String())
		if err != nil {
			respc <- 0
			return
		}
		resp.Body.Close()
		respc <- resp.StatusCode
	}()
	<-started
	cancel()
	require.Equal(t, http.StatusNoContent, <-respc, "in-flight request finishes during grace")
	require.NoError(t, <-errc)
}

// A request still in flight when the grace runs out is cut, and the stop
// says so rather than reporting a clean one.
func TestServeUntilReportsCutRequests(t *testing.T) {
	ln, err := Listen("EUTERPE_TEST_ADDR", "127.0.0.1:0")
	require.NoError(t, err)
	started := make(chan struct{})
	release := make(chan struct{})
	defer close(release)
	srv := NewHTTPServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		close(started)
		<-release
	}))
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() { errc <- ServeUntil(ctx, srv, ln, 100*time.Millisecond) }()
	respc := make(chan error, 1)
	go func() {
		resp, err := http.Get("http://" + ln.Addr().String())
		if err == nil {
			resp.Body.Close()
		}
		respc <- err
	}()
	<-started
	cancel()
	require.ErrorIs(t, <-errc, ErrRequestsCut)
	require.Error(t, <-respc, "the client sees its connection closed")
}

type reasoned struct{ r string }

func (e reasoned) Error() string {
	return "dial tcp: lookup db.invalid: no such host (password=hunter2)"
}
func (e reasoned) ReadyReason() string { return e.r }

// An error that classifies itself reports its reason, not its text.
func TestReadyReasonFromError(t *testing.T) {
	rep := Probe(context.Background(), time.Second,
		Check{Name: "queue", Probe: func(context.Context) error { return fmt.Errorf("wrapped: %w", reasoned{"dns_error"}) }})
	require.False(t, rep.Ready)
	require.Equal(t, "error(dns_error)", rep.Checks["queue"])
}

// An address that cannot be bound is reported with the setting it came
// from, so the operator knows which line to change.
func TestListenFailureNamesTheSetting(t *testing.T) {
	taken, err := Listen("EUTERPE_TEST_ADDR", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	_, err = Listen("EUTERPE_EDGE_ADDR", taken.Addr().String())
	if err == nil || !strings.HasPrefix(err.Error(), "EUTERPE_EDGE_ADDR: listen "+taken.Addr().String()) {
		t.Fatalf("err = %v, want it to start with the setting and the address", err)
	}
}

// /ready answers without authentication, so a failure it shows names no
// account or database: network failures become short reasons (no address
// either), a refused password auth_failed, and other text loses the user
// info of its URLs and the user= and database= a driver quotes.
func TestReadyReasonHidesAccount(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	closed := ln.Addr().String()
	require.NoError(t, ln.Close())
	_, refused := net.Dial("tcp", closed)
	require.Error(t, refused)
	pgx := func(detail error) error {
		return fmt.Errorf("failed to connect to `user=euterpe_acct database=euterpe_db`: %s (db.lan): %w", closed, detail)
	}
	for _, tc := range []struct {
		name string
		err  error
		want string
	}{
		{"refused", pgx(refused), "connection_refused"},
		{"dns", fmt.Errorf("dial: %w", &net.DNSError{Err: "no such host", Name: "db.lan", IsNotFound: true}), "dns_error"},
		{"net timeout", pgx(&net.OpError{Op: "dial", Net: "tcp", Err: timeoutErr{}}), "timeout"},
		{"password refused", pgx(errors.New(`failed SASL auth: FATAL: password authentication failed for user "euterpe_acct" (SQLSTATE 28P01)`)), "auth_failed"},
		{"other, pgx", pgx(errors.New("tls: handshake failure")), ""},
		{"other, URL", errors.New("open postgres://euterpe_acct:pw@db.lan/x?sslmode=require: bad"), ""},
		{"other, conninfo", errors.New("connect host=db.lan user=euterpe_acct dbname=euterpe_db: bad"), ""},
		{"plain text", errors.New("connection refused"), "connection refused"},
		{"unreachable", fmt.Errorf("dial tcp 10.0.0.5:5432: %w", errors.New("connect: no route to host")), "dial tcp [REDACTED]: connect: no route to host"},
		{"unreachable, IPv6", errors.New("dial tcp [fd00::5]:5432: connect: no route to host"), "dial tcp [REDACTED]: connect: no route to host"},
		{"server error", pgx(errors.New("server error: FATAL: the database system is starting up (SQLSTATE 57P03)")),
			"failed to connect to `user=[REDACTED] database=[REDACTED]`: [REDACTED]: server error: FATAL: the database system is starting up (SQLSTATE 57P03)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rep := Probe(context.Background(), time.Second, Check{Name: "database", Probe: func(context.Context) error { return tc.err }})
			got := rep.Checks["database"]
			if tc.want != "" {
				require.Equal(t, "error("+tc.want+")", got)
			}
			for _, hidden := range []string{"euterpe_acct", "euterpe_db", ":pw@", "db.lan", closed, "10.0.0.5"} {
				require.NotContains(t, got, hidden)
			}
		})
	}
}

type timeoutErr struct{}

func (timeoutErr) Error() string   { return "i/o timeout" }
func (timeoutErr) Timeout() bool   { return true }
func (timeoutErr) Temporary() bool { return true }
