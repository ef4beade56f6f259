package ssrf

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"time"
)

// resolver is the part of *net.Resolver the dialer uses.
type resolver interface {
	LookupNetIP(ctx context.Context, network, host string) ([]netip.Addr, error)
}

// dialer resolves a name itself and connects only to the addresses the
// policy allows. net.Dialer alone would also refuse internal addresses (in
// Control) but, trying the candidates in turn, it reports the first error:
// with an answer like [10.0.0.5, a public address] and the public address
// briefly down, that is the refusal, and a refusal is final for the caller
// (the event is dead-lettered) where the outage deserves a retry. Here a
// refusal is returned only when no allowed address is left; otherwise the
// error of the first allowed address tried is, as net.Dialer would.
type dialer struct {
	policy   Policy
	resolver resolver
	timeout  time.Duration // all addresses of one dial together
	// dial connects to one "ip:port"; Control checks that address again at
	// connect time, so nothing reaches the network unchecked even if the
	// filter below were bypassed.
	dial func(ctx context.Context, network, address string) (net.Conn, error)
}

func newDialer(p Policy, r resolver) *dialer {
	if r == nil {
		r = net.DefaultResolver
	}
	const timeout = 10 * time.Second
	nd := &net.Dialer{Timeout: timeout, KeepAlive: 30 * time.Second, Control: p.Control}
	return &dialer{policy: p, resolver: r, timeout: timeout, dial: nd.DialContext}
}

// DialContext has the signature http.Transport.DialContext expects.
func (d *dialer) DialContext(ctx context.Context, network, address string) (net.Conn, error) {
	if d.policy.AllowPrivate {
		return d.dial(ctx, network, address)
	}
	lookup := map[string]string{"tcp": "ip", "tcp4": "ip4", "tcp6": "ip6"}[network]
	if lookup == "" {
		return nil, &RefusedError{Host: address, Reason: "network " + network + " not allowed"}
	}
	host, port, err := net.SplitHostPort(address)
	if err != nil {
		return nil, &net.OpError{Op: "dial", Net: network, Err: err}
	}
	ctx, cancel := context.WithTimeout(ctx, d.timeout)
	defer cancel()
	addrs, err := d.addrs(ctx, lookup, host)
	if err != nil {
		return nil, &net.OpError{Op: "dial", Net: network, Err: err}
	}
	var allowed []netip.Addr
	var refused error
	for _, a := range addrs {
		a = a.Unmap()
		if r := Reason(a); r != "" {
			if refused == nil {
				refused = &RefusedError{Host: a.String(), Reason: r}
			}
			continue
		}
		allowed = append(allowed, a)
	}
	if len(allowed) == 0 {
		return nil, refused
	}
	var first error
	for i, a := range allowed {
		// Like net.Dialer, give each remaining address an equal share of
		// the time left, so one address that swallows packets cannot use up
		// the whole dial.
		actx, acancel := context.WithDeadline(ctx, shareOf(ctx, len(allowed)-i))
		conn, err := d.dial(actx, network, net.JoinHostPort(a.String(), port))
		acancel()
		if err == nil {
			return conn, nil
		}
		if first == nil {
			first = err
		}
		if ctx.Err() != nil {
			break
		}
	}
	return nil, first
}

// addrs is host itself when it is an address, else what it resolves to.
// Errors are *net.DNSError, as from net.Dialer, so callers that name the
// failure ("no such host") see the same text.
func (d *dialer) addrs(ctx context.Context, network, host string) ([]netip.Addr, error) {
	if a, err := netip.ParseAddr(host); err == nil {
		return []netip.Addr{a}, nil
	}
	addrs, err := d.resolver.LookupNetIP(ctx, network, host)
	var dnsErr *net.DNSError
	switch {
	case err != nil && errors.As(err, &dnsErr):
		return nil, err
	case err != nil:
		return nil, &net.DNSError{Err: err.Error(), Name: host}
	case len(addrs) == 0:
		return nil, &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}
	}
	return addrs, nil
}

// shareOf is the deadline for one of n addresses still to try: an equal
// part of the time ctx has left, but at least two seconds when it has them.
func shareOf(ctx context.Context, n int) time.Time {
	deadline, _ := ctx.Deadline() // DialContext always sets one
	left := time.Until(deadline)
	share := left / time.Duration(n)
	if share < 2*time.Second {
		share = min(2*time.Second, left)
	}
	return time.Now().Add(share)
}
