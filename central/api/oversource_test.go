package api_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/vesta-cx/euterpe/daemon/sqldb"
)

// TestOutputOverSourceRefused: a request whose output's final key is its
// source object (same bucket on the same server, however the endpoint is
// spelled) is refused with 400 invalid_request naming output.prefix, and
// nothing is stored: promotion would have replaced the requester's source.
// Outputs beside the source, or in another bucket or server, are accepted.
func TestOutputOverSourceRefused(t *testing.T) {
	type mod func(src, out map[string]any, m map[string]any)
	at := func(bucket, key, srcEP, outEP string) mod {
		return func(src, out, _ map[string]any) {
			src["bucket"], src["key"], src["endpoint"], out["endpoint"] = bucket, key, srcEP, outEP
		}
	}
	signed := func(url, outEP string) mod {
		return func(src, out, m map[string]any) {
			m["source"] = map[string]any{"url": url}
			out["endpoint"] = outEP
		}
	}
	const sig = "?X-Amz-Signature=abc&X-Amz-Credential=AKIASRC"
	eachEngine(t, func(t *testing.T, db *sqldb.DB) {
		e := start(t, db)
		key := e.requester()
		refused := []struct {
			name string
			mod  mod
		}{
			{"same endpoint", at("out", "jobs/1/hi.ogg", "http://127.0.0.1:7070", "http://127.0.0.1:7070")},
			{"endpoint case and slash", at("out", "jobs/1/hi.ogg", "http://127.0.0.1:7070", "HTTP://127.0.0.1:7070/")},
			{"host case and default port", at("out", "jobs/1/hi.ogg", "https://S3.Example.com", "https://s3.example.com:443")},
			{"both AWS S3", at("out", "jobs/1/hi.ogg", "", "https://s3.eu-west-1.amazonaws.com")},
			{"prefix without slash", func(src, out, m map[string]any) {
				at("out", "jobs/1/hi.ogg", "", "")(src, out, m)
				out["prefix"] = "jobs/1"
			}},
			{"second rendition", func(src, out, m map[string]any) {
				at("out", "jobs/1/lo.mp3", "", "")(src, out, m)
				m["renditions"] = []any{
					map[string]any{"name": "hi", "codec": "opus", "bitrate_kbps": 128},
					map[string]any{"name": "lo", "codec": "mp3", "bitrate_kbps": 96},
				}
			}},
			{"signed URL, path style", signed("https://s3.example.com/out/jobs/1/hi.ogg"+sig, "https://s3.example.com")},
			{"signed URL, virtual-hosted", signed("https://out.s3.example.com/jobs/1/hi.ogg"+sig, "https://s3.example.com")},
			{"signed URL, AWS S3", signed("https://out.s3.us-east-1.amazonaws.com/jobs/1/hi.ogg"+sig, "")},
		}
		for i, tc := range refused {
			m := validBody()
			tc.mod(m["source"].(map[string]any), m["output"].(map[string]any), m)
			r := e.do("POST", "/transcode", key, fmt.Sprintf("over-%d", i), js(m))
			errBody, _ := r.Body["error"].(map[string]any)
			msg, _ := errBody["message"].(string)
			if r.Code != 400 || errBody["code"] != "invalid_request" || !strings.HasPrefix(msg, "output.prefix ") || !strings.Contains(msg, "source object") {
				t.Errorf("%s: %d %s, want 400 invalid_request naming output.prefix and the source object", tc.name, r.Code, r.Raw)
			}
			if strings.Contains(r.Raw, secret) || strings.Contains(r.Raw, "abc") {
				t.Errorf("%s: error leaks a secret: %s", tc.name, r.Raw)
			}
		}
		if n := count(t, db, `SELECT COUNT(*) FROM inbox_jobs`) + count(t, db, `SELECT COUNT(*) FROM idempotency_keys`); n != 0 {
			t.Fatalf("refused requests wrote %d rows", n)
		}
		accepted := []struct {
			name string
			mod  mod
		}{
			{"another key", at("out", "jobs/1/hi.wav", "", "")},
			{"another bucket", at("in", "jobs/1/hi.ogg", "", "")},
			{"another port", at("out", "jobs/1/hi.ogg", "http://127.0.0.1:7070", "http://127.0.0.1:7071")},
			{"another scheme's default port", at("out", "jobs/1/hi.ogg", "http://s3.example.com", "https://s3.example.com")},
			{"another partition", at("out", "jobs/1/hi.ogg", "", "https://s3.cn-north-1.amazonaws.com.cn")},
			{"signed URL of another bucket", signed("https://s3.example.com/in/jobs/1/hi.ogg"+sig, "https://s3.example.com")},
			{"signed URL on another host", signed("https://cdn.example.com/jobs/1/hi.ogg"+sig, "https://s3.example.com")},
		}
		for i, tc := range accepted {
			m := validBody()
			tc.mod(m["source"].(map[string]any), m["output"].(map[string]any), m)
			if r := e.do("POST", "/transcode", key, fmt.Sprintf("beside-%d", i), js(m)); r.Code != 202 {
				t.Errorf("%s: %d %s, want 202", tc.name, r.Code, r.Raw)
			}
		}
	})
}
