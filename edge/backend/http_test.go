package backend

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// A backend URL may carry a user and password, which the client sends as a
// Basic Authorization header. A server refusing them may quote them back,
// and the message becomes the job's error, which every client can read.
func TestBackendErrorRedactsURLCredentials(t *testing.T) {
	const user, pass = "euterpe", "hunter2-url-pass"
	basic := base64.StdEncoding.EncodeToString([]byte(user + ":" + pass))
	tests := []struct {
		name  string
		quote func(r *http.Request) string
	}{
		{"authorization header", func(r *http.Request) string { return "refused " + r.Header.Get("Authorization") }},
		{"encoded credential", func(r *http.Request) string {
			return "refused " + strings.TrimPrefix(r.Header.Get("Authorization"), "Basic ")
		}},
		{"password", func(r *http.Request) string {
			_, p, _ := r.BasicAuth()
			return "wrong password " + p
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				w.WriteHeader(http.StatusUnauthorized)
				w.Write([]byte(`{"error":{"message":"` + tc.quote(r) + `"}}`))
			}))
			defer srv.Close()
			u := strings.Replace(srv.URL, "http://", "http://"+user+":"+pass+"@", 1)
			backends := map[string]Backend{
				"http": &HTTP{URL: u + "/rag", Timeout: 5 * time.Second, Client: srv.Client()},
				"llm":  &LLM{BaseURL: u, Timeout: 5 * time.Second, Client: srv.Client()},
			}
			for kind, be := range backends {
				_, err := be.Run(context.Background(), Request{JobID: "j", Task: "chat", Payload: json.RawMessage(`{"prompt":"x"}`)}, nil)
				var e *Error
				if !errors.As(err, &e) || e.Status != http.StatusUnauthorized {
					t.Fatalf("%s: err = %v", kind, err)
				}
				if strings.Contains(e.Message, pass) || strings.Contains(e.Message, basic) {
					t.Fatalf("%s: credential in error message %q", kind, e.Message)
				}
				if !strings.Contains(e.Message, "[REDACTED]") {
					t.Fatalf("%s: message %q", kind, e.Message)
				}
			}
		})
	}
}

// The same holds for an error event inside an LLM stream.
func TestLLMStreamErrorRedactsURLCredentials(t *testing.T) {
	const user, pass = "euterpe", "hunter2-url-pass"
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		_, p, _ := r.BasicAuth()
		w.Write([]byte(`data: {"error":{"message":"wrong password ` + p + ` (` + r.Header.Get("Authorization") + `)"}}` + "\n\n"))
	}))
	defer srv.Close()
	l := &LLM{BaseURL: strings.Replace(srv.URL, "http://", "http://"+user+":"+pass+"@", 1), Timeout: 5 * time.Second, Client: srv.Client()}
	_, err := l.Run(context.Background(), Request{JobID: "j", Task: "chat", Payload: json.RawMessage(`{"prompt":"x"}`)}, nil)
	var e *Error
	if !errors.As(err, &e) || e.Code != CodeBackendError {
		t.Fatalf("err = %v", err)
	}
	basic := base64.StdEncoding.EncodeToString([]byte(user + ":" + pass))
	if strings.Contains(e.Message, pass) || strings.Contains(e.Message, basic) || !strings.Contains(e.Message, "[REDACTED]") {
		t.Fatalf("message %q", e.Message)
	}
}

// A backend that answers 2xx with something other than JSON has the start
// of its answer quoted in the job's error; when that answer quotes the
// credentials of the request back, they are redacted like in an error
// status's message.
func TestHTTPInvalidResultRedactsURLCredentials(t *testing.T) {
	const user, pass = "euterpe", "hunter2-url-pass"
	basic := base64.StdEncoding.EncodeToString([]byte(user + ":" + pass))
	tests := []struct {
		name  string
		quote func(r *http.Request) string
	}{
		{"both forms", func(r *http.Request) string {
			_, p, _ := r.BasicAuth()
			return "pw " + p + " " + r.Header.Get("Authorization")
		}},
		{"password across the cut", func(r *http.Request) string {
			_, p, _ := r.BasicAuth()
			return strings.Repeat("x", 75) + p + strings.Repeat("y", 100)
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				w.Write([]byte(tc.quote(r)))
			}))
			defer srv.Close()
			u := strings.Replace(srv.URL, "http://", "http://"+user+":"+pass+"@", 1)
			h := &HTTP{URL: u + "/rag", Timeout: 5 * time.Second, Client: srv.Client()}
			_, err := h.Run(context.Background(), Request{JobID: "j", Task: "rag", Payload: json.RawMessage(`{}`)}, nil)
			var e *Error
			if !errors.As(err, &e) || e.Code != CodeInvalidResult {
				t.Fatalf("err = %v", err)
			}
			if strings.Contains(e.Message, pass[:5]) || strings.Contains(e.Message, basic[:5]) || !strings.Contains(e.Message, "[REDA") {
				t.Fatalf("message %q", e.Message)
			}
		})
	}
}

// A token in an http backend's query string (rag=http:https://h/rag?key=…)
// is a credential like a password in its user info: a server that quotes
// the refused request back (a 404 page naming the path and query, an
// answer that is not JSON) must not put it in the job's error.
func TestHTTPBackendErrorRedactsQueryToken(t *testing.T) {
	const token = "PLANTED-query-token-5c2e"
	for _, tc := range []struct {
		name   string
		status int
		code   string
	}{
		{"error status", http.StatusNotFound, CodeBackendError},
		{"invalid result", http.StatusOK, CodeInvalidResult},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				w.WriteHeader(tc.status)
				w.Write([]byte("Cannot POST " + r.URL.RequestURI() + " (query " + r.URL.Query().Get("key") + ")"))
			}))
			defer srv.Close()
			h := &HTTP{URL: srv.URL + "/rag?v=2&key=" + token, Timeout: 5 * time.Second, Client: srv.Client()}
			_, err := h.Run(context.Background(), Request{JobID: "j", Task: "rag", Payload: json.RawMessage(`{}`)}, nil)
			var e *Error
			if !errors.As(err, &e) || e.Code != tc.code || e.Status != tc.status {
				t.Fatalf("err = %v", err)
			}
			if strings.Contains(e.Error(), token) || !strings.Contains(e.Message, "Cannot POST /rag") {
				t.Fatalf("message %q", e.Message)
			}
		})
	}
}
