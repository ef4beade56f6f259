package ship

import (
	"encoding/json"
	"net/http"
	"strconv"
	"time"
)

// action is what the sender does after an answer from central.
type action int

const (
	actAccepted   action = iota // delete the batch's rows
	actQuarantine               // keep the batch aside, never resend it
	actRetryAfter               // wait as central says, then resend
	actClockSkew                // correct the signing clock, resend at once
	actAuth                     // log once, keep spooling, retry slowly
	actBackoff                  // exponential backoff with full jitter
)

func (a action) String() string {
	return [...]string{"accepted", "quarantined", "retry_after", "clock_skew", "refused", "backoff"}[a]
}

// outcomes maps central's answers to actions; the first row matching the
// status (and the error code, when the row names one) wins. Anything not
// listed — network errors, 5xx, an unexpected 404 behind a proxy — backs off.
var outcomes = []struct {
	status int
	code   string
	act    action
}{
	{http.StatusBadRequest, "", actQuarantine},
	{http.StatusRequestEntityTooLarge, "", actQuarantine},
	{http.StatusTooManyRequests, "", actRetryAfter},
	{http.StatusServiceUnavailable, "", actRetryAfter},
	{http.StatusUnauthorized, "clock_skew", actClockSkew},
	{http.StatusUnauthorized, "", actAuth},
	{http.StatusForbidden, "", actAuth},
}

func classify(status int, code string) action {
	if status >= 200 && status < 300 {
		return actAccepted
	}
	for _, o := range outcomes {
		if o.status == status && (o.code == "" || o.code == code) {
			return o.act
		}
	}
	return actBackoff
}

// errorCode reads central's {"error":{"code":…}} body; "" when absent.
func errorCode(body []byte) string {
	var e struct {
		Error struct {
			Code string `json:"code"`
		} `json:"error"`
	}
	_ = json.Unmarshal(body, &e)
	return e.Error.Code
}

// maxRetryAfter bounds a Retry-After, so a misconfigured proxy answering
// "come back tomorrow" does not stall a week of events.
const maxRetryAfter = time.Hour

// retryAfter parses Retry-After (seconds or an HTTP date, relative to
// central's own Date when it sent one); ok is false when absent or bad.
func retryAfter(h http.Header, now time.Time) (time.Duration, bool) {
	v := h.Get("Retry-After")
	if v == "" {
		return 0, false
	}
	var d time.Duration
	if n, err := strconv.Atoi(v); err == nil && n >= 0 {
		d = time.Duration(n) * time.Second
	} else if t, err := http.ParseTime(v); err == nil {
		if ct, err := http.ParseTime(h.Get("Date")); err == nil {
			now = ct
		}
		d = t.Sub(now)
	} else {
		return 0, false
	}
	if d < 0 {
		d = 0
	}
	if d > maxRetryAfter {
		d = maxRetryAfter
	}
	return d, true
}
