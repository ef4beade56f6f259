package gateway_test

import (
	"io"
	"net/http"
	"strings"
	"testing"
)

// FuzzCreateJobHTTP: POST /v1/jobs with any body and Idempotency-Key, on a
// real Redis, is answered below 500 (202, 400, 409, 413 or 429) and never
// panics the gateway. FuzzParseCreate covers the parser alone.
func FuzzCreateJobHTTP(f *testing.F) {
	s := startServer(f, testSettings())
	for _, seed := range []struct{ body, key string }{
		{`{"task":"chat","payload":{}}`, ""}, {`{"task":"chat","payload":{}}`, "k1"}, {`{"task":"rag","payload":{"q":1},"ttl_s":60}`, "k1"},
		{`{"task":`, ""}, {`[]`, "\x01"}, {`{"task":"chat","payload":{},"ttl_s":-1}`, strings.Repeat("k", 300)},
	} {
		f.Add([]byte(seed.body), seed.key)
	}
	f.Fuzz(func(t *testing.T, body []byte, key string) {
		req, _ := http.NewRequest(http.MethodPost, s.URL+"/v1/jobs", strings.NewReader(string(body)))
		req.Header.Set("Content-Type", "application/json")
		if key != "" && !strings.ContainsAny(key, "\r\n\x00") {
			req.Header.Set("Idempotency-Key", key)
		}
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			return // a header value net/http itself refuses to send
		}
		raw, _ := io.ReadAll(res.Body)
		res.Body.Close()
		if res.StatusCode >= 500 {
			t.Fatalf("body %q key %q answered %d: %s", body, key, res.StatusCode, raw)
		}
	})
}
