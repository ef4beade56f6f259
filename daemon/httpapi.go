package daemon

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"runtime/debug"

	"github.com/labstack/echo/v4"
)

// APIError is the one error shape every HTTP endpoint returns:
// {"error":{"code":"...","message":"..."}} with Status as the HTTP status.
type APIError struct {
	Status  int    `json:"-"`
	Code    string `json:"code"`
	Message string `json:"message"`
	// RetryAfter, when positive, is sent as a Retry-After header (seconds).
	RetryAfter int `json:"-"`
}

func (e *APIError) Error() string { return fmt.Sprintf("%d %s: %s", e.Status, e.Code, e.Message) }

// Errorf builds an APIError with a message capped at MaxMessage.
func Errorf(status int, code, format string, args ...any) *APIError {
	return &APIError{Status: status, Code: code, Message: CapMessage(fmt.Sprintf(format, args...))}
}

// EchoOption adjusts what NewEcho builds.
type EchoOption func(*echoOptions)

type echoOptions struct {
	outage func(error) string
}

// StatusClientClosedRequest is the status logged for a request whose
// client went away before the answer (nginx's 499).
const StatusClientClosedRequest = 499

// OutageRetryAfter is the Retry-After, in seconds, of a 503 for a store
// that could not be reached.
const OutageRetryAfter = 5

// WithOutage has an error that classify names a reason for (a database
// that cannot be reached, is locked or is shutting down) answer 503
// "unavailable" with Retry-After, not 500: the request may well succeed in
// a moment, and a client should retry it rather than treat it as a bug.
func WithOutage(classify func(error) string) EchoOption {
	return func(o *echoOptions) { o.outage = classify }
}

// NewEcho returns an echo instance with the banner off and the error handler
// that renders every error as an APIError. Unknown errors become a 500 whose
// message says nothing about internals; the detail goes to the log. A
// handler that panics is answered the same way (see recoverPanics).
func NewEcho(log *slog.Logger, opts ...EchoOption) *echo.Echo {
	var o echoOptions
	for _, opt := range opts {
		opt(&o)
	}
	e := echo.New()
	e.HideBanner = true
	e.HidePort = true
	// c.RealIP is the peer the connection came from. Without an extractor
	// echo takes the first X-Forwarded-For or X-Real-IP entry, which any
	// client can write: an audit line would blame whoever it named.
	e.IPExtractor = echo.ExtractIPDirect()
	e.Use(recoverPanics(log))
	e.HTTPErrorHandler = func(err error, c echo.Context) {
		if c.Response().Committed {
			return
		}
		var ae *APIError
		var he *echo.HTTPError
		switch {
		case errors.As(err, &ae):
		case errors.As(err, &he):
			ae = &APIError{Status: he.Code, Code: httpCode(he.Code), Message: CapMessage(fmt.Sprint(he.Message))}
		case errors.Is(err, context.Canceled) && c.Request().Context().Err() != nil:
			// The client hung up and the handler stopped on its
			// cancelled context: nothing went wrong here, and nobody
			// reads the answer. 499 is what proxies log for it.
			log.Debug("request abandoned by the client", "method", c.Request().Method, "path", c.Path())
			ae = &APIError{Status: StatusClientClosedRequest, Code: "client_closed_request", Message: "the client closed the request"}
		default:
			ae = o.internal(log, c, err)
		}
		if ae.RetryAfter > 0 {
			c.Response().Header().Set("Retry-After", fmt.Sprint(ae.RetryAfter))
		}
		if c.Request().Method == http.MethodHead {
			_ = c.NoContent(ae.Status)
			return
		}
		_ = c.JSON(ae.Status, map[string]*APIError{"error": ae})
	}
	return e
}

// recoverPanics turns a handler's panic into a logged 500. Left to
// net/http, the client would get no answer at all (the connection is
// dropped) and the panic and its stack would go to the standard log as
// plain text, past the JSON log's redaction. http.ErrAbortHandler is
// passed on: it is how a handler asks net/http to drop the connection. So
// is a panic after the response was committed (a stream, a body partly
// sent), once logged: the error handler could no longer answer, and the
// response would end cleanly, a cut-off body passing for a whole one.
func recoverPanics(log *slog.Logger) echo.MiddlewareFunc {
	return func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c echo.Context) (err error) {
			defer func() {
				r := recover()
				if r == nil {
					return
				}
				if r == http.ErrAbortHandler {
					panic(r)
				}
				log.Error("request handler panicked", "method", c.Request().Method, "path", c.Path(),
					"panic", CapMessage(fmt.Sprint(r)), "stack", string(debug.Stack()))
				if c.Response().Committed {
					panic(http.ErrAbortHandler)
				}
				err = &APIError{Status: http.StatusInternalServerError, Code: "internal", Message: "internal error"}
			}()
			return next(c)
		}
	}
}

// internal answers an error no handler turned into an APIError: 503 when
// it is an outage WithOutage recognises, else 500. Either way the detail
// goes to the log only.
func (o echoOptions) internal(log *slog.Logger, c echo.Context, err error) *APIError {
	if o.outage != nil {
		if reason := o.outage(err); reason != "" {
			log.Warn("request failed: a store is unavailable", "method", c.Request().Method, "path", c.Path(),
				"reason", reason, "err", err)
			return &APIError{Status: http.StatusServiceUnavailable, Code: "unavailable",
				Message: "a store this request needs cannot be reached (" + reason + "); retry later", RetryAfter: OutageRetryAfter}
		}
	}
	log.Error("request failed", "method", c.Request().Method, "path", c.Path(), "err", err)
	return &APIError{Status: http.StatusInternalServerError, Code: "internal", Message: "internal error"}
}

func httpCode(status int) string {
	switch status {
	case http.StatusNotFound:
		return "not_found"
	case http.StatusMethodNotAllowed:
		return "method_not_allowed"
	case http.StatusRequestEntityTooLarge:
		return "body_too_large"
	case http.StatusUnauthorized:
		return "unauthorized"
	case http.StatusForbidden:
		return "forbidden"
	case http.StatusBadRequest:
		return "bad_request"
	case http.StatusTooManyRequests:
		return "too_many_requests"
	case http.StatusServiceUnavailable:
		return "unavailable"
	default:
		return "error"
	}
}
