package api_test

import (
	"net/url"
	"strings"
	"testing"
)

// TestGroupKeyPercentEncoded: a client building the URL with
// encodeURIComponent (or url.PathEscape of a whole key with a reserved
// character in mind) sends the group key's ':' as %3A, and hex digits in
// either case may be escaped too. The key is the same key: it reaches the
// group (here: 404 not_found, the library is empty), never 400
// bad_group_key. A key still malformed once decoded stays 400.
func TestGroupKeyPercentEncoded(t *testing.T) {
	s := start(t)
	hex := strings.Repeat("ab", 32)
	body := `{"keep_file_ids":[1],"delete_file_ids":[2]}`
	cases := []struct {
		name, method, key, body string
		code                    int
		errCode                 string
	}{
		{"files, %3A", "GET", "blake3%3A" + hex, "", 404, "not_found"},
		{"files, %3a", "GET", "sha256%3a" + hex, "", 404, "not_found"},
		{"files, url.QueryEscape", "GET", url.QueryEscape("blake3:" + hex), "", 404, "not_found"},
		{"files, escaped hex digit", "GET", "blake3:%61" + hex[1:], "", 404, "not_found"},
		{"delete, %3A", "POST", "blake3%3A" + hex, body, 404, "not_found"},
		{"files, escaped and malformed", "GET", "blake3%3Aabc", "", 400, "bad_group_key"},
		{"files, escaped slash", "GET", "blake3%2F" + hex, "", 400, "bad_group_key"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			path := "/api/v1/duplicates/groups/" + c.key + "/files"
			if c.method == "POST" {
				path = "/api/v1/duplicates/groups/" + c.key + "/delete"
			}
			code, out := s.do(c.method, path, c.body)
			e, _ := out["error"].(map[string]any)
			if code != c.code || e == nil || e["code"] != c.errCode {
				t.Fatalf("%s %s = %d %v, want %d %s", c.method, path, code, out, c.code, c.errCode)
			}
			if m, _ := e["message"].(string); m == "" || len(m) >= 512 {
				t.Fatalf("message %q", m)
			}
		})
	}
}
