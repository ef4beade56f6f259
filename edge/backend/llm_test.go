package backend

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// fakeLLM speaks the OpenAI-compatible streaming wire format.
type fakeLLM struct {
	mu      sync.Mutex
	bodies  []map[string]any
	headers []http.Header
	tokens  []string
	delay   time.Duration
	status  int
	errBody string
	// streamErr, when set, is sent as an error event of the stream (after
	// the tokens), which then ends.
	streamErr string
}

func (f *fakeLLM) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	var body map[string]any
	_ = json.NewDecoder(r.Body).Decode(&body)
	f.mu.Lock()
	f.bodies = append(f.bodies, body)
	f.headers = append(f.headers, r.Header.Clone())
	f.mu.Unlock()
	if f.status != 0 {
		w.WriteHeader(f.status)
		_, _ = io.WriteString(w, f.errBody)
		return
	}
	switch r.URL.Path {
	case "/v1/embeddings":
		_, _ = io.WriteString(w, `{"object":"list","data":[{"index":0,"embedding":[0.5,-1.25]}],"model":"emb","usage":{"prompt_tokens":2,"total_tokens":2}}`)
		return
	case "/v1/chat/completions":
	default:
		http.NotFound(w, r)
		return
	}
	w.Header().Set("Content-Type", "text/event-stream")
	fl := w.(http.Flusher)
	for _, tok := range f.tokens {
		if f.delay > 0 {
			select {
			case <-time.After(f.delay):
			case <-r.Context().Done():
				return
			}
		}
		b, _ := json.Marshal(map[string]any{"model": "m1", "choices": []any{map[string]any{"index": 0, "delta": map[string]string{"content": tok}, "finish_reason": nil}}})
		fmt.Fprintf(w, "data: %s\n\n", b)
		fl.Flush()
	}
	if f.streamErr != "" {
		fmt.Fprintf(w, "data: {\"error\":%s}\n\n", f.streamErr)
		return
	}
	fmt.Fprint(w, ": keep-alive\n\n")
	fmt.Fprint(w, `data: {"model":"m1","choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}`+"\n\n")
	fmt.Fprint(w, `data: {"model":"m1","choices":[],"usage":{"prompt_tokens":3,"completion_tokens":2,"total_tokens":5}}`+"\n\n")
	fmt.Fprint(w, "data: [DONE]\n\n")
}

func newLLM(t *testing.T, f *fakeLLM) *LLM {
	srv := httptest.NewServer(f)
	t.Cleanup(srv.Close)
	return &LLM{BaseURL: srv.URL + "/", Model: "default-model", APIKey: "sk-test-secret", Timeout: 5 * time.Second, Client: srv.Client()}
}

func TestLLMChatStreams(t *testing.T) {
	tests := []struct {
		name     string
		payload  string
		wantMsgs int
		model    string
	}{
		{"prompt with system", `{"prompt":"hi","system":"be brief","temperature":0.2}`, 2, "default-model"},
		{"messages and model", `{"messages":[{"role":"user","content":"hi"}],"model":"other"}`, 1, "other"},
		{"n of 1", `{"prompt":"hi","n":1}`, 1, "default-model"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f := &fakeLLM{tokens: []string{"Hel", "lo", " world"}}
			l := newLLM(t, f)
			var got []string
			out, err := l.Run(context.Background(), Request{JobID: "j1", Task: "chat", Payload: json.RawMessage(tc.payload)}, func(s string) { got = append(got, s) })
			if err != nil {
				t.Fatal(err)
			}
			var res ChatResult
			if err := json.Unmarshal(out, &res); err != nil {
				t.Fatal(err)
			}
			if res.Text != "Hello world" || res.FinishReason != "stop" || res.Model != "m1" || !strings.Contains(string(res.Usage), `"total_tokens":5`) {
				t.Fatalf("result = %s", out)
			}
			if strings.Join(got, "") != "Hello world" || len(got) != 3 {
				t.Fatalf("deltas = %q", got)
			}
			body := f.bodies[0]
			if body["stream"] != true || body["model"] != tc.model || len(body["messages"].([]any)) != tc.wantMsgs {
				t.Fatalf("request body = %v", body)
			}
			if _, ok := body["prompt"]; ok {
				t.Fatalf("prompt forwarded: %v", body)
			}
			if f.headers[0].Get("Authorization") != "Bearer sk-test-secret" {
				t.Fatalf("authorization header = %q", f.headers[0].Get("Authorization"))
			}
		})
	}
}

func TestLLMErrors(t *testing.T) {
	long := strings.Repeat("x", 3000)
	tests := []struct {
		name       string
		f          *fakeLLM
		payload    string
		code       string
		status     int
		msgContain string
	}{
		{"upstream 500 with long body", &fakeLLM{status: 500, errBody: `{"error":{"message":"` + long + `"}}`}, `{"prompt":"x"}`, CodeBackendError, 500, "xxxx"},
		{"upstream 429 plain text", &fakeLLM{status: 429, errBody: "slow down"}, `{"prompt":"x"}`, CodeBackendError, 429, "slow down"},
		// A server or proxy that quotes the refused key back.
		{"upstream 401 echoing the key", &fakeLLM{status: 401, errBody: `{"error":{"message":"invalid api key: sk-test-secret"}}`}, `{"prompt":"x"}`, CodeBackendError, 401, "invalid api key: [REDACTED]"},
		{"stream error echoing the key", &fakeLLM{tokens: []string{"a"}, streamErr: `{"message":"key sk-test-secret is over quota"}`}, `{"prompt":"x"}`, CodeBackendError, 0, "key [REDACTED] is over quota"},
		// Redacted before the message is capped: a cut key would no longer match.
		{"stream error with the key at the cap", &fakeLLM{streamErr: `{"message":"` + strings.Repeat("y", 480) + ` sk-test-secret"}`}, `{"prompt":"x"}`, CodeBackendError, 0, "yyyy"},
		{"no prompt", &fakeLLM{}, `{"foo":1}`, CodeInvalidPayload, 0, "messages"},
		{"raw payload", &fakeLLM{}, `{"_raw":"not json"}`, CodeInvalidPayload, 0, "prompt"},
		{"embed without input", &fakeLLM{}, `{}`, CodeInvalidPayload, 0, "input"},
		// The choices of n > 1 would interleave into one text.
		{"n of 2", &fakeLLM{}, `{"prompt":"x","n":2}`, CodeInvalidPayload, 0, "n must be 1"},
		{"n not a number", &fakeLLM{}, `{"prompt":"x","n":"2"}`, CodeInvalidPayload, 0, "n must be 1"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			l := newLLM(t, tc.f)
			task := "chat"
			if strings.HasPrefix(tc.name, "embed") {
				task = "embed"
			}
			_, err := l.Run(context.Background(), Request{JobID: "j", Task: task, Payload: json.RawMessage(tc.payload)}, nil)
			var be *Error
			if !errors.As(err, &be) {
				t.Fatalf("err = %v, want *Error", err)
			}
			if be.Code != tc.code || be.Status != tc.status || len(be.Message) > 512 || !strings.Contains(be.Message, tc.msgContain) {
				t.Fatalf("err = %+v (len %d)", be, len(be.Message))
			}
			if strings.Contains(be.Error(), "sk-test") {
				t.Fatal("secret in error")
			}
		})
	}
}

func TestLLMUnreachable(t *testing.T) {
	l := &LLM{BaseURL: "http://127.0.0.1:1", Client: http.DefaultClient}
	_, err := l.Run(context.Background(), Request{Task: "chat", Payload: json.RawMessage(`{"prompt":"x"}`)}, nil)
	var be *Error
	if !errors.As(err, &be) || be.Code != CodeBackendUnreachable {
		t.Fatalf("err = %v", err)
	}
}

func TestLLMCancelAbandonsStream(t *testing.T) {
	f := &fakeLLM{tokens: make([]string, 100), delay: 200 * time.Millisecond}
	for i := range f.tokens {
		f.tokens[i] = "t"
	}
	l := newLLM(t, f)
	ctx, cancel := context.WithCancel(context.Background())
	first := make(chan struct{})
	var once sync.Once
	errc := make(chan error, 1)
	go func() {
		_, err := l.Run(ctx, Request{Task: "code", Payload: json.RawMessage(`{"prompt":"x"}`)}, func(string) { once.Do(func() { close(first) }) })
		errc <- err
	}()
	<-first
	start := time.Now()
	cancel()
	select {
	case err := <-errc:
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("err = %v, want context.Canceled", err)
		}
		if d := time.Since(start); d > 10*time.Second {
			t.Fatalf("abandoned after %v", d)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("backend call not abandoned")
	}
}

func TestLLMTimeout(t *testing.T) {
	f := &fakeLLM{tokens: []string{"a", "b"}, delay: time.Second}
	l := newLLM(t, f)
	l.Timeout = 100 * time.Millisecond
	_, err := l.Run(context.Background(), Request{Task: "plan", Payload: json.RawMessage(`{"prompt":"x"}`)}, nil)
	var be *Error
	if !errors.As(err, &be) || be.Code != CodeBackendTimeout {
		t.Fatalf("err = %v, want %s", err, CodeBackendTimeout)
	}
}

func TestLLMEmbed(t *testing.T) {
	f := &fakeLLM{}
	l := newLLM(t, f)
	out, err := l.Run(context.Background(), Request{Task: "embed", Payload: json.RawMessage(`{"input":"hello"}`)}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if string(out) != `{"embeddings":[[0.5,-1.25]],"model":"emb","usage":{"prompt_tokens":2,"total_tokens":2}}` {
		t.Fatalf("result = %s", out)
	}
	if f.bodies[0]["input"] != "hello" || f.bodies[0]["model"] != "default-model" || f.bodies[0]["stream"] != nil {
		t.Fatalf("request = %v", f.bodies[0])
	}
}

// An embeddings answer past maxBody is refused as too large, saying what to
// do, not as JSON cut short; one that is cut short stays invalid_result.
func TestLLMEmbedResponseSize(t *testing.T) {
	vector := "[" + strings.Repeat("0.0123456789,", 1535) + "0.5]"
	tests := []struct {
		name    string
		vectors int
		tail    string
		code    string
		msg     string
	}{
		{"over the bound", maxBody/len(vector) + 1, `],"model":"emb"}`, CodeResultTooLarge, "send fewer inputs per job"},
		{"cut short", 10, "", CodeInvalidResult, "embeddings response"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				_, _ = io.WriteString(w, `{"object":"list","data":[`)
				for i := 0; i < tc.vectors; i++ {
					if i > 0 {
						_, _ = io.WriteString(w, ",")
					}
					if _, err := fmt.Fprintf(w, `{"index":%d,"embedding":%s}`, i, vector); err != nil {
						return
					}
				}
				_, _ = io.WriteString(w, tc.tail)
			}))
			defer srv.Close()
			l := &LLM{BaseURL: srv.URL, Timeout: 10 * time.Second, Client: srv.Client()}
			_, err := l.Run(context.Background(), Request{Task: "embed", Payload: json.RawMessage(`{"input":["a","b"]}`)}, nil)
			var be *Error
			if !errors.As(err, &be) || be.Code != tc.code || !strings.Contains(be.Message, tc.msg) {
				t.Fatalf("err = %v, want %s containing %q", err, tc.code, tc.msg)
			}
		})
	}
}

// An error in the middle of a stream becomes the job's error with the
// server's message: as an OpenAI-style data event, and as the "error:" line
// llama.cpp's server writes instead.
func TestLLMStreamErrorChunk(t *testing.T) {
	for _, tc := range []struct{ name, line string }{
		{"data event", `data: {"error":{"message":"context length exceeded"}}`},
		{"llama.cpp error line", `error: {"code":500,"message":"context length exceeded","type":"server_error"}`},
		{"error line of plain text", `error: context length exceeded`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				fmt.Fprint(w, `data: {"choices":[{"delta":{"content":"a"}}]}`+"\n\n")
				fmt.Fprint(w, tc.line+"\n\n")
			}))
			defer srv.Close()
			l := &LLM{BaseURL: srv.URL, Client: srv.Client()}
			_, err := l.Run(context.Background(), Request{Task: "chat", Payload: json.RawMessage(`{"prompt":"x"}`)}, nil)
			var be *Error
			if !errors.As(err, &be) || be.Code != CodeBackendError || !strings.Contains(be.Message, "context length exceeded") {
				t.Fatalf("err = %v", err)
			}
		})
	}
}

// A streamed answer longer than MaxText fails with result_too_large and
// stops being read; what was handed to delta stays within the cap.
func TestLLMTextCap(t *testing.T) {
	tok := strings.Repeat("y", 1000)
	tests := []struct {
		name    string
		tokens  int
		max     int
		wantErr bool
	}{
		{"under the cap", 4, 4000, false},
		{"over the cap", 50, 4000, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f := &fakeLLM{tokens: make([]string, tc.tokens)}
			for i := range f.tokens {
				f.tokens[i] = tok
			}
			l := newLLM(t, f)
			l.MaxText = tc.max
			sent := 0
			out, err := l.Run(context.Background(), Request{JobID: "j", Task: "chat", Payload: json.RawMessage(`{"prompt":"x"}`)}, func(s string) { sent += len(s) })
			if sent > tc.max {
				t.Fatalf("%d bytes handed to delta, cap %d", sent, tc.max)
			}
			if !tc.wantErr {
				if err != nil {
					t.Fatal(err)
				}
				var res ChatResult
				_ = json.Unmarshal(out, &res)
				if len(res.Text) != tc.tokens*len(tok) {
					t.Fatalf("text %d bytes", len(res.Text))
				}
				return
			}
			var be *Error
			if !errors.As(err, &be) || be.Code != CodeResultTooLarge || !strings.Contains(be.Message, "EUTERPE_LLM_MAX_TEXT_BYTES") {
				t.Fatalf("err = %v, want %s", err, CodeResultTooLarge)
			}
		})
	}
}

func TestLLMTextCapDefault(t *testing.T) {
	f := &fakeLLM{tokens: []string{strings.Repeat("z", DefaultLLMMaxText/2), strings.Repeat("z", DefaultLLMMaxText/2+1)}}
	l := newLLM(t, f)
	_, err := l.Run(context.Background(), Request{JobID: "j", Task: "chat", Payload: json.RawMessage(`{"prompt":"x"}`)}, nil)
	var be *Error
	if !errors.As(err, &be) || be.Code != CodeResultTooLarge {
		t.Fatalf("err = %v, want %s", err, CodeResultTooLarge)
	}
}

// A server that never ends an event (data lines with no blank line) is
// not read for ever into memory: the event is refused once it passes
// maxEvent, as is a single line longer than that.
func TestLLMStreamEventCap(t *testing.T) {
	const total = 32 << 20
	tests := []struct {
		name string
		line string
	}{
		{"endless event", "data: " + strings.Repeat("x", 64<<10) + "\n"},
		{"endless line", strings.Repeat("x", 64<<10)},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var written atomic.Int64
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Type", "text/event-stream")
				for written.Load() < total {
					n, err := io.WriteString(w, tc.line)
					written.Add(int64(n))
					if err != nil {
						return
					}
				}
				fmt.Fprint(w, "\n\ndata: [DONE]\n\n")
			}))
			defer srv.Close()
			l := &LLM{BaseURL: srv.URL, Client: srv.Client()}
			_, err := l.Run(context.Background(), Request{Task: "chat", Payload: json.RawMessage(`{"prompt":"x"}`)}, nil)
			var be *Error
			if !errors.As(err, &be) || be.Code != CodeInvalidResult {
				t.Fatalf("err = %v, want %s", err, CodeInvalidResult)
			}
			srv.CloseClientConnections()
			if n := written.Load(); n >= total {
				t.Fatalf("the whole %d-byte event was read", n)
			}
		})
	}
}
