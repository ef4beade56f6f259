package daemon

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	golog "log"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/labstack/echo/v4"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

var errDown = errors.New("dial tcp 127.0.0.1:5432: connect: connection refused")

// An error no handler mapped is a 500 that says nothing of internals; one
// WithOutage recognises is a 503 with Retry-After, so a client retries a
// database outage instead of reading it as a bug. Errors a handler mapped
// pass through untouched either way.
func TestErrorHandlerOutage(t *testing.T) {
	classify := func(err error) string {
		if errors.Is(err, errDown) {
			return "connection_refused"
		}
		return ""
	}
	cases := []struct {
		name       string
		opts       []EchoOption
		err        error
		status     int
		code       string
		retryAfter string
	}{
		{"no classifier", nil, fmt.Errorf("get job: %w", errDown), 500, "internal", ""},
		{"outage", []EchoOption{WithOutage(classify)}, fmt.Errorf("get job: %w", errDown), 503, "unavailable", "5"},
		{"not an outage", []EchoOption{WithOutage(classify)}, errors.New("some bug"), 500, "internal", ""},
		{"mapped by the handler", []EchoOption{WithOutage(classify)},
			fmt.Errorf("x: %w", Errorf(http.StatusConflict, "conflict", "taken: %v", errDown)), 409, "conflict", ""},
		{"echo error", []EchoOption{WithOutage(classify)}, echo.ErrNotFound, 404, "not_found", ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var logs strings.Builder
			e := NewEcho(slog.New(slog.NewTextHandler(&logs, nil)), tc.opts...)
			e.GET("/x", func(echo.Context) error { return tc.err })
			rec := httptest.NewRecorder()
			e.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/x", nil))
			require.Equal(t, tc.status, rec.Code, rec.Body.String())
			assert.Equal(t, tc.retryAfter, rec.Header().Get("Retry-After"))
			var body struct {
				Error APIError `json:"error"`
			}
			require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &body))
			assert.Equal(t, tc.code, body.Error.Code)
			if tc.status >= 500 {
				assert.NotContains(t, body.Error.Message, "5432", "the answer names no internals")
				assert.Contains(t, logs.String(), "request failed", "the detail is logged")
			}
		})
	}
	// HEAD gets the status and header, no body.
	e := NewEcho(slog.New(slog.NewTextHandler(io.Discard, nil)), WithOutage(classify))
	e.HEAD("/x", func(echo.Context) error { return errDown })
	rec := httptest.NewRecorder()
	e.ServeHTTP(rec, httptest.NewRequest(http.MethodHead, "/x", nil))
	assert.Equal(t, 503, rec.Code)
	assert.Equal(t, "5", rec.Header().Get("Retry-After"))
	assert.Zero(t, rec.Body.Len())
}

// A handler that stops because its client hung up is no server error: no
// "request failed" at error level, no 500. A cancellation of the
// handler's own making, with the client still there, is one.
func TestErrorHandlerClientGone(t *testing.T) {
	for _, tc := range []struct {
		name       string
		clientGone bool
		streams    bool // EndStreamsAtShutdown installed, as in both daemons
		status     int
		logged     bool
	}{
		{"client gone", true, false, StatusClientClosedRequest, false},
		{"client still there", false, false, 500, true},
		{"client gone, streams tracked", true, true, StatusClientClosedRequest, false},
		{"client still there, streams tracked", false, true, 500, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var logs strings.Builder
			e := NewEcho(slog.New(slog.NewTextHandler(&logs, nil)))
			if tc.streams {
				EndStreamsAtShutdown(e, NewHTTPServer(e))
			}
			e.GET("/x", func(echo.Context) error { return fmt.Errorf("begin: %w", context.Canceled) })
			req := httptest.NewRequest(http.MethodGet, "/x", nil)
			if tc.clientGone {
				ctx, cancel := context.WithCancel(req.Context())
				cancel()
				req = req.WithContext(ctx)
			}
			rec := httptest.NewRecorder()
			e.ServeHTTP(rec, req)
			assert.Equal(t, tc.status, rec.Code)
			assert.Equal(t, tc.logged, strings.Contains(logs.String(), "level=ERROR msg=\"request failed\""), logs.String())
		})
	}
}

// A handler that panics is answered 500 in the error envelope, not with a
// dropped connection, and the panic is logged once, with its stack,
// through the logger (so redacted), not by net/http on the standard log.
// http.ErrAbortHandler still drops the connection, as it asks to.
func TestHandlerPanicIsA500(t *testing.T) {
	for _, tc := range []struct {
		name  string
		value any
	}{
		{"string", "dial redis://:hunter2@10.0.0.5:6379 went wrong"},
		{"error", fmt.Errorf("dial redis://:hunter2@10.0.0.5:6379: %w", errDown)},
		{"nil pointer", nil}, // a runtime error
	} {
		t.Run(tc.name, func(t *testing.T) {
			var logs strings.Builder
			log, err := NewLogger(&logs, "info")
			require.NoError(t, err)
			e := NewEcho(log)
			e.GET("/x", func(echo.Context) error {
				if tc.value == nil {
					var ae *APIError
					return errors.New(ae.Message) // nil dereference
				}
				panic(tc.value)
			})
			srv := httptest.NewUnstartedServer(e)
			var netlog strings.Builder
			srv.Config.ErrorLog = golog.New(&netlog, "", 0)
			srv.Start()
			defer srv.Close()

			resp, err := http.Get(srv.URL + "/x")
			require.NoError(t, err, "answered, not dropped")
			defer resp.Body.Close()
			body, _ := io.ReadAll(resp.Body)
			assert.Equal(t, http.StatusInternalServerError, resp.StatusCode)
			assert.JSONEq(t, `{"error":{"code":"internal","message":"internal error"}}`, string(body))

			lines := strings.Split(strings.TrimSpace(logs.String()), "\n")
			require.Len(t, lines, 1, logs.String())
			var rec map[string]any
			require.NoError(t, json.Unmarshal([]byte(lines[0]), &rec))
			assert.Equal(t, "ERROR", rec["level"])
			assert.Equal(t, "request handler panicked", rec["msg"])
			assert.Equal(t, "/x", rec["path"])
			assert.NotEmpty(t, rec["panic"])
			assert.Contains(t, rec["stack"], "httpapi_test.go", "the stack shows where")
			assert.NotContains(t, logs.String(), "hunter2")
			assert.Empty(t, netlog.String(), "net/http logged nothing")
		})
	}
	t.Run("abort", func(t *testing.T) {
		var logs strings.Builder
		e := NewEcho(slog.New(slog.NewJSONHandler(&logs, nil)))
		e.GET("/x", func(echo.Context) error { panic(http.ErrAbortHandler) })
		srv := httptest.NewServer(e)
		defer srv.Close()
		resp, err := http.Get(srv.URL + "/x")
		if err == nil {
			resp.Body.Close()
		}
		assert.Error(t, err, "the connection is dropped")
		assert.Empty(t, logs.String())
	})
	// Half a body already sent: the client must see the cut, not a
	// response that ends cleanly and passes for whole.
	t.Run("after the response was committed", func(t *testing.T) {
		var logs strings.Builder
		e := NewEcho(slog.New(slog.NewJSONHandler(&logs, nil)))
		e.GET("/x", func(c echo.Context) error {
			c.Response().Header().Set(echo.HeaderContentType, "text/plain")
			c.Response().WriteHeader(http.StatusOK)
			_, _ = c.Response().Write([]byte("first half"))
			c.Response().Flush()
			panic("midway")
		})
		srv := httptest.NewServer(e)
		defer srv.Close()
		resp, err := http.Get(srv.URL + "/x")
		require.NoError(t, err)
		defer resp.Body.Close()
		body, err := io.ReadAll(resp.Body)
		assert.Error(t, err, "the body ends in an error, got %q", body)
		srv.Close() // the handler has returned: its log line is written
		assert.Contains(t, logs.String(), "request handler panicked")
	})
}
