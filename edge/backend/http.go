package backend

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"time"
	"unicode/utf8"
)

// HTTP POSTs the payload JSON to URL and takes the JSON response body as the
// result. The job id and task travel in X-Euterpe-Job-Id and X-Euterpe-Task.
type HTTP struct {
	URL     string
	Timeout time.Duration
	Client  *http.Client
}

// Run posts the payload.
func (h *HTTP) Run(ctx context.Context, req Request, _ Delta) (json.RawMessage, error) {
	if h.Timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, h.Timeout)
		defer cancel()
	}
	hr, err := http.NewRequestWithContext(ctx, http.MethodPost, h.URL, bytes.NewReader(req.Payload))
	if err != nil {
		return nil, Errorf(CodeBackendUnreachable, 0, "build request: %v", err)
	}
	hr.Header.Set("Content-Type", "application/json")
	hr.Header.Set("Accept", "application/json")
	hr.Header.Set("X-Euterpe-Job-Id", req.JobID)
	hr.Header.Set("X-Euterpe-Task", req.Task)
	resp, err := do(ctx, h.Client, hr, "http backend")
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	// One byte past the bound tells a result that is too large from one
	// that fits: cut at the bound, it would be judged as something else
	// (not JSON, or JSON followed by what no longer shows).
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxBody+1))
	if err != nil {
		if ctx.Err() != nil {
			return nil, ctxErr(ctx, "http backend")
		}
		return nil, Errorf(CodeBackendUnreachable, resp.StatusCode, "http backend: read response: %v", err)
	}
	if len(body) > maxBody {
		return nil, Errorf(CodeInvalidResult, resp.StatusCode, "http backend: result larger than %d bytes", maxBody)
	}
	return jsonResult(body, resp.StatusCode, "http backend", credentials(hr)...)
}

// jsonResult checks that a backend answered with one JSON value; an empty
// answer is the empty object. The start of an answer that is not JSON is
// quoted in the error, with secrets (what the request carried) redacted.
func jsonResult(b []byte, status int, what string, secrets ...string) (json.RawMessage, error) {
	b = bytes.TrimSpace(b)
	if len(b) == 0 {
		return json.RawMessage(`{}`), nil
	}
	if !json.Valid(b) {
		return nil, Errorf(CodeInvalidResult, status, "%s: result is not JSON: %s", what, describe(b, secrets...))
	}
	return validUTF8(b), nil
}

// validUTF8 makes a JSON text UTF-8. JSON lets invalid UTF-8 through inside
// strings (a program printing Latin-1, a server's usage object), and so
// does encoding/json in a json.RawMessage it passes on; clients of GET and
// SSE are promised JSON, which is UTF-8, so the bad bytes become U+FFFD,
// as encoding/json decodes them. They can only sit inside strings, so the
// text stays JSON.
func validUTF8(b []byte) json.RawMessage {
	if !utf8.Valid(b) {
		b = bytes.ToValidUTF8(b, []byte("\uFFFD"))
	}
	return json.RawMessage(b)
}

// marshalResult encodes a result whose json.RawMessage fields come from a
// backend's answer as they were sent, with validUTF8.
func marshalResult(v any) (json.RawMessage, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	return validUTF8(b), nil
}
