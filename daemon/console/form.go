package console

import (
	"errors"
	"mime"
	"net/http"

	"github.com/labstack/echo/v4"
	"github.com/vesta-cx/euterpe/daemon"
)

// MaxForm is the largest body a console form may post: its fields are a
// token, ids and a path, never a file.
const MaxForm = 64 << 10

// FormBody reads the form of a state-changing request, up to limit bytes,
// before anything else handles it — the CSRF check included, which reads
// the form and would otherwise parse whatever arrived: a multipart upload
// keeps 32 MiB in memory and spools the rest to disk, from a client that
// needs no session for the sign-in route. Only url-encoded forms (and
// bodiless requests, such as a fetch carrying X-CSRF-Token) are accepted:
// 415 for any other body, 413 past the limit.
func FormBody(limit int64) echo.MiddlewareFunc {
	return func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c echo.Context) error {
			r := c.Request()
			switch r.Method {
			case http.MethodGet, http.MethodHead, http.MethodOptions:
				return next(c)
			}
			if r.ContentLength != 0 {
				mt, _, err := mime.ParseMediaType(r.Header.Get(echo.HeaderContentType))
				if err != nil || mt != echo.MIMEApplicationForm {
					return daemon.Errorf(http.StatusUnsupportedMediaType, "unsupported_media_type",
						"the console takes application/x-www-form-urlencoded forms only")
				}
			}
			r.Body = http.MaxBytesReader(c.Response(), r.Body, limit)
			if err := r.ParseForm(); err != nil {
				if tooBig := (*http.MaxBytesError)(nil); errors.As(err, &tooBig) {
					return daemon.Errorf(http.StatusRequestEntityTooLarge, "body_too_large",
						"a console form is at most %d bytes", limit)
				}
				return daemon.Errorf(http.StatusBadRequest, "bad_request", "the form cannot be read: %v", err)
			}
			return next(c)
		}
	}
}
