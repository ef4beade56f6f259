package ssrf

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"testing"
	"time"
)

func TestReason(t *testing.T) {
	cases := []struct {
		ip      string
		refused bool
	}{
		{"127.0.0.1", true}, {"127.8.9.10", true}, {"10.1.2.3", true}, {"172.16.0.1", true},
		{"172.31.255.255", true}, {"192.168.1.1", true}, {"169.254.169.254", true}, {"100.64.0.1", true},
		{"0.0.0.0", true}, {"224.0.0.1", true}, {"255.255.255.255", true}, {"240.0.0.1", true},
		{"::1", true}, {"::", true}, {"fd00:ec2::254", true}, {"fc00::1", true}, {"fe80::1", true},
		{"fe80::1%eth0", true}, {"ff02::1", true},
		{"::ffff:127.0.0.1", true}, {"::ffff:169.254.169.254", true}, {"::ffff:10.0.0.1", true},
		{"64:ff9b::7f00:1", true}, {"2002:7f00:1::", true}, {"::127.0.0.1", true},
		{"64:ff9b:1::7f00:1", true}, {"64:ff9b:1:ffff::808:808", true}, {"::ffff:0:7f00:1", true}, {"::ffff:0:a9fe:a9fe", true},
		{"8.8.8.8", false}, {"1.1.1.1", false}, {"172.32.0.1", false}, {"100.128.0.1", false},
		{"2606:4700:4700::1111", false}, {"::ffff:8.8.8.8", false}, {"64:ff9b::808:808", false},
		{"::ffff:0:808:808", false},
		{"2001:0:4136:e378:8000:63bf:f5ff:fffe", true}, {"2001:db8::1", true}, {"3fff::1", true}, {"2001:2::1", true},
		{"192.0.2.1", true}, {"198.51.100.7", true}, {"203.0.113.9", true}, {"192.88.99.1", true},
		{"2001:4860:4860::8888", false}, {"2001:1::1", false}, {"192.0.3.1", false},
	}
	for _, c := range cases {
		t.Run(c.ip, func(t *testing.T) {
			r := Reason(netip.MustParseAddr(c.ip))
			if (r != "") != c.refused {
				t.Fatalf("Reason(%s) = %q, refused want %v", c.ip, r, c.refused)
			}
		})
	}
}

func TestCheckURL(t *testing.T) {
	cases := []struct {
		url     string
		refused bool // ErrRefused
		bad     bool // other error
	}{
		{url: "https://hooks.example.com/euterpe"},
		{url: "http://8.8.8.8:8080/x"},
		{url: "https://[2606:4700:4700::1111]/"},
		{url: "http://127.0.0.1:9000/", refused: true},
		{url: "http://localhost/", refused: true},
		{url: "http://LOCALHOST./", refused: true},
		{url: "http://api.localhost/", refused: true},
		{url: "http://169.254.169.254/latest/meta-data/", refused: true},
		{url: "http://metadata.google.internal/computeMetadata/v1/", refused: true},
		{url: "http://[::1]/", refused: true},
		{url: "http://[::ffff:127.0.0.1]/", refused: true},
		{url: "http://[fe80::1%25eth0]/", refused: true},
		{url: "http://10.0.0.5/hook", refused: true},
		{url: "http://2130706433/", refused: true},
		{url: "http://0x7f.1/", refused: true},
		{url: "http://017.0.0.1/", refused: true},
		{url: "http://0.0.0.0:80/", refused: true},
		{url: "ftp://example.com/", bad: true},
		{url: "/relative", bad: true},
		{url: "http:///nohost", bad: true},
		{url: "http://example.com:99999/", bad: true},
		{url: "::not a url", bad: true},
	}
	for _, c := range cases {
		t.Run(c.url, func(t *testing.T) {
			err := Policy{}.CheckURL(c.url)
			switch {
			case c.refused && !errors.Is(err, ErrRefused):
				t.Fatalf("want refused, got %v", err)
			case c.bad && (err == nil || errors.Is(err, ErrRefused)):
				t.Fatalf("want invalid, got %v", err)
			case !c.refused && !c.bad && err != nil:
				t.Fatalf("want ok, got %v", err)
			}
			if err != nil && strings.Contains(err.Error(), "meta-data") {
				t.Fatalf("error leaks the path: %v", err)
			}
		})
	}
	if err := (Policy{AllowPrivate: true}).CheckURL("http://127.0.0.1:1/"); err != nil {
		t.Fatalf("allow private: %v", err)
	}
	if err := (Policy{AllowPrivate: true}).CheckURL("gopher://127.0.0.1/"); err == nil {
		t.Fatal("allow private still checks the scheme")
	}
}

// The client checks the address after resolution: "localhost" passes no
// syntactic check here (the request is built directly) but resolves to
// loopback and is refused by the dialer, the same path a rebinding name takes.
func TestClientRefusesAfterResolution(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/redirect" {
			http.Redirect(w, r, "/final", http.StatusFound)
			return
		}
		w.WriteHeader(http.StatusNoContent)
	}))
	defer srv.Close()
	port := srv.URL[strings.LastIndex(srv.URL, ":")+1:]
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()

	guarded := Policy{}.NewClient(ClientOptions{Timeout: 2 * time.Second})
	for _, u := range []string{"http://localhost:" + port + "/", srv.URL + "/"} {
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, u, nil)
		resp, err := guarded.Do(req)
		if err == nil {
			resp.Body.Close()
			t.Fatalf("%s: request reached a loopback receiver", u)
		}
		if !errors.Is(err, ErrRefused) {
			t.Fatalf("%s: want ErrRefused, got %v", u, err)
		}
	}

	open := Policy{AllowPrivate: true}.NewClient(ClientOptions{Timeout: 2 * time.Second})
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, "http://localhost:"+port+"/", nil)
	resp, err := open.Do(req)
	if err != nil {
		t.Fatalf("allow private: %v", err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusNoContent {
		t.Fatalf("status %d", resp.StatusCode)
	}

	req, _ = http.NewRequestWithContext(ctx, http.MethodPost, srv.URL+"/redirect", nil)
	resp, err = open.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusFound {
		t.Fatalf("redirect followed: status %d", resp.StatusCode)
	}
}
