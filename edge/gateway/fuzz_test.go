package gateway_test

import (
	"net/http"
	"strings"
	"testing"

	"github.com/vesta-cx/euterpe/daemon/testsvc"
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
		h := http.Header{}
		if key != "" && !strings.ContainsAny(key, "\r\n\x00") {
			h.Set("Idempotency-Key", key)
		}
		// A send error is a header value net/http itself refuses to carry.
		_ = testsvc.PostNo5xx(t, s.URL+"/v1/jobs", h, body)
	})
}
