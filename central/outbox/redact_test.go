package outbox

import (
	"strings"
	"testing"
)

func TestErrorSnippetRedactsURLSecrets(t *testing.T) {
	const (
		token = "tok_9f2c41d7e8b35a60"
		hook  = "https://hooks.example/hook?token=" + token + "&scope=a%2Fb"
	)
	cases := []struct {
		name, url, body, want string
	}{
		{"no secrets", "https://hooks.example/hook", "no route for /hook", "no route for /hook"},
		{"request URI", hook, "no route for /hook?token=" + token + "&scope=a%2Fb", "no route for /hook?[REDACTED]"},
		{"full URL", hook, "POST " + hook + " failed", "POST [REDACTED] failed"},
		{"decoded query", hook, "bad token=" + token + "&scope=a/b", "bad [REDACTED]"},
		{"value alone", hook, "token " + token + " revoked", "token [REDACTED] revoked"},
		{"HTML-escaped query", hook, "<p>token=" + token + "&amp;scope=a%2Fb</p>", "<p>[REDACTED]</p>"},
		{"short value kept", "https://h.example/x?v=1", "v=1 unknown; v 1 ok", "[REDACTED] unknown; v 1 ok"},
		{"path token", "https://hooks.example/services/T0AB12CD/" + token, "no route for /services/T0AB12CD/" + token + " here",
			"no route for [REDACTED] here"},
		{"path token alone", "https://hooks.example/api/webhooks/123/" + token, "token " + token + " revoked; see /api/docs",
			"token [REDACTED] revoked; see /api/docs"},
		{"escaped path token", "https://hooks.example/h/" + token + "%2Bx", "bad " + token + "+x and " + token + "%2Bx",
			"bad [REDACTED] and [REDACTED]"},
		{"short segments kept", "https://hooks.example/api/webhooks/euterpe", "no route for /api/webhooks/euterpe",
			"no route for /api/webhooks/euterpe"},
		{"userinfo", "https://hookuser:pw_" + token + "@h.example/x", "auth hookuser:pw_" + token + " refused; pw_" + token,
			"auth [REDACTED] refused; [REDACTED]"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got := errorSnippet(strings.NewReader(tc.body), tc.url)
			if got != tc.want {
				t.Fatalf("got  %q\nwant %q", got, tc.want)
			}
			if strings.Contains(got, token[:6]) {
				t.Fatalf("token part in %q", got)
			}
		})
	}
}

// A long URL redacted early pulls whatever follows it inside the cap, so a
// token cut by the read window must not survive as a fragment, wherever the
// cut falls.
func TestErrorSnippetDropsTokenCutByWindow(t *testing.T) {
	const token = "tok_9f2c41d7e8b35a60"
	long := "https://hooks.example/" + strings.Repeat("p", 300) + "?token=" + token
	for n := range 1500 {
		body := long + " " + strings.Repeat("x", n) + " token=" + token + " tail"
		got := errorSnippet(strings.NewReader(body), long)
		if strings.Contains(got, "tok_") {
			t.Fatalf("padding %d: token fragment in %q", n, got)
		}
	}
}
