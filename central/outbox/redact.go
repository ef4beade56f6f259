package outbox

import (
	"cmp"
	"html"
	"io"
	"net/url"
	"slices"
	"strings"

	"github.com/vesta-cx/euterpe/daemon"
)

// redacted stands in for a secret part of the webhook URL in a stored
// error or a log line.
const redacted = "[REDACTED]"

// minSecretPart is the shortest query value or password redacted on its
// own: shorter ones ("1", "json") would blank ordinary words of an error
// page, and the composite forms around them are redacted anyway.
const minSecretPart = 8

// errorSnippet reads the start of a refused delivery's response body for
// last_error and the logs. Receivers often echo the request URI in an error
// page ("no route for /hook?token=…"), and the URL's query, userinfo or a
// long path segment (daemon.MinPathSecret) may carry a token, so every
// form of those parts is redacted before the text is capped: a cap first
// could leave half a token behind.
func errorSnippet(body io.Reader, rawURL string) string {
	secrets := urlSecrets(rawURL)
	window := int64(daemon.MaxMessage)
	if len(secrets) > 0 {
		window += int64(len(secrets[0])) // the longest: any occurrence starting within the cap is read whole
	}
	b, _ := io.ReadAll(io.LimitReader(body, window))
	s := string(b)
	for _, sec := range secrets {
		s = strings.ReplaceAll(s, sec, redacted)
	}
	if int64(len(b)) == window {
		// The body goes on: a secret cut by the window is only partly here.
		s = trimPartial(s, secrets)
	}
	return strings.TrimSpace(s)
}

// urlSecrets lists the parts of a webhook URL that must never be stored or
// logged, in the forms a receiver may echo them, longest first so a
// composite is replaced before its pieces.
func urlSecrets(rawURL string) []string {
	var out []string
	add := func(s string, min int) {
		if len(s) < max(min, 1) {
			return
		}
		out = append(out, s, html.EscapeString(s), url.QueryEscape(s), url.PathEscape(s))
	}
	add(rawURL, 0)
	u, err := url.Parse(rawURL)
	if err != nil {
		return longestFirst(out)
	}
	add(u.String(), 0)
	if u.User != nil {
		add(u.User.String(), 0)
		if pw, ok := u.User.Password(); ok {
			add(pw, minSecretPart)
		}
	}
	if segs := pathSecrets(u); len(segs) > 0 {
		add(u.EscapedPath(), 0)
		add(u.Path, 0)
		for _, seg := range segs {
			add(seg, 0)
		}
	}
	if u.RawQuery != "" {
		add(u.RawQuery, 0)
		if q, err := url.QueryUnescape(u.RawQuery); err == nil {
			add(q, 0)
		}
		vals, _ := url.ParseQuery(u.RawQuery)
		for _, vs := range vals {
			for _, v := range vs {
				add(v, minSecretPart)
			}
		}
	}
	return longestFirst(out)
}

// pathSecrets lists the URL's path segments long enough to be a token, in
// escaped and decoded form.
func pathSecrets(u *url.URL) []string {
	var out []string
	for _, seg := range strings.Split(u.EscapedPath(), "/") {
		if len(seg) < daemon.MinPathSecret {
			continue
		}
		out = append(out, seg)
		if dec, err := url.PathUnescape(seg); err == nil && dec != seg {
			out = append(out, dec)
		}
	}
	return out
}

func longestFirst(ss []string) []string {
	slices.SortFunc(ss, func(a, b string) int { return cmp.Compare(len(b), len(a)) })
	return slices.Compact(ss)
}

// trimPartial drops a tail of s that is the start of a secret.
func trimPartial(s string, secrets []string) string {
	for changed := true; changed; {
		changed = false
		for _, sec := range secrets {
			for k := min(len(sec)-1, len(s)); k > 0; k-- {
				if s[len(s)-k] == sec[0] && strings.HasSuffix(s, sec[:k]) {
					s, changed = s[:len(s)-k], true
					break
				}
			}
		}
	}
	return s
}
