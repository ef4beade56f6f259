package backend

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
	"unicode/utf8"
)

// What an LLM server sends inside usage (and an embedding, a string with
// encoding_format=base64 on some servers) is passed on as it came: JSON
// lets invalid UTF-8 through inside strings, and so did the result, though
// GET and SSE clients are promised JSON, which is UTF-8. The bad bytes
// become U+FFFD, as for every other backend's result.
func TestLLMResultIsUTF8(t *testing.T) {
	tests := []struct {
		task, payload, answer string
		want                  []string
	}{
		{"chat", `{"prompt":"hi"}`, "data: {\"model\":\"m\",\"choices\":[{\"delta\":{\"content\":\"ok\"},\"finish_reason\":\"stop\"}]," +
			"\"usage\":{\"note\":\"caf\xe9\",\"total_tokens\":1}}\n\ndata: [DONE]\n\n",
			[]string{`"usage":{"note":"caf` + "\uFFFD" + `","total_tokens":1}`}},
		{"embed", `{"input":"hi"}`, "{\"data\":[{\"embedding\":\"AAC\xff\"}],\"model\":\"e\",\"usage\":{\"note\":\"caf\xe9\"}}",
			[]string{`"embeddings":["AAC` + "\uFFFD" + `"]`, `"usage":{"note":"caf` + "\uFFFD" + `"}`}},
	}
	for _, tc := range tests {
		t.Run(tc.task, func(t *testing.T) {
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				_, _ = io.Copy(io.Discard, r.Body)
				_, _ = io.WriteString(w, tc.answer)
			}))
			t.Cleanup(srv.Close)
			l := &LLM{BaseURL: srv.URL, Timeout: 5 * time.Second, Client: srv.Client()}
			out, err := l.Run(context.Background(), Request{Task: tc.task, Payload: json.RawMessage(tc.payload)}, nil)
			if err != nil {
				t.Fatal(err)
			}
			if !utf8.Valid(out) || !json.Valid(out) {
				t.Fatalf("result is not UTF-8 JSON: %q", out)
			}
			for _, w := range tc.want {
				if !strings.Contains(string(out), w) {
					t.Errorf("result %s lacks %s", out, w)
				}
			}
		})
	}
}
