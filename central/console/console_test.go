package console_test

import (
	"context"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/vesta-cx/euterpe/central/console"
	"github.com/vesta-cx/euterpe/daemon/sqldb"
	"github.com/vesta-cx/euterpe/daemon/sqldb/sqltest"
)

// engines runs body on Postgres and SQLite.
func engines(t *testing.T, body func(t *testing.T, e sqldb.Engine)) {
	for _, e := range []sqldb.Engine{sqldb.Postgres, sqldb.SQLite} {
		t.Run(string(e), func(t *testing.T) {
			if e == sqldb.Postgres {
				sqltest.URL(t, e) // skips, or fails under CI, without Postgres
			}
			body(t, e)
		})
	}
}

func sessionCookie(res *http.Response) *http.Cookie {
	for _, c := range res.Cookies() {
		if c.Name == console.SessionCookie {
			return c
		}
	}
	return nil
}

func TestSignIn(t *testing.T) {
	engines(t, func(t *testing.T, e sqldb.Engine) {
		c := startCentral(t, e, nil)
		cl := c.client(t)

		// Unsigned: pages send the browser to the form, everything else is refused.
		res, _ := cl.get("/ui/transcode")
		if res.StatusCode != http.StatusSeeOther || !strings.HasPrefix(res.Header.Get("Location"), "/ui/signin?next=") {
			t.Fatalf("unsigned page: %d %s", res.StatusCode, res.Header.Get("Location"))
		}
		if res, _ := cl.get("/ui/history.json"); res.StatusCode != http.StatusUnauthorized {
			t.Fatalf("unsigned history: %d", res.StatusCode)
		}

		// Bearer credentials do not open the console either: it takes a session.
		for _, tok := range []string{c.req.APIKey, c.op.Token} {
			req, _ := http.NewRequest(http.MethodGet, c.base+"/ui/transcode", nil)
			req.Header.Set("Authorization", "Bearer "+tok)
			res, err := cl.http.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			res.Body.Close()
			if res.StatusCode != http.StatusSeeOther {
				t.Fatalf("bearer %s…: %d", tok[:4], res.StatusCode)
			}
		}

		refusals := []struct {
			name, token string
			csrf        func(string) string
			status      int
		}{
			{"requester api key", c.req.APIKey, func(s string) string { return s }, http.StatusUnauthorized},
			{"unknown operator token", "eop_AAAA", func(s string) string { return s }, http.StatusUnauthorized},
			{"no csrf token", c.op.Token, func(string) string { return "" }, http.StatusForbidden},
			{"wrong csrf token", c.op.Token, func(s string) string { return s + "x" }, http.StatusForbidden},
		}
		for _, r := range refusals {
			_, page := cl.get("/ui/signin")
			res, body := cl.post("/ui/signin", url.Values{"csrf": {r.csrf(csrf(t, page))}, "token": {r.token}})
			if res.StatusCode != r.status || sessionCookie(res) != nil {
				t.Errorf("%s: %d, session cookie %v", r.name, res.StatusCode, sessionCookie(res))
			}
			if strings.Contains(body, r.token) && r.token != "" {
				t.Errorf("%s: the token is echoed back", r.name)
			}
		}

		res, _ = cl.signIn(c.op.Token)
		ck := sessionCookie(res)
		if res.StatusCode != http.StatusSeeOther || ck == nil {
			t.Fatalf("sign-in: %d", res.StatusCode)
		}
		if !ck.HttpOnly || ck.SameSite != http.SameSiteStrictMode || ck.Secure || ck.Path != "/ui/" {
			t.Fatalf("cookie flags: %+v", ck)
		}
		if strings.Contains(c.logs.String(), ck.Value) || strings.Contains(c.logs.String(), c.op.Token) {
			t.Fatal("session id or token logged")
		}
		res, body := cl.get("/ui/")
		if res.StatusCode != http.StatusOK || !strings.Contains(body, "Signed in as <b>alice</b>") {
			t.Fatalf("overview: %d\n%s", res.StatusCode, body)
		}

		// A POST without the session's CSRF token is refused, with it passes.
		if res, _ := cl.post("/ui/signout", url.Values{}); res.StatusCode != http.StatusForbidden {
			t.Fatalf("sign-out without csrf: %d", res.StatusCode)
		}
		// Disabling the operator ends the session at once.
		if err := c.deps.Operators.Disable(context.Background(), c.op.OperatorID); err != nil {
			t.Fatal(err)
		}
		if res, _ := cl.get("/ui/"); res.StatusCode != http.StatusSeeOther {
			t.Fatalf("disabled operator's session still open: %d", res.StatusCode)
		}
	})
}

func TestSignOut(t *testing.T) {
	engines(t, func(t *testing.T, e sqldb.Engine) {
		c := startCentral(t, e, nil)
		cl := c.client(t)
		cl.signIn(c.op.Token)
		_, page := cl.get("/ui/")
		res, _ := cl.post("/ui/signout", url.Values{"csrf": {csrf(t, page)}})
		if res.StatusCode != http.StatusSeeOther || res.Header.Get("Location") != "/ui/signin" {
			t.Fatalf("sign-out: %d %s", res.StatusCode, res.Header.Get("Location"))
		}
		if res, _ := cl.get("/ui/"); res.StatusCode != http.StatusSeeOther {
			t.Fatalf("after sign-out: %d", res.StatusCode)
		}
	})
}

// Behind a TLS-terminating proxy the cookie is Secure only when the
// operator said to trust X-Forwarded-Proto.
func TestSecureCookie(t *testing.T) {
	for _, trust := range []bool{false, true} {
		env := map[string]string{console.EnvTrustForwardedProto: "false"}
		if trust {
			env[console.EnvTrustForwardedProto] = "true"
		}
		c := startCentral(t, sqldb.SQLite, env)
		cl := c.client(t)
		_, page := cl.get("/ui/signin")
		req, _ := http.NewRequest(http.MethodPost, c.base+"/ui/signin",
			strings.NewReader(url.Values{"csrf": {csrf(t, page)}, "token": {c.op.Token}}.Encode()))
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		req.Header.Set("X-Forwarded-Proto", "https")
		res, err := cl.http.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		ck := sessionCookie(res)
		if ck == nil || ck.Secure != trust {
			t.Fatalf("trust=%v: cookie %+v", trust, ck)
		}
	}
}

// The console's routes do not swallow the server's other paths: an API
// client's typo is a 404, not a console sign-in redirect (a group on the
// empty prefix registers a catch-all for the whole server).
func TestUnknownPathsAreNotTheConsoles(t *testing.T) {
	c := startCentral(t, sqldb.SQLite, nil)
	cl := c.client(t)
	for _, m := range []string{http.MethodGet, http.MethodPost} {
		for _, p := range []string{"/v1/jobs/x/typo", "/v1/typo", "/nope"} {
			req, _ := http.NewRequest(m, c.base+p, nil)
			req.Header.Set("Authorization", "Bearer "+c.req.APIKey)
			res, err := cl.http.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			res.Body.Close()
			if res.StatusCode != http.StatusNotFound {
				t.Errorf("%s %s with a requester key: %d (Location %q), want 404", m, p, res.StatusCode, res.Header.Get("Location"))
			}
		}
	}
}
