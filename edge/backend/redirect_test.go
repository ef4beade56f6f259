package backend

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// A backend answering a redirect fails the job with backend_error and the
// 3xx status; the job's POST, its payload and the LLM's key never reach
// where the redirect points. Both the registry's own client (New with nil)
// and a client a caller passes, which follows redirects by default, are
// covered.
func TestBackendRedirectNotFollowed(t *testing.T) {
	const key = "sk-redirect-secret"
	var reached atomic.Int64
	target := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		reached.Add(1)
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"wrong":"result"}`))
	}))
	defer target.Close()
	// The location carries a password and a token, which the error hides.
	location := strings.Replace(target.URL, "http://", "http://u:loc-pass-1234@", 1) + "/elsewhere?token=loc-token-5678&v=1"

	for _, status := range []int{301, 302, 303, 307, 308} {
		t.Run(http.StatusText(status), func(t *testing.T) {
			src := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				http.Redirect(w, r, location, status)
			}))
			defer src.Close()
			reg, err := New(Config{LLMBaseURL: src.URL, LLMAPIKey: key, Timeout: 5 * time.Second, LLMTimeout: 5 * time.Second,
				Tasks: "chat=llm,embed=llm,rag=http:" + src.URL + "/rag"}, nil)
			if err != nil {
				t.Fatal(err)
			}
			backends := map[string]Backend{
				"registry chat":               reg,
				"registry embed":              reg,
				"registry rag":                reg,
				"llm with a caller's client":  &LLM{BaseURL: src.URL, APIKey: key, Timeout: 5 * time.Second, Client: src.Client()},
				"http with a caller's client": &HTTP{URL: src.URL + "/rag", Timeout: 5 * time.Second, Client: src.Client()},
			}
			for name, be := range backends {
				task := "chat"
				if i := strings.LastIndexByte(name, ' '); strings.HasPrefix(name, "registry") {
					task = name[i+1:]
				}
				out, err := be.Run(context.Background(), Request{JobID: "j", Task: task, Payload: json.RawMessage(`{"prompt":"x","input":"x"}`)}, nil)
				var e *Error
				if !errors.As(err, &e) || e.Code != CodeBackendError || e.Status != status {
					t.Fatalf("%s: result %s, err = %v; want %s with status %d", name, out, err, CodeBackendError, status)
				}
				if !strings.Contains(e.Message, "redirect to http://u:[REDACTED]@") || !strings.Contains(e.Message, "/elsewhere?token=[REDACTED]&v=1") {
					t.Fatalf("%s: message %q", name, e.Message)
				}
				if strings.Contains(e.Message, "loc-pass") || strings.Contains(e.Message, "loc-token") || strings.Contains(e.Message, key) {
					t.Fatalf("%s: secret in message %q", name, e.Message)
				}
			}
			if n := reached.Load(); n != 0 {
				t.Fatalf("the redirect target received %d requests", n)
			}
		})
	}
}
