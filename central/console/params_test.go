package console_test

import (
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/vesta-cx/euterpe/daemon/sqldb"
)

// Identifiers no row can have (bytes that are not UTF-8, NUL, which
// Postgres refuses as a text parameter) answer as unknown rows do on both
// engines, never with a 500.
func TestMalformedIdentifiers(t *testing.T) {
	engines(t, func(t *testing.T, e sqldb.Engine) {
		c := startCentral(t, e, map[string]string{"EUTERPE_CENTRAL_ROLES": "api,console,dispatcher,sync"})
		cl := c.client(t)
		if res, _ := cl.signIn(c.op.Token); res.StatusCode != http.StatusSeeOther {
			t.Fatalf("sign-in: %d", res.StatusCode)
		}
		for _, tc := range []struct{ path string }{
			{"/ui/transcode/job?id=%ff"},
			{"/ui/transcode/job?id=a%00b"},
			{"/ui/fleet/edge?id=%ff"},
			{"/ui/fleet/edge?id=a%00b"},
			{"/ui/fleet/job?edge=%ff&id=j"},
			{"/ui/fleet/job?edge=e&id=a%00b"},
		} {
			res, body := cl.get(tc.path)
			if res.StatusCode != http.StatusNotFound || !strings.Contains(body, `"not_found"`) {
				t.Errorf("GET %s: %d %.200s", tc.path, res.StatusCode, body)
			}
		}
		_, page := cl.get("/ui/transcode/dead")
		tok := csrf(t, page)
		for _, form := range []url.Values{
			{"job_id": {"\xff"}},
			{"job_id": {"a\x00b"}},
			{"event_id": {"\xff"}},
			{"event_id": {"a\x00b"}},
		} {
			form.Set("csrf", tok)
			res, body := cl.post("/ui/transcode/redrive", form)
			if res.StatusCode != http.StatusBadRequest || !strings.Contains(body, `"invalid_request"`) {
				t.Errorf("redrive %q: %d %.200s", form, res.StatusCode, body)
			}
		}
	})
}

// A signed-in browser (which sends no bearer key) asking for a page that
// does not exist gets a 404, not another role's 401 asking for an API key.
func TestUnknownConsolePathIsNotFound(t *testing.T) {
	c := startCentral(t, sqldb.SQLite, nil)
	cl := c.client(t)
	if res, _ := cl.signIn(c.op.Token); res.StatusCode != http.StatusSeeOther {
		t.Fatalf("sign-in: %d", res.StatusCode)
	}
	for _, p := range []string{"/ui/typo", "/ui/transcode/typo", "/nope"} {
		if res, body := cl.get(p); res.StatusCode != http.StatusNotFound {
			t.Errorf("GET %s: %d %.200s, want 404", p, res.StatusCode, body)
		}
	}
}
