package daemon_test

import (
	"testing"

	"github.com/vesta-cx/euterpe/daemon"
)

func TestShownURLHidesSecrets(t *testing.T) {
	const token = "tok_9f2c41d7e8b35a60"
	cases := []struct{ url, want string }{
		{"https://hooks.example/api/webhooks/euterpe", "https://hooks.example/api/webhooks/euterpe"},
		{"https://hooks.example/hook?token=" + token, "https://hooks.example/hook"},
		{"https://user:" + token + "@hooks.example/hook", "https://hooks.example/hook"},
		{"https://hooks.example/services/T0AB12CD/" + token, "https://hooks.example/services/T0AB12CD/[REDACTED]"},
		{"https://hooks.example/a%2Fb/" + token + "/x#frag", "https://hooks.example/a%2Fb/[REDACTED]/x"},
		{"http://[::1]:8080/run", "http://[::1]:8080/run"},
		{"https://fn.example", "https://fn.example"},
		{"not a url", ""},
		{"http://%zz/", ""},
	}
	for _, tc := range cases {
		if got := daemon.ShownURL(tc.url); got != tc.want {
			t.Errorf("ShownURL(%q) = %q, want %q", tc.url, got, tc.want)
		}
	}
}
