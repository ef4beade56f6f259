package pipeline

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"time"

	"github.com/vesta-cx/euterpe/daemon"
)

// HTTP is a job type served by an HTTP endpoint: the JobMessage POSTed as
// JSON, the answer in the response body.
type HTTP struct {
	URL     string
	Timeout time.Duration
	Client  *http.Client
}

// HTTPNoAnswer is what a status other than 2xx means when the body holds
// no contract error answer. The statuses that say "not now" — a server
// error (a proxy's 502 page as much as the stage's own 503), a request
// timeout, too many requests — are an unavailable stage, retried; any
// other (404, 400, 401, …) would be answered the same on every try, so
// it is a refused answer, final.
var HTTPNoAnswer = []struct {
	From, To int // statuses, inclusive
	Code     string
}{
	{http.StatusRequestTimeout, http.StatusRequestTimeout, CodeStageUnavailable},
	{http.StatusTooManyRequests, http.StatusTooManyRequests, CodeStageUnavailable},
	{500, 599, CodeStageUnavailable},
}

// httpNoAnswerCode looks status up in HTTPNoAnswer; a status it does not
// list is INVALID_ANSWER.
func httpNoAnswerCode(status int) string {
	for _, r := range HTTPNoAnswer {
		if status >= r.From && status <= r.To {
			return r.Code
		}
	}
	return CodeInvalidAnswer
}

// Run posts the message once. The status is judged first: only a 2xx
// answer must be a contract answer of at most MaxAnswerBytes; another
// status stands for itself unless its body is a contract error answer.
func (h HTTP) Run(ctx context.Context, m JobMessage) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, h.Timeout)
	defer cancel()
	where := stageURL(h.URL)
	in, _ := json.Marshal(m)
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, h.URL, bytes.NewReader(in))
	if err != nil {
		return "", Fail(CodeStageUnavailable, fmt.Sprintf("http %s: %v", where, withoutURL(err)))
	}
	req.Header.Set("Content-Type", "application/json")
	c := h.Client
	if c == nil {
		c = http.DefaultClient
	}
	resp, err := c.Do(req)
	if err != nil {
		if ctx.Err() != nil && context.Cause(ctx) != context.DeadlineExceeded {
			return "", ctx.Err()
		}
		return "", Fail(CodeStageUnavailable, fmt.Sprintf("http %s: %v", where, withoutURL(err)))
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, MaxAnswerBytes+1))
	if err != nil {
		return "", Fail(CodeStageUnavailable, fmt.Sprintf("http %s: status %d: reading the answer: %v", where, resp.StatusCode, withoutURL(err)))
	}
	st := resp.StatusCode
	if st >= 200 && st < 300 {
		if len(body) > MaxAnswerBytes {
			return "", Fail(CodeInvalidAnswer, fmt.Sprintf("refused answer: more than %d bytes (http %s: status %d)", MaxAnswerBytes, where, st))
		}
		ref, perr := parseAnswer(body)
		var je *JobError
		if errors.As(perr, &je) && je.Code == CodeInvalidAnswer {
			return "", Fail(CodeInvalidAnswer, fmt.Sprintf("%s (http %s: status %d)", je.Message, where, st))
		}
		return ref, perr
	}
	// A contract error answer stands whatever the status.
	if len(body) <= MaxAnswerBytes {
		if _, perr := parseAnswer(body); perr != nil && ErrorCode(perr) != CodeInvalidAnswer {
			return "", perr
		}
	}
	code := httpNoAnswerCode(st)
	what := fmt.Sprintf("http %s: status %d without a contract error answer", where, st)
	if code == CodeInvalidAnswer {
		what = "refused answer: " + what
	}
	return "", Fail(code, what)
}

// stageURL is what a message says of an HTTP stage's URL: its scheme, host
// and path, with a token-like path segment hidden. The userinfo and the
// query, where a function key (code=…), a signature or a token often
// rides, never reach a stored or logged message.
func stageURL(raw string) string {
	if s := daemon.ShownURL(raw); s != "" {
		return s
	}
	return "(unparsable URL)"
}

// withoutURL drops the *url.Error wrapping net/http puts around its
// errors: it quotes the whole URL, query included.
func withoutURL(err error) error {
	var ue *url.Error
	if errors.As(err, &ue) {
		return ue.Err
	}
	return err
}
