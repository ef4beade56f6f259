package console

import (
	"fmt"
	"net"
	"net/http"
	"net/url"
	"strings"

	"github.com/labstack/echo/v4"

	"github.com/vesta-cx/euterpe/daemon"
)

// probePaths answer whatever the Host: a load balancer or Prometheus may
// name the daemon by an alias, and these pages act on nothing.
var probePaths = map[string]bool{"/healthz": true, "/ready": true, "/metrics": true}

// KnownHosts refuses, with 421 Misdirected Request, a request whose Host is
// a name this daemon does not answer to. A daemon without sign-in (the
// edge) is otherwise open to DNS rebinding: a page on attacker.example
// points its name at 127.0.0.1, and the browser then treats the daemon as
// that page's own origin — same-origin requests CrossOrigin lets through,
// and responses the page may read. Rebinding needs a name the attacker
// controls, so a Host that is an IP address passes, as do localhost (and
// *.localhost, which browsers resolve to loopback themselves), this
// machine's host name (and <name>.local), and the hosts of trusted, the
// origins a proxy or another name in front of the daemon uses.
func KnownHosts(trusted []string, hostname string) (echo.MiddlewareFunc, error) {
	return knownHosts(trusted, hostname)
}

// KnownHostsList is KnownHosts for a setting's comma-separated list of
// origins, as CrossOriginList takes it.
func KnownHostsList(list, hostname string) (echo.MiddlewareFunc, error) {
	return knownHosts(splitOrigins(list), hostname)
}

func knownHosts(trusted []string, hostname string) (echo.MiddlewareFunc, error) {
	names := map[string]bool{}
	if h := normalHost(hostname); h != "" {
		names[h], names[h+".local"] = true, true
	}
	for _, o := range trusted {
		u, err := url.Parse(o)
		if err != nil || u.Host == "" {
			return nil, fmt.Errorf("trusted origin %q: want scheme://host[:port]", o)
		}
		names[normalHost(u.Hostname())] = true
	}
	return func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c echo.Context) error {
			r := c.Request()
			if probePaths[r.URL.Path] || knownHost(r.Host, names) {
				return next(c)
			}
			return daemon.Errorf(http.StatusMisdirectedRequest, "unknown_host",
				"this daemon does not answer to that host name; add its origin to EUTERPE_TRUSTED_ORIGINS")
		}
	}, nil
}

func knownHost(hostport string, names map[string]bool) bool {
	h := hostport
	if host, _, err := net.SplitHostPort(hostport); err == nil {
		h = host
	}
	h = normalHost(strings.TrimSuffix(strings.TrimPrefix(h, "["), "]"))
	switch {
	case h == "":
		return false
	case net.ParseIP(h) != nil, h == "localhost", strings.HasSuffix(h, ".localhost"):
		return true
	}
	return names[h]
}

func normalHost(h string) string { return strings.TrimSuffix(strings.ToLower(h), ".") }
