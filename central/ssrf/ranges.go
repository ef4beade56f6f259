package ssrf

import "net/netip"

// blockedRange is one refused address block and why, as data.
type blockedRange struct {
	prefix netip.Prefix
	reason string
}

var blocked = func() []blockedRange {
	rows := []struct{ cidr, reason string }{
		{"0.0.0.0/8", "unspecified (this network)"},
		{"10.0.0.0/8", "private (RFC 1918)"},
		{"100.64.0.0/10", "carrier-grade NAT (RFC 6598)"},
		{"127.0.0.0/8", "loopback"},
		{"169.254.0.0/16", "link-local (cloud metadata)"},
		{"172.16.0.0/12", "private (RFC 1918)"},
		{"192.0.0.0/24", "IETF protocol assignments"},
		{"192.0.2.0/24", "documentation (RFC 5737)"},
		{"192.88.99.0/24", "6to4 relay anycast (deprecated)"},
		{"192.168.0.0/16", "private (RFC 1918)"},
		{"198.18.0.0/15", "benchmarking (RFC 2544)"},
		{"198.51.100.0/24", "documentation (RFC 5737)"},
		{"203.0.113.0/24", "documentation (RFC 5737)"},
		{"224.0.0.0/4", "multicast"},
		{"240.0.0.0/4", "reserved"},
		{"::/128", "unspecified"},
		{"::1/128", "loopback"},
		{"::/96", "IPv4-compatible (deprecated)"},
		{"100::/64", "discard-only"},
		// Local-use NAT64 (RFC 8215) reaches whatever IPv4 network the
		// local translator serves; it is never a public destination.
		{"64:ff9b:1::/48", "local-use NAT64 (RFC 8215)"},
		// Teredo tunnels to the IPv4 address and port its last 48 bits
		// hide; a host with a Teredo interface would send there.
		{"2001::/32", "Teredo (RFC 4380)"},
		{"2001:2::/48", "benchmarking (RFC 5180)"},
		{"2001:db8::/32", "documentation (RFC 3849)"},
		{"3fff::/20", "documentation (RFC 9637)"},
		{"fc00::/7", "private (unique local)"},
		{"fe80::/10", "link-local"},
		{"fec0::/10", "site-local (deprecated)"},
		{"ff00::/8", "multicast"},
	}
	out := make([]blockedRange, len(rows))
	for i, r := range rows {
		out[i] = blockedRange{netip.MustParsePrefix(r.cidr), r.reason}
	}
	return out
}()

// embedded are the IPv6 forms that carry an IPv4 address which must itself
// be checked, as data: where the address sits and what to call the form.
var embedded = []struct {
	prefix netip.Prefix
	at     int // offset of the IPv4 address in the 16 bytes
	via    string
}{
	{netip.MustParsePrefix("64:ff9b::/96"), 12, "NAT64"},
	{netip.MustParsePrefix("::ffff:0:0:0/96"), 12, "IPv4 translation"}, // SIIT (RFC 2765)
	{netip.MustParsePrefix("2002::/16"), 2, "6to4"},
}

// Reason returns why ip is refused, or "" when it is a public address.
// IPv4-mapped, NAT64, IPv4-translated (SIIT) and 6to4 addresses are judged
// by the IPv4 address they embed.
func Reason(ip netip.Addr) string {
	if !ip.IsValid() {
		return "invalid address"
	}
	ip = ip.WithZone("")
	if ip.Is4In6() {
		return Reason(ip.Unmap())
	}
	b := ip.As16()
	for _, e := range embedded {
		if e.prefix.Contains(ip) {
			if r := Reason(netip.AddrFrom4([4]byte(b[e.at : e.at+4]))); r != "" {
				return r + " via " + e.via
			}
		}
	}
	for _, r := range blocked {
		if r.prefix.Contains(ip) {
			return r.reason
		}
	}
	if ip == netip.AddrFrom4([4]byte{255, 255, 255, 255}) {
		return "broadcast"
	}
	return ""
}
