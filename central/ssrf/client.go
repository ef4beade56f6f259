package ssrf

import (
	"context"
	"net"
	"net/http"
	"time"
)

// ClientOptions shape the outbound HTTP client.
type ClientOptions struct {
	// Timeout bounds a whole request, response body included.
	Timeout time.Duration
	// MaxConnsPerHost bounds parallel connections to one receiver; it is
	// also the idle pool size per host. 0 means 64.
	MaxConnsPerHost int
	// resolver replaces the system resolver (tests).
	resolver resolver
}

// NewClient returns an HTTP client that enforces the policy after DNS
// resolution (connecting only to the allowed addresses of a name), ignores
// proxy environment variables (a proxy would hide the real destination
// from the check), and never follows redirects: a 3xx is returned to the
// caller as it is, since a redirect could point anywhere.
func (p Policy) NewClient(o ClientOptions) *http.Client {
	if o.MaxConnsPerHost <= 0 {
		o.MaxConnsPerHost = 64
	}
	tr := &http.Transport{
		Proxy:                 nil,
		DialContext:           newDialer(p, o.resolver).DialContext,
		ForceAttemptHTTP2:     true,
		MaxIdleConns:          1024,
		MaxIdleConnsPerHost:   o.MaxConnsPerHost,
		MaxConnsPerHost:       o.MaxConnsPerHost,
		IdleConnTimeout:       90 * time.Second,
		TLSHandshakeTimeout:   10 * time.Second,
		ExpectContinueTimeout: time.Second,
		ResponseHeaderTimeout: o.Timeout,
	}
	return &http.Client{
		Transport: tr,
		Timeout:   o.Timeout,
		CheckRedirect: func(*http.Request, []*http.Request) error {
			return http.ErrUseLastResponse
		},
	}
}

// DialContext connects to address (host:port) as the policy allows, with
// the dialer NewClient's clients use, for transports built elsewhere (the
// storage client's). The signature is http.Transport.DialContext's.
func (p Policy) DialContext(ctx context.Context, network, address string) (net.Conn, error) {
	return newDialer(p, nil).DialContext(ctx, network, address)
}
