package webhook

import (
	"bytes"
	"fmt"
	"strings"
	"testing"
	"time"
)

func rawRequest(t *testing.T, now time.Time, body string, secret string) string {
	h, err := NewHeaders(now, "evt_9", []byte(body), []byte(secret))
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	fmt.Fprintf(&b, "POST /hook HTTP/1.1\r\nHost: example.com\r\nContent-Type: application/json\r\nContent-Length: %d\r\n", len(body))
	for k, v := range h {
		fmt.Fprintf(&b, "%s: %s\r\n", k, v[0])
	}
	b.WriteString("\r\n" + body)
	return b.String()
}

func TestRunVerifyCommand(t *testing.T) {
	now := time.Unix(1700000000, 0)
	body := `{"event_id":"evt_9","status":"succeeded"}`
	req := rawRequest(t, now, body, "s3cret")
	cases := []struct {
		name  string
		args  []string
		in    string
		at    time.Time
		code  int
		inOut string
	}{
		{"valid", []string{"--secret", "s3cret"}, req, now, 0, `"valid":true`},
		{"secret from env", []string{"--secret-env", "WH"}, req, now, 0, `"event_id":"evt_9"`},
		{"old and new", []string{"--secret", "new", "--secret", "s3cret"}, req, now, 0, `"valid":true`},
		{"wrong secret", []string{"--secret", "nope"}, req, now, 1, `"reason":"bad_signature"`},
		{"tampered", []string{"--secret", "s3cret"}, strings.Replace(req, "succeeded", "succeedes", 1), now, 1, "bad_signature"},
		{"stale", []string{"--secret", "s3cret"}, req, now.Add(time.Hour), 1, "stale_timestamp"},
		{"event id rewritten", []string{"--secret", "s3cret"}, strings.Replace(req, "Event-Id: evt_9", "Event-Id: evt_8", 1), now, 1, `"reason":"event_id_mismatch"`},
		{"no secret", nil, req, now, 2, ""},
		{"not http", []string{"--secret", "x"}, "garbage", now, 2, ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var out, errb bytes.Buffer
			code := RunVerifyCommand(c.args, strings.NewReader(c.in), &out, &errb, func(string) string { return "s3cret" }, c.at)
			if code != c.code || !strings.Contains(out.String(), c.inOut) {
				t.Fatalf("code %d out %q err %q", code, out.String(), errb.String())
			}
			if strings.Contains(out.String()+errb.String(), "s3cret") {
				t.Fatal("secret printed")
			}
		})
	}
}

// A body past the command's cap is a usage error naming the cap, not a
// bad_signature verdict on the part that was read; one at the cap is
// checked.
func TestRunVerifyCommandBodyCap(t *testing.T) {
	now := time.Unix(1700000000, 0)
	for _, c := range []struct {
		name string
		size int
		code int
	}{
		{"at the cap", maxRequestBody, 0},
		{"over the cap", maxRequestBody + 1, 2},
	} {
		t.Run(c.name, func(t *testing.T) {
			body := `"` + strings.Repeat("a", c.size-2) + `"`
			req := rawRequest(t, now, body, "s3cret")
			var out, errb bytes.Buffer
			code := RunVerifyCommand([]string{"--secret", "s3cret"}, strings.NewReader(req), &out, &errb, nil, now)
			if code != c.code {
				t.Fatalf("code %d, want %d; out %q err %q", code, c.code, out.String(), errb.String())
			}
			if c.code == 2 && (out.Len() != 0 || !strings.Contains(errb.String(), "over 16 MiB")) {
				t.Fatalf("out %q err %q", out.String(), errb.String())
			}
		})
	}
}
