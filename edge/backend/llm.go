package backend

import (
	"bufio"
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"
)

// LLM talks to an OpenAI-compatible server. chat, plan and code stream from
// /v1/chat/completions; embed calls /v1/embeddings.
type LLM struct {
	BaseURL string
	Model   string
	APIKey  string
	Timeout time.Duration
	Client  *http.Client
	// MaxText bounds the streamed text of one chat job in bytes (0 means
	// DefaultLLMMaxText); a longer answer fails with result_too_large.
	MaxText int
}

// DefaultLLMMaxText is the default cap on one chat job's streamed text.
const DefaultLLMMaxText = 1 << 20

// ChatResult is the result document of a chat, plan or code job.
type ChatResult struct {
	Text         string          `json:"text"`
	FinishReason string          `json:"finish_reason"`
	Usage        json.RawMessage `json:"usage"`
	Model        string          `json:"model"`
}

// EmbedResult is the result document of an embed job.
type EmbedResult struct {
	Embeddings []json.RawMessage `json:"embeddings"`
	Model      string            `json:"model"`
	Usage      json.RawMessage   `json:"usage"`
}

// dropped are payload fields that are ours, not the server's.
var dropped = []string{"prompt", "system", "stream", "stream_options", "_raw"}

// Run dispatches on the task: embed to embeddings, the rest to chat.
func (l *LLM) Run(ctx context.Context, req Request, delta Delta) (json.RawMessage, error) {
	if l.Timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, l.Timeout)
		defer cancel()
	}
	var p map[string]json.RawMessage
	if err := json.Unmarshal(req.Payload, &p); err != nil || p == nil {
		return nil, Errorf(CodeInvalidPayload, 0, "payload is not a JSON object")
	}
	if req.Task == "embed" {
		return l.embed(ctx, p)
	}
	return l.chat(ctx, p, delta)
}

func (l *LLM) body(p map[string]json.RawMessage) map[string]json.RawMessage {
	out := make(map[string]json.RawMessage, len(p)+3)
	for k, v := range p {
		out[k] = v
	}
	for _, k := range dropped {
		delete(out, k)
	}
	if _, ok := out["model"]; !ok && l.Model != "" {
		out["model"], _ = json.Marshal(l.Model)
	}
	return out
}

func (l *LLM) chat(ctx context.Context, p map[string]json.RawMessage, delta Delta) (json.RawMessage, error) {
	body := l.body(p)
	if _, ok := body["messages"]; !ok {
		var prompt, system string
		if err := json.Unmarshal(p["prompt"], &prompt); err != nil || prompt == "" {
			return nil, Errorf(CodeInvalidPayload, 0, "payload needs messages (array) or prompt (string)")
		}
		_ = json.Unmarshal(p["system"], &system)
		var msgs []map[string]string
		if system != "" {
			msgs = append(msgs, map[string]string{"role": "system", "content": system})
		}
		msgs = append(msgs, map[string]string{"role": "user", "content": prompt})
		body["messages"], _ = json.Marshal(msgs)
	}
	if err := oneChoice(p["n"]); err != nil {
		return nil, err
	}
	body["stream"] = json.RawMessage(`true`)
	body["stream_options"] = json.RawMessage(`{"include_usage":true}`)
	resp, err := l.post(ctx, "/v1/chat/completions", body, "text/event-stream")
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	limit := l.MaxText
	if limit <= 0 {
		limit = DefaultLLMMaxText
	}
	res, err := readChatStream(ctx, resp.Body, delta, limit, l.secrets()...)
	if err != nil {
		return nil, err
	}
	if len(res.Usage) == 0 {
		res.Usage = json.RawMessage(`null`)
	}
	return marshalResult(res)
}

// oneChoice refuses a payload asking for more than one choice ("n"): the
// stream interleaves the choices' fragments, and a job has one text to
// stream and keep. Absent or null, the server's default of one stands.
func oneChoice(n json.RawMessage) error {
	if len(n) == 0 || string(n) == "null" {
		return nil
	}
	var v float64
	if json.Unmarshal(n, &v) != nil || v != 1 {
		return Errorf(CodeInvalidPayload, 0, "n must be 1: a job streams and keeps one answer; send one job per answer wanted")
	}
	return nil
}

// chunk is one streamed chat.completion.chunk, or an error object.
type chunk struct {
	Model   string `json:"model"`
	Choices []struct {
		Delta struct {
			Content string `json:"content"`
		} `json:"delta"`
		FinishReason *string `json:"finish_reason"`
	} `json:"choices"`
	Usage json.RawMessage `json:"usage"`
	Error json.RawMessage `json:"error"`
}

// readChatStream reads SSE "data: {...}" lines until "data: [DONE]". More
// than maxText bytes of text stop the read with result_too_large; the
// fragment that crosses the limit is not handed to delta. An error event's
// message has secrets (the request's credentials) redacted: it becomes the
// job's error.
func readChatStream(ctx context.Context, r io.Reader, delta Delta, maxText int, secrets ...string) (*ChatResult, error) {
	res := &ChatResult{}
	var text strings.Builder
	done, tooLarge := false, false
	err := scanSSE(r, func(field, data string) bool {
		if field == "error" {
			// llama.cpp: `error: {"code":500,"message":…}`.
			msg := errorMessage([]byte(data))
			if msg == "" {
				msg = strings.TrimSpace(data)
			}
			res = nil
			text.Reset()
			text.WriteString(msg)
			return false
		}
		if data == "[DONE]" {
			done = true
			return false
		}
		var c chunk
		if err := json.Unmarshal([]byte(data), &c); err != nil {
			return true // keep-alives and vendor extensions are skipped
		}
		if len(c.Error) > 0 && string(c.Error) != "null" {
			res = nil
			text.Reset()
			text.WriteString(errorMessage([]byte(`{"error":` + string(c.Error) + `}`)))
			return false
		}
		if c.Model != "" {
			res.Model = c.Model
		}
		if len(c.Usage) > 0 && string(c.Usage) != "null" {
			res.Usage = c.Usage
		}
		for _, ch := range c.Choices {
			if s := ch.Delta.Content; s != "" {
				if text.Len()+len(s) > maxText {
					tooLarge = true
					return false
				}
				text.WriteString(s)
				if delta != nil {
					delta(s)
				}
			}
			if ch.FinishReason != nil && *ch.FinishReason != "" {
				res.FinishReason = *ch.FinishReason
			}
		}
		return true
	})
	if ctx.Err() != nil {
		return nil, ctxErr(ctx, "llm")
	}
	if res == nil {
		return nil, Errorf(CodeBackendError, 0, "llm stream error: %s", redactSecret(text.String(), secrets...))
	}
	if tooLarge {
		return nil, Errorf(CodeResultTooLarge, 0, "llm answer longer than %d bytes (EUTERPE_LLM_MAX_TEXT_BYTES)", maxText)
	}
	if errors.Is(err, errEventTooLarge) || errors.Is(err, bufio.ErrTooLong) {
		return nil, Errorf(CodeInvalidResult, 0, "llm stream: %v", err)
	}
	if err != nil {
		return nil, Errorf(CodeBackendUnreachable, 0, "llm stream: %v", err)
	}
	if !done && res.FinishReason == "" {
		return nil, Errorf(CodeBackendError, 0, "llm stream ended before [DONE]")
	}
	res.Text = text.String()
	return res, nil
}

func (l *LLM) embed(ctx context.Context, p map[string]json.RawMessage) (json.RawMessage, error) {
	body := l.body(p)
	if _, ok := body["input"]; !ok {
		return nil, Errorf(CodeInvalidPayload, 0, "payload needs input (string or array of strings)")
	}
	resp, err := l.post(ctx, "/v1/embeddings", body, "application/json")
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	var out struct {
		Data []struct {
			Embedding json.RawMessage `json:"embedding"`
		} `json:"data"`
		Model string          `json:"model"`
		Usage json.RawMessage `json:"usage"`
	}
	// One byte past the bound tells an answer too large to keep from a
	// broken one: cut at the bound, the JSON would end early and read as
	// a server fault, when the fix is a smaller batch.
	raw, err := io.ReadAll(io.LimitReader(resp.Body, maxBody+1))
	if err != nil {
		if ctx.Err() != nil {
			return nil, ctxErr(ctx, "llm")
		}
		return nil, Errorf(CodeBackendUnreachable, resp.StatusCode, "embeddings response: read: %v", err)
	}
	if len(raw) > maxBody {
		return nil, Errorf(CodeResultTooLarge, resp.StatusCode, "embeddings response larger than %d MiB: send fewer inputs per job", maxBody>>20)
	}
	if err := json.Unmarshal(raw, &out); err != nil {
		return nil, Errorf(CodeInvalidResult, resp.StatusCode, "embeddings response: %v", err)
	}
	res := EmbedResult{Model: out.Model, Usage: out.Usage, Embeddings: make([]json.RawMessage, 0, len(out.Data))}
	for _, d := range out.Data {
		res.Embeddings = append(res.Embeddings, d.Embedding)
	}
	if len(res.Usage) == 0 {
		res.Usage = json.RawMessage(`null`)
	}
	return marshalResult(res)
}

// post sends body and returns a 2xx response; anything else is an *Error
// (or ctx.Err() when the context ended).
func (l *LLM) post(ctx context.Context, path string, body any, accept string) (*http.Response, error) {
	b, err := json.Marshal(body)
	if err != nil {
		return nil, Errorf(CodeInvalidPayload, 0, "encode request: %v", err)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, strings.TrimRight(l.BaseURL, "/")+path, bytes.NewReader(b))
	if err != nil {
		return nil, Errorf(CodeBackendUnreachable, 0, "build request: %v", err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", accept)
	if l.APIKey != "" {
		req.Header.Set("Authorization", "Bearer "+l.APIKey)
	}
	return do(ctx, l.Client, req, "llm")
}

// maxBody bounds what is read from any backend response.
const maxBody = 16 << 20

// do runs req, never following a redirect (see noRedirects), and maps
// transport failures and non-2xx answers, a 3xx among them, to *Error.
func do(ctx context.Context, c *http.Client, req *http.Request, what string) (*http.Response, error) {
	resp, err := noRedirects(c).Do(req)
	if err != nil {
		if ctx.Err() != nil {
			return nil, ctxErr(ctx, what)
		}
		return nil, Errorf(CodeBackendUnreachable, 0, "%s: %v", what, stripURL(err))
	}
	if resp.StatusCode/100 != 2 {
		defer resp.Body.Close()
		if resp.StatusCode/100 == 3 {
			if msg := redirectMessage(resp, what, credentials(req)...); msg != "" {
				return nil, Errorf(CodeBackendError, resp.StatusCode, "%s", msg)
			}
		}
		raw, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		msg := strings.TrimSpace(string(raw))
		if m := errorMessage(raw); m != "" {
			msg = m
		}
		if msg == "" {
			msg = http.StatusText(resp.StatusCode)
		}
		return nil, Errorf(CodeBackendError, resp.StatusCode, "%s: %s", what, redactSecret(msg, credentials(req)...))
	}
	return resp, nil
}

// ctxErr maps the end of ctx: the backend's own deadline is a job error
// (backend_timeout); the caller's cancellation is returned as ctx.Err().
func ctxErr(ctx context.Context, what string) error {
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		return Errorf(CodeBackendTimeout, 0, "%s: timed out", what)
	}
	return ctx.Err()
}

// stripURL keeps the cause of a *url.Error without the URL, which may carry
// a query string the operator considers private.
func stripURL(err error) error {
	var ue *url.Error
	if errors.As(err, &ue) {
		return ue.Err
	}
	return err
}

// errorMessage extracts the message of {"error":{"message":...}},
// {"error":"..."} or {"message":...}; "" when there is none.
func errorMessage(raw []byte) string {
	var v struct {
		Error   json.RawMessage `json:"error"`
		Message string          `json:"message"`
	}
	if json.Unmarshal(raw, &v) != nil {
		return ""
	}
	if v.Message != "" {
		return v.Message
	}
	var s string
	if json.Unmarshal(v.Error, &s) == nil {
		return s
	}
	var obj struct {
		Message string `json:"message"`
	}
	if json.Unmarshal(v.Error, &obj) == nil && obj.Message != "" {
		return obj.Message
	}
	return strings.TrimSpace(string(v.Error))
}

// describe quotes the start of a result that is not JSON for a message,
// secrets redacted. They are redacted before the cut, in a prefix long
// enough to hold any secret that starts within the part shown: cut first,
// a secret straddling the cut would leave its start in the message.
func describe(b []byte, secrets ...string) string {
	const shown = 80
	n := shown
	for _, s := range secrets {
		n = max(n, shown+len(s))
	}
	cut := len(b) > n
	if cut {
		b = b[:n]
	}
	s := redactSecret(string(b), secrets...)
	if len(s) > shown {
		s, cut = s[:shown], true
	}
	if cut {
		return fmt.Sprintf("%q...", s)
	}
	return fmt.Sprintf("%q", s)
}

// redactSecret replaces each secret in msg. A server or proxy refusing a
// key may quote it back, and the message becomes the job's error, which
// every client can read. It runs before the message is capped, which could
// otherwise cut a key and leave a prefix no longer matching it.
func redactSecret(msg string, secrets ...string) string {
	for _, secret := range secrets {
		if len(secret) >= 4 {
			msg = strings.ReplaceAll(msg, secret, "[REDACTED]")
		}
	}
	return msg
}

// credentials are the secrets req carries: its Authorization header (the
// token of a bearer, the whole value of any other scheme) and the password
// of its URL, which the client sends as Basic credentials of its own (the
// header is set on a copy, so req never shows it), in both forms.
func credentials(req *http.Request) []string {
	var out []string
	v := strings.TrimSpace(req.Header.Get("Authorization"))
	if scheme, tok, ok := strings.Cut(v, " "); ok && strings.EqualFold(scheme, "bearer") {
		v = strings.TrimSpace(tok)
	}
	if v != "" {
		out = append(out, v)
	}
	return append(out, urlCredentials(req.URL)...)
}

// urlCredentials are the forms in which the credentials of u can come
// back: the Basic credential the client makes of its password and the
// password itself, and those of its query (queryCredentials).
func urlCredentials(u *url.URL) []string {
	if u == nil {
		return nil
	}
	out := queryCredentials(u)
	if u.User == nil {
		return out
	}
	pass, ok := u.User.Password()
	if !ok || pass == "" {
		return out
	}
	basic := base64.StdEncoding.EncodeToString([]byte(u.User.Username() + ":" + pass))
	return append(out, basic, pass)
}

// minQueryCredential is the shortest query value taken for a credential:
// tokens are longer, and a short value ("json", "true") would blank the
// same word wherever a message has it.
const minQueryCredential = 8

// queryCredentials are the forms in which a token in the query of u (a
// backend URL such as https://h/rag?key=…, which the operator keeps
// private) can come back: the query as sent, which a server quotes with
// the path it refuses, and each value long enough to be a token, escaped
// and not.
func queryCredentials(u *url.URL) []string {
	if u.RawQuery == "" {
		return nil
	}
	out := []string{u.RawQuery}
	for _, p := range strings.Split(u.RawQuery, "&") {
		_, raw, _ := strings.Cut(p, "=")
		if len(raw) < minQueryCredential {
			continue
		}
		out = append(out, raw)
		if v, err := url.QueryUnescape(raw); err == nil && v != raw {
			out = append(out, v)
		}
	}
	return out
}

// secrets are what l sends that must not come back in a job's error.
func (l *LLM) secrets() []string {
	out := []string{l.APIKey}
	if u, err := url.Parse(l.BaseURL); err == nil {
		out = append(out, urlCredentials(u)...)
	}
	return out
}
