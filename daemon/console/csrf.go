package console

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"fmt"
	"net/http"
	"strings"

	"github.com/labstack/echo/v4"

	"github.com/vesta-cx/euterpe/daemon"
)

// CrossOrigin refuses a state-changing request (any method but GET, HEAD,
// OPTIONS) that a browser marks as coming from another origin: its
// Sec-Fetch-Site is not same-origin/none, or its Origin differs from the
// Host it was sent to (net/http's CrossOriginProtection). A request with
// neither header is not from a browser (curl, euterpectl, a service) and
// passes: it carries no cookie or other ambient authority to abuse.
// trusted lists extra origins ("https://console.example.com") allowed to
// post, for a console behind a proxy that rewrites Host. The refusal is a
// 403 {"error":{"code":"cross_origin",...}}.
func CrossOrigin(trusted ...string) (echo.MiddlewareFunc, error) {
	return crossOrigin(trusted)
}

// CrossOriginList is CrossOrigin for a setting's comma-separated list of
// origins (blanks ignored).
func CrossOriginList(list string) (echo.MiddlewareFunc, error) {
	return crossOrigin(splitOrigins(list))
}

func splitOrigins(list string) []string {
	var out []string
	for _, o := range strings.Split(list, ",") {
		if o = strings.TrimSpace(o); o != "" {
			out = append(out, o)
		}
	}
	return out
}

// CheckOrigins validates a CrossOriginList setting.
func CheckOrigins(list string) error {
	_, err := CrossOriginList(list)
	return err
}

func crossOrigin(trusted []string) (echo.MiddlewareFunc, error) {
	p := http.NewCrossOriginProtection()
	for _, o := range trusted {
		if err := p.AddTrustedOrigin(o); err != nil {
			return nil, fmt.Errorf("trusted origin %q: %w", o, err)
		}
	}
	return func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c echo.Context) error {
			if err := p.Check(c.Request()); err != nil {
				return daemon.Errorf(http.StatusForbidden, "cross_origin", "cross-origin request refused")
			}
			return next(c)
		}
	}, nil
}

// Tokens are CSRF tokens bound to a session: HMAC-SHA256 of the session
// id under a key minted at process start (a restart invalidates every
// form, as it does the sessions a daemon keeps in memory). A daemon with
// cookie sessions puts Issue(session) in View.CSRF (the layout exposes it
// as <meta name="csrf-token">; euterpe.api sends it as X-CSRF-Token) and
// checks Valid on every state-changing request, on top of CrossOrigin.
type Tokens struct {
	key []byte
}

// NewTokens mints the key.
func NewTokens() *Tokens {
	k := make([]byte, 32)
	if _, err := rand.Read(k); err != nil {
		panic(err) // crypto/rand does not fail on supported platforms
	}
	return &Tokens{key: k}
}

// Issue returns the token of session.
func (t *Tokens) Issue(session string) string {
	m := hmac.New(sha256.New, t.key)
	m.Write([]byte(session))
	return base64.RawURLEncoding.EncodeToString(m.Sum(nil))
}

// Valid compares token with session's in constant time.
func (t *Tokens) Valid(session, token string) bool {
	if session == "" || token == "" {
		return false
	}
	return hmac.Equal([]byte(t.Issue(session)), []byte(token))
}

// FromRequest is the token a request carries: the X-CSRF-Token header, or
// the "csrf" field of a posted form.
func FromRequest(r *http.Request) string {
	if v := r.Header.Get("X-CSRF-Token"); v != "" {
		return v
	}
	return r.PostFormValue("csrf")
}
