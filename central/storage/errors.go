package storage

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"regexp"
	"strings"

	"github.com/vesta-cx/euterpe/central/ssrf"
)

// Class says what the runner should do about a storage failure.
type Class int

const (
	// Final: retrying cannot help (e.g. 404, 400, a source over the limit,
	// an endpoint the outbound address policy refuses).
	Final Class = iota
	// Retryable: back off with jitter and try again (network errors, 423,
	// 500, 502, 503, 504).
	Retryable
	// Throttled: 429, retry from the larger backoff bucket.
	Throttled
	// Auth: 401 or 403, refresh the job's credentials first.
	Auth
)

func (c Class) String() string {
	return [...]string{"final", "retryable", "throttled", "auth"}[c]
}

// statusClass is the retry table of contract §5 for storage responses.
var statusClass = map[int]Class{
	http.StatusLocked:              Retryable,
	http.StatusInternalServerError: Retryable,
	http.StatusBadGateway:          Retryable,
	http.StatusServiceUnavailable:  Retryable,
	http.StatusGatewayTimeout:      Retryable,
	http.StatusTooManyRequests:     Throttled,
	http.StatusUnauthorized:        Auth,
	http.StatusForbidden:           Auth,
}

// codeClass classifies by S3 error code, which wins over the status: some
// S3-compatible servers answer an unknown access key with 404 rather than
// AWS's 403 InvalidAccessKeyId, and it is still a credentials problem.
var codeClass = map[string]Class{
	"InvalidAccessKeyId":    Auth,
	"SignatureDoesNotMatch": Auth,
	"AccessDenied":          Auth,
	"ExpiredToken":          Auth,
	"InvalidToken":          Auth,
	"TokenRefreshRequired":  Auth,
	"XAdminUserNotFound":    Auth, // versitygw: no such access key
	"SlowDown":              Throttled,
	"RequestTimeout":        Retryable,
	"InternalError":         Retryable,
	"ServiceUnavailable":    Retryable,
}

// ErrTooLarge is matched with errors.Is when a source exceeds the limit.
var ErrTooLarge = errors.New("source exceeds the maximum size")

// Error is a failed storage operation. It never holds credentials or a
// signed URL's query string.
type Error struct {
	Op     string // "fetch" or "upload"
	Target string // bucket/key or the URL without its query
	Status int    // HTTP status; 0 for a network failure
	Code   string // S3 error code when the server sent one
	Err    error
	class  Class
	// timeout: the request timed out while the caller's context was live.
	timeout bool
}

func (e *Error) Error() string {
	s := fmt.Sprintf("%s %s", e.Op, e.Target)
	if e.Status != 0 {
		s += fmt.Sprintf(": HTTP %d", e.Status)
	}
	if e.Code != "" {
		s += " " + e.Code
	}
	if e.Err != nil {
		s += ": " + e.Err.Error()
	}
	return s
}

func (e *Error) Unwrap() error { return e.Err }

// Class is what to do about the failure.
func (e *Error) Class() Class { return e.class }

// ErrorCode is the short code a job failure records.
func (e *Error) ErrorCode() string {
	switch {
	case errors.Is(e.Err, ErrTooLarge):
		return "source_too_large"
	case errors.Is(e.Err, ssrf.ErrRefused):
		return "destination_refused"
	case errors.Is(e.Err, ErrInvalidKey):
		return "invalid_key"
	case errors.Is(e.Err, ErrInvalidEndpoint):
		return "invalid_endpoint"
	case e.class == Auth:
		return "storage_auth"
	case e.Status == http.StatusNotFound && e.Op == "fetch":
		return "source_not_found"
	case sourceChanged(e.Op, e.Status):
		return "source_changed"
	case e.class == Throttled:
		return "storage_throttled"
	case e.timeout:
		return "storage_timeout"
	case e.Status == 0:
		return "storage_unreachable"
	case e.class == Retryable:
		return "storage_unavailable"
	}
	return "storage_rejected"
}

// newError classifies a failure by status; status 0 is a network error and
// retryable unless the caller's context itself ended or the address policy
// refused the endpoint (central/ssrf): the same job would be refused on
// every try, so that is final rather than a retry loop spending the job's
// attempts. A timeout of the request itself (dial, TLS handshake, response
// headers: they all match context.DeadlineExceeded) while ctx is still
// live is the server's or the network's fault, retryable like any other
// network error (contract §5). ctx must therefore be the caller's context,
// never one carrying the operation's own deadline (Copy's CopyDeadline): a
// request that outlived its own bound while the caller is live timed out,
// it was not given up.
func newError(ctx context.Context, op, target string, status int, code string, err error) *Error {
	e := &Error{Op: op, Target: target, Status: status, Code: code, Err: err}
	switch {
	case status == 0 && ctx.Err() != nil && (errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded)):
		e.class = Final
	case status == 0 && timedOut(err):
		e.class, e.timeout = Retryable, true
	case status == 0 && (errors.Is(err, ErrTooLarge) || errors.Is(err, ErrInvalidKey) || errors.Is(err, ErrInvalidEndpoint)):
		e.class = Final
	case status == 0 && errors.Is(err, ssrf.ErrRefused):
		e.class = Final
	case status == 0:
		e.class = Retryable
	case sourceChanged(op, status):
		e.class = Retryable
	default:
		cl, ok := codeClass[code]
		if !ok {
			cl = statusClass[status] // absent: Final
		}
		e.class = cl
	}
	return e
}

// sourceChanged reports a download refused because the source was replaced
// after its stat: the GET is conditioned on the ETag the stat saw, so that
// no download mixes two objects. A new try stats the new object and can
// succeed. (A copy conditioned the same way stays final: its source is an
// attempt's own staged object, which nothing else writes.)
func sourceChanged(op string, status int) bool {
	return op == "fetch" && status == http.StatusPreconditionFailed
}

// timedOut reports a request that ran out of time: a context deadline
// (net/http's response-header timeout matches it) or a net.Error timeout
// (dial, TLS handshake, read deadline).
func timedOut(err error) bool {
	if errors.Is(err, context.DeadlineExceeded) {
		return true
	}
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// ClassOf returns the class of err if it is (or wraps) an *Error.
func ClassOf(err error) (Class, bool) {
	var e *Error
	if errors.As(err, &e) {
		return e.class, true
	}
	return Final, false
}

// signatureParam matches a SigV4 or SigV2 signature as a header or a query
// quotes it (Signature=…, X-Amz-Signature=…): whoever holds one can replay
// the request it signs until it expires.
var signatureParam = regexp.MustCompile(`(?i)(signature=)[0-9a-z+/=%]+`)

// hideCredentials removes from msg, a storage server's error message, the
// credentials a request was signed with and any signature. minio-go takes
// the body of an error answer that is not S3's XML (a proxy's page, one
// echoing the request) for the message, cut at 1024 bytes: the session
// token travels in a header and may come back whole, or cut at the end.
func hideCredentials(msg string, creds Credentials) string {
	msg = signatureParam.ReplaceAllString(msg, "${1}[REDACTED]")
	var secrets []string
	for _, s := range []string{creds.SecretAccessKey, creds.SessionToken} {
		if len(s) >= minSecret {
			secrets = append(secrets, s)
			if q := url.QueryEscape(s); q != s {
				secrets = append(secrets, q)
			}
		}
	}
	for _, s := range secrets {
		msg = strings.ReplaceAll(msg, s, "[REDACTED]")
	}
	// A secret the cut went through leaves its start at the end.
	body, cut := strings.CutSuffix(msg, "...")
	for _, s := range secrets {
		for n := len(s) - 1; n >= minSecret; n-- {
			if strings.HasSuffix(body, s[:n]) {
				body = body[:len(body)-n] + "[REDACTED]"
				break
			}
		}
	}
	if cut {
		body += "..."
	}
	return body
}

// minSecret is the shortest credential hidden: a shorter one is no
// secret, and would blank the same letters wherever the message has them.
const minSecret = 4
