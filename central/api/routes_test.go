package api_test

import (
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/vesta-cx/euterpe/daemon/sqldb"
)

// The API's authentication covers its own routes only: a path no role
// serves is a 404 for a caller without a key too (the console's browser
// among them, which never sends one), not a 401 asking for an API key.
func TestAuthCoversOnlyTheAPIsRoutes(t *testing.T) {
	eachEngine(t, func(t *testing.T, db *sqldb.DB) {
		e := start(t, db)
		for _, tc := range []struct {
			method, path string
			want         int
		}{
			{http.MethodPost, "/transcode", http.StatusUnauthorized},
			{http.MethodGet, "/transcode/status?job_id=x", http.StatusUnauthorized},
			{http.MethodPut, "/transcode/credentials?job_id=x", http.StatusUnauthorized},
			{http.MethodGet, "/openapi.json", http.StatusOK},
			{http.MethodGet, "/nope", http.StatusNotFound},
			{http.MethodGet, "/ui/typo", http.StatusNotFound},
			{http.MethodPost, "/transcode/typo", http.StatusNotFound},
		} {
			if r := e.do(tc.method, tc.path, "", "", ""); r.Code != tc.want {
				t.Errorf("%s %s without a key: %d %s, want %d", tc.method, tc.path, r.Code, r.Raw, tc.want)
			}
		}
	})
}

// A job id is a UUID, which RFC 9562 reads case-insensitively: a client
// that prints it in upper case, or in another of the forms uuid.Parse
// accepts, names the same job rather than getting 404 for a job it owns.
func TestJobIDForms(t *testing.T) {
	eachEngine(t, func(t *testing.T, db *sqldb.DB) {
		e := start(t, db)
		key := e.requester()
		r := e.do(http.MethodPost, "/transcode", key, "forms", js(validBody()))
		if r.Code != http.StatusAccepted {
			t.Fatalf("enqueue: %d %s", r.Code, r.Raw)
		}
		job := r.Body["job_id"].(string)
		creds := `{"source":{"credentials":{"access_key_id":"a","secret_access_key":"s"}},"output":{"credentials":{"access_key_id":"a","secret_access_key":"s"}}}`
		for _, id := range []string{job, strings.ToUpper(job), "{" + job + "}", "urn:uuid:" + job, strings.ReplaceAll(job, "-", "")} {
			q := url.QueryEscape(id)
			if s := e.do(http.MethodGet, "/transcode/status?job_id="+q, key, "", ""); s.Code != http.StatusOK || s.Body["job_id"] != job {
				t.Errorf("status %s: %d %s", id, s.Code, s.Raw)
			}
			if s := e.do(http.MethodPut, "/transcode/credentials?job_id="+q, key, "", creds); s.Code != http.StatusOK || s.Body["job_id"] != job {
				t.Errorf("credentials %s: %d %s", id, s.Code, s.Raw)
			}
		}
	})
}
