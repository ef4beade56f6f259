package daemon

import (
	"errors"
	"fmt"
	"log/slog"
	"net/http"

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

// NewEcho returns an echo instance with the banner off and the error handler
// that renders every error as an APIError. Unknown errors become a 500 whose
// message says nothing about internals; the detail goes to the log.
func NewEcho(log *slog.Logger) *echo.Echo {
	e := echo.New()
	e.HideBanner = true
	e.HidePort = true
	// c.RealIP is the peer the connection came from. Without an extractor
	// echo takes the first X-Forwarded-For or X-Real-IP entry, which any
	// client can write: an audit line would blame whoever it named.
	e.IPExtractor = echo.ExtractIPDirect()
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
		default:
			log.Error("request failed", "method", c.Request().Method, "path", c.Path(), "err", err)
			ae = &APIError{Status: http.StatusInternalServerError, Code: "internal", Message: "internal error"}
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
