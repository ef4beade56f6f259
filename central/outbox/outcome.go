package outbox

import (
	"errors"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/vesta-cx/euterpe/central/ssrf"
)

// Action is what a delivery attempt leads to.
type Action int

const (
	Deliver    Action = iota // 2xx: done
	Retry                    // try again after a backoff
	RetryAfter               // try again from the larger backoff bucket, or after Retry-After if later
	DeadLetter               // stop now: the receiver will not take it
)

func (a Action) String() string {
	return [...]string{"delivered", "retry", "retry_after", "dead_letter"}[a]
}

// statusRule maps a range of HTTP status codes to an action.
type statusRule struct {
	from, to int
	action   Action
	reason   string
}

// statusRules is the retry table, first match wins. 410 Gone means the
// receiver has retired the endpoint: retrying for days would only load it,
// so the event goes straight to the dead-letter (redrive brings it back).
// Redirects are never followed and count as failures.
var statusRules = []statusRule{
	{200, 299, Deliver, ""},
	{410, 410, DeadLetter, "receiver answered 410 Gone"},
	{429, 429, RetryAfter, "receiver answered 429"},
	{503, 503, RetryAfter, "receiver answered 503"},
	{300, 399, Retry, "redirect not followed"},
	{100, 599, Retry, "receiver answered"},
}

// Outcome is the classified result of one attempt.
type Outcome struct {
	Action     Action
	StatusCode int           // 0 when no response
	Wait       time.Duration // Retry-After, when the receiver sent one
	Reason     string        // short, safe to store: never a secret
}

// classify turns a response (or a transport error) into an Outcome.
func classify(code int, header http.Header, err error, now time.Time) Outcome {
	if err != nil {
		if errors.Is(err, ssrf.ErrRefused) {
			return Outcome{Action: DeadLetter, Reason: "destination refused: " + refusedReason(err)}
		}
		return Outcome{Action: Retry, Reason: transportReason(err)}
	}
	for _, r := range statusRules {
		if code < r.from || code > r.to {
			continue
		}
		o := Outcome{Action: r.action, StatusCode: code}
		if r.reason != "" {
			o.Reason = r.reason + " " + strconv.Itoa(code)
			if r.from == r.to {
				o.Reason = r.reason
			}
		}
		if r.action == RetryAfter {
			o.Wait = parseRetryAfter(header.Get("Retry-After"), now)
		}
		return o
	}
	return Outcome{Action: Retry, StatusCode: code, Reason: "unexpected status " + strconv.Itoa(code)}
}

// parseRetryAfter reads delta-seconds or an HTTP date; 0 when absent or bad.
func parseRetryAfter(v string, now time.Time) time.Duration {
	v = strings.TrimSpace(v)
	if v == "" {
		return 0
	}
	if n, err := strconv.ParseInt(v, 10, 64); err == nil {
		if n <= 0 {
			return 0
		}
		if n > 1<<31 {
			n = 1 << 31
		}
		return time.Duration(n) * time.Second
	}
	if t, err := http.ParseTime(v); err == nil && t.After(now) {
		return t.Sub(now)
	}
	return 0
}

func refusedReason(err error) string {
	var re *ssrf.RefusedError
	if errors.As(err, &re) {
		return re.Host + " (" + re.Reason + ")"
	}
	return "private address"
}

// transportReason names a transport failure without the request URL (which
// may carry a token in its query).
func transportReason(err error) string {
	var ne interface{ Timeout() bool }
	if errors.As(err, &ne) && ne.Timeout() {
		return "timeout"
	}
	msg := err.Error()
	switch {
	case strings.Contains(msg, "connection refused"):
		return "connection refused"
	case strings.Contains(msg, "no such host"):
		return "no such host"
	case strings.Contains(msg, "connection reset"):
		return "connection reset"
	case strings.Contains(msg, "EOF"):
		return "connection closed"
	case strings.Contains(msg, "certificate"), strings.Contains(msg, "tls:"):
		return "TLS error"
	}
	return "transport error"
}
