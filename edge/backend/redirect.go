package backend

import (
	"net/http"

	"github.com/vesta-cx/euterpe/daemon"
)

// noRedirects returns a copy of c (a new client when c is nil) that never
// follows a redirect. Followed, a 301, 302 or 303 turns the job's POST into
// a GET without its body, whose answer could end the job done with what
// another endpoint returned; a 307 or 308 resends the payload, and the LLM's
// bearer key, to wherever Location points. Unfollowed, a 3xx is one more
// answer that is not 2xx: a backend_error naming where it pointed.
func noRedirects(c *http.Client) *http.Client {
	var nc http.Client
	if c != nil {
		nc = *c
	}
	nc.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	return &nc
}

// redirectMessage describes a 3xx answer for the job's error: where it
// pointed, resolved against the request's URL so that its user info and
// secret-looking query parameters are hidden (daemon.RedactURL sees only
// absolute URLs), and what the request carried redacted. "" when the
// answer names no location.
func redirectMessage(resp *http.Response, what string, secrets ...string) string {
	loc := resp.Header.Get("Location")
	if loc == "" {
		return ""
	}
	if u, err := resp.Location(); err == nil {
		loc = u.String()
	}
	loc = redactSecret(daemon.RedactURL(loc), secrets...)
	return what + ": the backend answered a redirect to " + loc +
		" (redirects are not followed: configure the URL it points to)"
}
