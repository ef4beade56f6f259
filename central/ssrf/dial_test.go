package ssrf

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"
)

// fakeResolver answers every name from a fixed table.
type fakeResolver map[string][]string

func (r fakeResolver) LookupNetIP(_ context.Context, _, host string) ([]netip.Addr, error) {
	addrs, ok := r[host]
	if !ok {
		return nil, &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}
	}
	var out []netip.Addr
	for _, a := range addrs {
		out = append(out, netip.MustParseAddr(a))
	}
	return out, nil
}

// TestDialSkipsRefusedAddresses: a name whose answer mixes internal and
// public addresses is connected on the public ones only, in the order
// resolved. While they are down the dial fails as a network error (the
// caller retries), not as a refusal (final: a webhook event would be
// dead-lettered); a refusal is returned only when every address is
// internal. Nothing refused is ever dialled.
func TestDialSkipsRefusedAddresses(t *testing.T) {
	res := fakeResolver{
		"mixed.example":    {"10.0.0.5", "8.8.8.8"},
		"mapped.example":   {"::ffff:10.0.0.1", "2606:4700:4700::1111"},
		"two.example":      {"8.8.8.8", "1.1.1.1"},
		"internal.example": {"10.0.0.5", "127.0.0.1", "::ffff:169.254.169.254"},
		"empty.example":    {},
	}
	cases := []struct {
		name    string
		address string
		up      []string // addresses that accept a connection
		dialled []string
		refused bool // ErrRefused
		failed  bool // another error
	}{
		{name: "public address down", address: "mixed.example:443",
			dialled: []string{"8.8.8.8:443"}, failed: true},
		{name: "public address up", address: "mixed.example:443", up: []string{"8.8.8.8:443"},
			dialled: []string{"8.8.8.8:443"}},
		{name: "mapped internal address", address: "mapped.example:80", up: []string{"[2606:4700:4700::1111]:80"},
			dialled: []string{"[2606:4700:4700::1111]:80"}},
		{name: "next public address", address: "two.example:443", up: []string{"1.1.1.1:443"},
			dialled: []string{"8.8.8.8:443", "1.1.1.1:443"}},
		{name: "all public addresses down", address: "two.example:443",
			dialled: []string{"8.8.8.8:443", "1.1.1.1:443"}, failed: true},
		{name: "only internal addresses", address: "internal.example:443", refused: true},
		{name: "internal literal", address: "127.0.0.1:443", refused: true},
		{name: "public literal", address: "8.8.8.8:443", up: []string{"8.8.8.8:443"}, dialled: []string{"8.8.8.8:443"}},
		{name: "unknown name", address: "nowhere.example:443", failed: true},
		{name: "no address", address: "empty.example:443", failed: true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			d := newDialer(Policy{}, res)
			var dialled []string
			d.dial = func(ctx context.Context, network, address string) (net.Conn, error) {
				if _, ok := ctx.Deadline(); !ok {
					t.Errorf("%s dialled without a deadline", address)
				}
				dialled = append(dialled, address)
				if slices.Contains(tc.up, address) {
					c, s := net.Pipe()
					s.Close()
					return c, nil
				}
				return nil, &net.OpError{Op: "dial", Net: network, Err: syscall.ECONNREFUSED}
			}
			conn, err := d.DialContext(context.Background(), "tcp", tc.address)
			if conn != nil {
				conn.Close()
			}
			switch {
			case tc.refused && !errors.Is(err, ErrRefused):
				t.Fatalf("want a refusal, got %v", err)
			case tc.failed && (err == nil || errors.Is(err, ErrRefused)):
				t.Fatalf("want a network error, not a refusal; got %v", err)
			case !tc.refused && !tc.failed && err != nil:
				t.Fatalf("want a connection, got %v", err)
			}
			if !slices.Equal(dialled, tc.dialled) {
				t.Fatalf("dialled %v, want %v", dialled, tc.dialled)
			}
		})
	}
}

// TestClientDialChecksAtConnectTime: the client takes its addresses from the
// resolver it is given, and the dial of each one still goes through Control:
// an internal address that got past the filter is refused when connecting.
func TestClientDialChecksAtConnectTime(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusNoContent)
	}))
	defer srv.Close()
	port := srv.URL[strings.LastIndex(srv.URL, ":")+1:]
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()

	c := Policy{}.NewClient(ClientOptions{Timeout: 2 * time.Second,
		resolver: fakeResolver{"hooks.example": {"10.0.0.5", "127.0.0.1"}}})
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, "http://hooks.example:"+port+"/", nil)
	resp, err := c.Do(req)
	if err == nil {
		resp.Body.Close()
		t.Fatal("request reached a loopback receiver")
	}
	if !errors.Is(err, ErrRefused) {
		t.Fatalf("want ErrRefused, got %v", err)
	}

	conn, err := newDialer(Policy{}, nil).dial(ctx, "tcp", srv.Listener.Addr().String())
	if err == nil {
		conn.Close()
		t.Fatal("the dial of one address does not check it")
	}
	if !errors.Is(err, ErrRefused) {
		t.Fatalf("want ErrRefused, got %v", err)
	}
}
