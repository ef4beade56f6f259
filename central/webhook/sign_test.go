package webhook

import (
	"bytes"
	"net/http"
	"os/exec"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/vesta-cx/euterpe/daemon/testsvc"
)

// pythonSign computes the contract signature with Python's hmac module, an
// implementation independent of this package.
func pythonSign(t *testing.T, secret, ts, nonce string, body []byte) string {
	t.Helper()
	py := testsvc.Program(t, "python3")
	const prog = `import hmac,hashlib,sys
secret,ts,nonce=sys.argv[1],sys.argv[2],sys.argv[3]
body=sys.stdin.buffer.read()
print("v1="+hmac.new(secret.encode(),ts.encode()+b"."+nonce.encode()+b"."+body,hashlib.sha256).hexdigest())`
	cmd := exec.Command(py, "-c", prog, secret, ts, nonce)
	cmd.Stdin = bytes.NewReader(body)
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("python3: %v", err)
	}
	return strings.TrimSpace(string(out))
}

func TestSignMatchesIndependentImplementation(t *testing.T) {
	cases := []struct {
		name, secret string
		body         []byte
	}{
		{"json", "whsec_abc", []byte(`{"event_id":"e1","status":"succeeded"}`)},
		{"empty body", "s", nil},
		{"binary and unicode", "sécret", []byte("\x00\xff.é\n")},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got := Sign([]byte(c.secret), 1700000000, "n0nce", c.body)
			if want := pythonSign(t, c.secret, "1700000000", "n0nce", c.body); got != want {
				t.Fatalf("Sign = %s, python = %s", got, want)
			}
		})
	}
}

func TestOpenSSLAgrees(t *testing.T) {
	openssl := testsvc.Program(t, "openssl")
	body := []byte(`{"a":1}`)
	cmd := exec.Command(openssl, "dgst", "-sha256", "-hmac", "k3y", "-r")
	cmd.Stdin = strings.NewReader("42.nn." + string(body))
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("openssl: %v", err)
	}
	want := "v1=" + strings.Fields(string(out))[0]
	if got := Sign([]byte("k3y"), 42, "nn", body); got != want {
		t.Fatalf("Sign = %s, openssl = %s", got, want)
	}
}

var hexSig = regexp.MustCompile(`^v1=[0-9a-f]{64}$`)

func TestNewHeaders(t *testing.T) {
	now := time.Unix(1700000123, 0)
	body := []byte(`{"x":1}`)
	t.Run("one secret", func(t *testing.T) {
		h, err := NewHeaders(now, "evt_1", body, []byte("cur"))
		if err != nil {
			t.Fatal(err)
		}
		if h.Get(HeaderTimestamp) != "1700000123" || h.Get(HeaderEventID) != "evt_1" {
			t.Fatalf("headers %v", h)
		}
		if !regexp.MustCompile(`^[0-9a-f]{32}$`).MatchString(h.Get(HeaderNonce)) {
			t.Fatalf("nonce %q", h.Get(HeaderNonce))
		}
		sig := h.Get(HeaderSignature)
		if !hexSig.MatchString(sig) || sig != pythonSign(t, "cur", "1700000123", h.Get(HeaderNonce), body) {
			t.Fatalf("signature %q", sig)
		}
	})
	t.Run("rotation sends both, space separated", func(t *testing.T) {
		h, err := NewHeaders(now, "evt_1", body, []byte("new"), []byte("old"))
		if err != nil {
			t.Fatal(err)
		}
		parts := strings.Split(h.Get(HeaderSignature), " ")
		n := h.Get(HeaderNonce)
		if len(parts) != 2 || parts[0] != pythonSign(t, "new", "1700000123", n, body) || parts[1] != pythonSign(t, "old", "1700000123", n, body) {
			t.Fatalf("signature %q", h.Get(HeaderSignature))
		}
	})
	t.Run("new nonce per attempt", func(t *testing.T) {
		a, _ := NewHeaders(now, "e", body, []byte("k"))
		b, _ := NewHeaders(now, "e", body, []byte("k"))
		if a.Get(HeaderNonce) == b.Get(HeaderNonce) || a.Get(HeaderSignature) == b.Get(HeaderSignature) {
			t.Fatal("nonce reused across attempts")
		}
	})
	t.Run("errors", func(t *testing.T) {
		if _, err := NewHeaders(now, "e", body); err != ErrNoSecret {
			t.Fatalf("no secret: %v", err)
		}
		if _, err := NewHeaders(now, "e", body, nil, []byte{}); err != ErrNoSecret {
			t.Fatalf("empty secrets: %v", err)
		}
		if _, err := NewHeaders(now, "e", body, []byte("a"), []byte("b"), []byte("c")); err == nil {
			t.Fatal("three secrets accepted")
		}
		if _, err := NewHeaders(now, "", body, []byte("a")); err == nil {
			t.Fatal("empty event id accepted")
		}
	})
	t.Run("SetHeaders on a request", func(t *testing.T) {
		req, _ := http.NewRequest(http.MethodPost, "http://example.invalid/", bytes.NewReader(body))
		if err := SetHeaders(req, now, "e9", body, []byte("k")); err != nil {
			t.Fatal(err)
		}
		if req.Header.Get("X-Euterpe-Event-Id") != "e9" {
			t.Fatalf("header %v", req.Header)
		}
	})
}

func TestNewSecret(t *testing.T) {
	a, err := NewSecret()
	if err != nil {
		t.Fatal(err)
	}
	b, _ := NewSecret()
	if !strings.HasPrefix(a, "whsec_") || len(a) != 6+43 || a == b {
		t.Fatalf("secrets %q %q", a, b)
	}
}
