package daemon

import (
	"net/url"
	"strings"
)

// MinPathSecret is the shortest URL path segment ShownURL takes for a
// token. Capability URLs (Slack's /services/T…/B…/<24 characters>,
// Discord's /webhooks/<id>/<68 characters>, function keys in a path) carry
// their secret there; route names ("webhooks", "euterpe-callbacks") are
// shorter, or harmless to blank.
const MinPathSecret = 16

// ShownURL is an endpoint URL as a stored message, a log line or a page
// shows it: scheme, host and path, with every path segment of
// MinPathSecret or more characters replaced by [REDACTED]. Its user info,
// query and fragment, where passwords, signatures and keys ride, are
// dropped. It is "" for a URL that does not parse or has no host.
func ShownURL(raw string) string {
	u, err := url.Parse(raw)
	if err != nil || u.Host == "" {
		return ""
	}
	segs := strings.Split(u.EscapedPath(), "/")
	for i, seg := range segs {
		if len(seg) >= MinPathSecret {
			segs[i] = "[REDACTED]"
		}
	}
	return (&url.URL{Scheme: u.Scheme, Host: u.Host}).String() + strings.Join(segs, "/")
}
