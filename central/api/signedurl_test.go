package api_test

import (
	"testing"

	"github.com/vesta-cx/euterpe/daemon/sqldb"
)

// TestSignedSourceURLIdempotency: under one Idempotency-Key, a retry whose
// signed source URL carries renewed signature parameters (of any scheme
// the hash knows) is the same request and replays the job; a URL naming a
// different object (another path, another non-signature parameter, or the
// same parameters with another value) is a different request: 409.
func TestSignedSourceURLIdempotency(t *testing.T) {
	eachEngine(t, func(t *testing.T, db *sqldb.DB) {
		e := start(t, db)
		key := e.requester()
		cases := []struct {
			name, first, retry string
			same               bool
		}{
			{"generic sig", "https://files.example.com/download?file=AAA&sig=1", "https://files.example.com/download?file=BBB&sig=2", false},
			{"sig renewed", "https://files.example.com/download?file=AAA&sig=1", "https://files.example.com/download?sig=2&file=AAA", true},
			{"sigv4 renewed", "https://s3.example.com/in/a.wav?X-Amz-Algorithm=AWS4-HMAC-SHA256&X-Amz-Credential=AK%2F20260101&X-Amz-Date=20260101T000000Z&X-Amz-Expires=900&X-Amz-SignedHeaders=host&X-Amz-Signature=aaa",
				"https://s3.example.com/in/a.wav?X-Amz-Algorithm=AWS4-HMAC-SHA256&X-Amz-Credential=AK%2F20260102&X-Amz-Date=20260102T000000Z&X-Amz-Expires=3600&X-Amz-SignedHeaders=host&X-Amz-Security-Token=tok&X-Amz-Signature=bbb", true},
			{"sigv4 other version", "https://s3.example.com/in/a.wav?versionId=1&X-Amz-Signature=aaa", "https://s3.example.com/in/a.wav?versionId=2&X-Amz-Signature=bbb", false},
			{"sigv4 other key", "https://s3.example.com/in/a.wav?X-Amz-Signature=aaa", "https://s3.example.com/in/b.wav?X-Amz-Signature=aaa", false},
			{"gcs v4 renewed", "https://storage.googleapis.com/b/a.wav?X-Goog-Algorithm=GOOG4-RSA-SHA256&X-Goog-Date=1&X-Goog-Signature=aa", "https://storage.googleapis.com/b/a.wav?X-Goog-Algorithm=GOOG4-RSA-SHA256&X-Goog-Date=2&X-Goog-Signature=bb", true},
			{"azure sas renewed", "https://acct.blob.core.windows.net/c/a.wav?sv=2024-01-01&sp=r&se=2026-01-01T00%3A00%3A00Z&sr=b&sig=aa", "https://acct.blob.core.windows.net/c/a.wav?sv=2024-01-01&sp=r&st=2026-01-01T00%3A00%3A00Z&se=2026-01-02T00%3A00%3A00Z&sr=b&sig=bb", true},
			{"v2 / cloudfront renewed", "https://cdn.example.com/a.wav?Expires=1&Signature=aa&Key-Pair-Id=K1", "https://cdn.example.com/a.wav?Expires=2&Signature=bb&Key-Pair-Id=K2", true},
			{"v2 other object", "https://cdn.example.com/a.wav?track=1&Expires=1&Signature=aa", "https://cdn.example.com/a.wav?track=2&Expires=2&Signature=bb", false},
			{"no signature: expires is data", "https://files.example.com/a.wav?expires=1", "https://files.example.com/a.wav?expires=2", false},
			// Pairs url.ParseQuery refuses (a ';', a bad escape) still name
			// the object: they must not drop out of the hash.
			{"semicolon in a parameter", "https://files.example.com/get?file=a;1&sig=1", "https://files.example.com/get?file=b;2&sig=2", false},
			{"bad escape in a parameter", "https://files.example.com/get?file=%zz1&sig=1", "https://files.example.com/get?file=%zz2&sig=2", false},
			{"bad escape, renewed", "https://files.example.com/get?file=%zz1&sig=1", "https://files.example.com/get?sig=2&file=%zz1", true},
		}
		for i, tc := range cases {
			idem := "signed-" + string(rune('a'+i))
			b := validBody()
			b["source"] = map[string]any{"url": tc.first}
			r := e.do("POST", "/transcode", key, idem, js(b))
			if r.Code != 202 {
				t.Fatalf("%s: first: %d %s", tc.name, r.Code, r.Raw)
			}
			b["source"] = map[string]any{"url": tc.retry}
			r2 := e.do("POST", "/transcode", key, idem, js(b))
			switch {
			case tc.same && (r2.Code != 202 || r2.Body["job_id"] != r.Body["job_id"]):
				t.Fatalf("%s: renewed signature not replayed: %d %s", tc.name, r2.Code, r2.Raw)
			case !tc.same && r2.Code != 409:
				t.Fatalf("%s: a different object under the same key got %d %s, want 409", tc.name, r2.Code, r2.Raw)
			}
		}
	})
}
