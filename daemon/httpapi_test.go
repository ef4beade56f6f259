package daemon

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
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
		status     int
		logged     bool
	}{
		{"client gone", true, StatusClientClosedRequest, false},
		{"client still there", false, 500, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var logs strings.Builder
			e := NewEcho(slog.New(slog.NewTextHandler(&logs, nil)))
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
			assert.Equal(t, tc.logged, strings.Contains(logs.String(), "request failed"), logs.String())
		})
	}
}
