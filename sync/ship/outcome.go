package ship

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/vesta-cx/euterpe/sync/wire"
)

// action is what the sender does after an answer from central.
type action int

const (
	actAccepted    action = iota // delete the batch's rows
	actQuarantine                // keep the batch aside, never resend it
	actRetryAfter                // wait as central says, then resend
	actClockSkew                 // correct the signing clock, resend at once
	actAuth                      // log once, keep spooling, retry slowly
	actBackoff                   // exponential backoff with full jitter
	actSplit                     // a refused batch of several items: resend it in halves
	actShrink                    // a body limit in front of central: send smaller bodies
	actUnsupported               // central is older than this edge's format: keep the batch, back off
)

func (a action) String() string {
	return [...]string{"accepted", "quarantined", "retry_after", "clock_skew", "refused", "backoff", "split", "shrink", "unsupported"}[a]
}

// outcomes maps central's answers to actions; the first row matching the
// status (and the error code, when the row names one) wins. Anything not
// listed — network errors, 5xx, an unexpected 404 behind a proxy — backs off.
// Quarantine is for good, so it takes central's own code: a 400 or 413
// from a proxy in front of central (its body limit, plain HTTP sent to an
// HTTPS port) says nothing about the batch and would set aside every one.
// A 413 without central's code is such a proxy's body limit: smaller
// bodies pass it, and central deduplicates by event, so the batch is split.
var outcomes = []struct {
	status int
	code   string
	act    action
}{
	{http.StatusBadRequest, wire.CodeInvalidBatch, actQuarantine},
	{http.StatusBadRequest, wire.CodeUnsupportedFormat, actUnsupported},
	{http.StatusRequestEntityTooLarge, wire.CodeTooLarge, actQuarantine},
	{http.StatusRequestEntityTooLarge, "", actShrink},
	{http.StatusTooManyRequests, "", actRetryAfter},
	{http.StatusServiceUnavailable, "", actRetryAfter},
	{http.StatusUnauthorized, "clock_skew", actClockSkew},
	{http.StatusUnauthorized, "", actAuth},
	{http.StatusForbidden, "", actAuth},
}

// timeoutAnswer reports whether status says the batch did not arrive in
// time: a 408 (central's incomplete_body, the body broke off; a proxy's
// body timeout) or a proxy's 504. They back off like any other failure,
// and the next batch is halved as after a client timeout: a link too slow
// for the batch would be cut off on it for ever.
func timeoutAnswer(status int) bool {
	return status == http.StatusRequestTimeout || status == http.StatusGatewayTimeout
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

// ErrNotBatchResult is matched when a 2xx answer to a batch is not
// central's: something else at EUTERPE_SYNC_URL (a captive portal's login
// page, a proxy's fallback) answered. The
// batch stays spooled and is sent again with backoff.
var ErrNotBatchResult = errors.New("sync: a 2xx answer that is not central's answer to the batch (is EUTERPE_SYNC_URL central, with nothing in between answering for it?)")

// checkBatchResult accepts resp only as central's answer to a batch of
// events events and gaps gaps: a wire.BatchResult in which every event is
// accounted for, new or duplicate, within maxAnswer bytes (the rest of a
// longer one was never read). Unknown fields are allowed, so a newer
// central may say more.
func checkBatchResult(resp []byte, events, gaps int) error {
	if len(resp) > maxAnswer {
		return fmt.Errorf("%w: an answer over %d bytes", ErrNotBatchResult, maxAnswer)
	}
	var res struct {
		Accepted   *int `json:"accepted"`
		Duplicates *int `json:"duplicates"`
		Gaps       *int `json:"gaps"`
	}
	if err := json.Unmarshal(resp, &res); err != nil || res.Accepted == nil || res.Duplicates == nil || res.Gaps == nil {
		return ErrNotBatchResult
	}
	if *res.Accepted < 0 || *res.Duplicates < 0 || *res.Accepted+*res.Duplicates != events || *res.Gaps < 0 || *res.Gaps > gaps {
		return fmt.Errorf("%w: it accounts for %d+%d events and %d gaps of %d and %d sent",
			ErrNotBatchResult, *res.Accepted, *res.Duplicates, *res.Gaps, events, gaps)
	}
	return nil
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
	if n, err := strconv.ParseUint(v, 10, 64); err == nil || errors.Is(err, strconv.ErrRange) {
		// Compared before multiplying: a huge number would overflow the
		// Duration into no wait at all.
		d = maxRetryAfter
		if n < uint64(maxRetryAfter/time.Second) {
			d = time.Duration(n) * time.Second
		}
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
