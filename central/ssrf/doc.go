// Package ssrf keeps central's outbound calls — status webhooks and
// credential-refresh requests to requester URLs — from reaching the inside of
// the cluster: loopback, private (RFC 1918, IPv6 ULA), link-local (with the
// 169.254.169.254 cloud metadata service), CGNAT, unspecified, multicast and
// reserved addresses, including IPv4 addresses hidden in IPv6 forms
// (IPv4-mapped, NAT64, 6to4).
//
// A URL is checked twice. CheckURL runs when a job is enqueued and looks only
// at the URL (scheme, IP literals, obviously internal names), so a bad URL is
// a 400 at once. The client from NewClient checks again at send time: it
// resolves the name itself, connects only to the allowed addresses (a name
// counts as refused only when all of its addresses are internal), and the
// dialer's Control hook checks each address once more as it connects; a name
// that resolves, or rebinds, to an internal address is refused there. Policy.AllowPrivate (EUTERPE_WEBHOOK_ALLOW_PRIVATE)
// lifts the address checks for development and tests on loopback. A process
// has one Policy: serve builds it from its settings (serve.Deps.Policy) and
// the API, the dispatcher and the runner (storage and refresh calls) all use
// it.
package ssrf
