package ssrf

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
	"syscall"
)

// EnvAllowPrivate is the setting that lifts the address checks. serve
// declares it once (flag -webhook-allow-private or this variable) and hands
// the resulting Policy to every role and to the API's URL check, so all
// outbound calls of a process follow the same policy.
const EnvAllowPrivate = "EUTERPE_WEBHOOK_ALLOW_PRIVATE"

// ErrRefused is matched with errors.Is for every refused URL or address.
var ErrRefused = errors.New("outbound address refused")

// Hint tells an operator how a refused address can be allowed. It belongs
// in logs only: requesters see the refusal, never the server's settings.
const Hint = "set " + EnvAllowPrivate + "=true only for development"

// RefusedError says which URL host or address was refused and why. It never
// carries the URL's path, query or userinfo, which may hold secrets, nor
// Hint, since its text can reach requesters (a 400, a job's error).
type RefusedError struct {
	Host   string
	Reason string
}

func (e *RefusedError) Error() string {
	return fmt.Sprintf("refused outbound address %s: %s", e.Host, e.Reason)
}

// Is makes errors.Is(err, ErrRefused) true.
func (e *RefusedError) Is(target error) bool { return target == ErrRefused }

// Policy is the outbound address policy.
type Policy struct {
	// AllowPrivate permits loopback, private, link-local and the other
	// internal ranges (development and tests). Scheme checks still apply.
	AllowPrivate bool
}

// internalNames are host names that always mean "inside".
var internalNames = []string{"localhost", "metadata.google.internal", "metadata", "instance-data"}

// CheckURL validates a webhook or refresh URL at enqueue time without
// resolving it: absolute http(s), a host, and — unless AllowPrivate — no IP
// literal in a refused range, no localhost or metadata name, and no numeric
// host in a non-canonical form (2130706433, 0x7f.1, 017.0.0.1) that some
// resolvers read as an address. Errors are *url.Error-free and safe to
// return to the client.
func (p Policy) CheckURL(raw string) error {
	u, err := url.Parse(raw)
	if err != nil {
		return errors.New("not a valid URL")
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return errors.New("scheme must be http or https")
	}
	host := u.Hostname()
	if host == "" {
		return errors.New("URL has no host")
	}
	if u.Port() != "" {
		if n, err := strconv.Atoi(u.Port()); err != nil || n < 1 || n > 65535 {
			return errors.New("URL port must be 1-65535")
		}
	}
	if p.AllowPrivate {
		return nil
	}
	if ip, err := netip.ParseAddr(host); err == nil {
		if r := Reason(ip); r != "" {
			return &RefusedError{Host: host, Reason: r}
		}
		return nil
	}
	name := strings.TrimSuffix(strings.ToLower(host), ".")
	for _, n := range internalNames {
		if name == n || strings.HasSuffix(name, "."+n) && n == "localhost" {
			return &RefusedError{Host: host, Reason: "internal host name"}
		}
	}
	if numericLooking(name) {
		return &RefusedError{Host: host, Reason: "numeric host in a non-canonical form"}
	}
	return nil
}

// numericLooking reports names whose labels are all numbers (decimal, octal
// or hex): not valid DNS names, and read as IPv4 addresses by inet_aton.
func numericLooking(name string) bool {
	for _, l := range strings.Split(name, ".") {
		if l == "" {
			return false
		}
		s := strings.TrimPrefix(l, "0x")
		if s == "" {
			return false
		}
		for _, c := range s {
			if !(c >= '0' && c <= '9' || l != s && (c >= 'a' && c <= 'f')) {
				return false
			}
		}
	}
	return true
}

// CheckAddr checks an address the dialer is about to connect to ("ip:port").
func (p Policy) CheckAddr(address string) error {
	if p.AllowPrivate {
		return nil
	}
	ap, err := netip.ParseAddrPort(address)
	if err != nil {
		host, _, splitErr := net.SplitHostPort(address)
		if splitErr != nil {
			host = address
		}
		ip, perr := netip.ParseAddr(host)
		if perr != nil {
			return &RefusedError{Host: host, Reason: "not an IP address at dial time"}
		}
		ap = netip.AddrPortFrom(ip, 0)
	}
	if r := Reason(ap.Addr()); r != "" {
		return &RefusedError{Host: ap.Addr().String(), Reason: r}
	}
	return nil
}

// Control is a net.Dialer Control hook enforcing the policy on the resolved
// address of every connection attempt (each Happy Eyeballs candidate too).
func (p Policy) Control(network, address string, _ syscall.RawConn) error {
	if network != "tcp4" && network != "tcp6" && network != "tcp" {
		return &RefusedError{Host: address, Reason: "network " + network + " not allowed"}
	}
	return p.CheckAddr(address)
}
