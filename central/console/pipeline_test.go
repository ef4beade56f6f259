package console_test

import (
	"net/http"
	"strings"
	"testing"

	"github.com/vesta-cx/euterpe/daemon/sqldb"
)

// The pipeline page refuses a filter value the pipeline API refuses — a
// symbol that is not UTF-8 text, an asof that is not a day — with 400 and
// what was wrong, instead of an empty page that reads as "no jobs".
func TestPipelinePageRefusesBadFilters(t *testing.T) {
	engines(t, func(t *testing.T, e sqldb.Engine) {
		c := startCentral(t, e, nil)
		cl := c.client(t)
		cl.signIn(c.op.Token)
		cases := []struct {
			query  string
			status int
			says   string
		}{
			{"symbol=%FF", http.StatusBadRequest, "symbol must be UTF-8 text"},
			{"symbol=a%00b", http.StatusBadRequest, "symbol must be UTF-8 text"},
			{"asof=2026-02-30", http.StatusBadRequest, "asof must be a UTC date"},
			{"asof=2026-13-01", http.StatusBadRequest, "asof must be a UTC date"},
			{"asof=yesterday", http.StatusBadRequest, "asof must be a UTC date"},
			{"asof=%FF", http.StatusBadRequest, "asof must be"},
			{"status=nope", http.StatusBadRequest, "status must be one of"},
			{"symbol=SYM&asof=2026-01-02&status=queued", http.StatusOK, ""},
		}
		for _, tc := range cases {
			res, body := cl.get("/ui/pipeline?" + tc.query)
			if res.StatusCode != tc.status || !strings.Contains(body, tc.says) {
				t.Errorf("%s: %d, want %d saying %q\n%s", tc.query, res.StatusCode, tc.status, tc.says, body)
			}
		}
		// The API answers the same symbol the same way.
		req, _ := http.NewRequest(http.MethodGet, c.base+"/v1/pipeline/jobs?symbol=%FF", nil)
		req.Header.Set("Authorization", "Bearer "+c.op.Token)
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		if res.StatusCode != http.StatusBadRequest {
			t.Errorf("API symbol=%%FF: %d", res.StatusCode)
		}
	})
}
