package console_test

import (
	"context"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/vesta-cx/euterpe/daemon/sqldb"
)

// The sign-in form takes the operator token and its CSRF field from the
// posted body only: a token in the URL would be kept by proxies' access
// logs and browser history, so one put there opens nothing.
func TestSigninTakesTheTokenFromTheBodyOnly(t *testing.T) {
	c := startCentral(t, sqldb.SQLite, nil)
	cl := c.client(t)
	cases := []struct {
		name        string
		query, body func(csrf string) url.Values
	}{
		{"token in the query",
			func(string) url.Values { return url.Values{"token": {c.op.Token}} },
			func(tok string) url.Values { return url.Values{"csrf": {tok}} }},
		{"token and csrf in the query",
			func(tok string) url.Values { return url.Values{"token": {c.op.Token}, "csrf": {tok}} },
			func(string) url.Values { return url.Values{} }},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, page := cl.get("/ui/signin") // a fresh double-submit cookie
			tok := csrf(t, page)
			res, _ := cl.post("/ui/signin?"+tc.query(tok).Encode(), tc.body(tok))
			if ck := sessionCookie(res); ck != nil || res.StatusCode == http.StatusSeeOther {
				t.Fatalf("a token in the URL opened a session: %d, cookie %v", res.StatusCode, ck != nil)
			}
		})
	}
	// The same token in the body signs in.
	_, page := cl.get("/ui/signin")
	res, _ := cl.post("/ui/signin", url.Values{"csrf": {csrf(t, page)}, "token": {c.op.Token}})
	if res.StatusCode != http.StatusSeeOther || sessionCookie(res) == nil {
		t.Fatalf("sign-in with the token in the body: %d", res.StatusCode)
	}
}

// The live fleet tail carries edge events, like the pages: no cache may
// store it.
func TestFleetTailIsNotStored(t *testing.T) {
	c := startCentral(t, sqldb.SQLite, nil)
	cl := c.client(t)
	if res, _ := cl.signIn(c.op.Token); res.StatusCode != http.StatusSeeOther {
		t.Fatalf("sign-in: %d", res.StatusCode)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, c.base+"/ui/fleet/events", nil)
	req.Header.Set("Accept", "text/event-stream")
	res, err := (&http.Client{Jar: cl.http.Jar}).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	if res.StatusCode != http.StatusOK {
		t.Fatalf("tail: %d", res.StatusCode)
	}
	if cc := res.Header.Get("Cache-Control"); !strings.Contains(cc, "no-store") {
		t.Errorf("Cache-Control %q, want no-store", cc)
	}
	if v := res.Header.Get("X-Content-Type-Options"); v != "nosniff" {
		t.Errorf("X-Content-Type-Options %q, want nosniff", v)
	}
}
