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
			{"job_type=%FF", http.StatusBadRequest, "job_type must be UTF-8 text"},
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

// The pipeline page filters by job_type as the API does, and its status
// filters and "Older jobs" link keep the type chosen.
func TestPipelinePageFiltersByJobType(t *testing.T) {
	engines(t, func(t *testing.T, e sqldb.Engine) {
		f := newFixture(t, e)
		cl := f.client(t)
		cl.signIn(f.op.Token)
		cases := []struct {
			query      string
			want, omit string
		}{
			{"job_type=broken", f.deadID, f.reportID},
			{"job_type=edge_daily", f.reportID, f.deadID},
			{"job_type=edge_daily&status=dead_letter", "No jobs match.", f.deadID},
		}
		for _, tc := range cases {
			res, body := cl.get("/ui/pipeline?" + tc.query)
			if res.StatusCode != http.StatusOK {
				t.Fatalf("%s: %d\n%s", tc.query, res.StatusCode, body)
			}
			jobs := body[strings.Index(body, `id="pipeline-jobs"`):]
			if !strings.Contains(jobs, tc.want) || strings.Contains(jobs, tc.omit) {
				t.Errorf("%s: want %q and not %q in\n%s", tc.query, tc.want, tc.omit, jobs)
			}
			if !strings.Contains(body, "job_type=edge_daily&amp;status=queued") && strings.Contains(tc.query, "edge_daily") {
				t.Errorf("%s: the status filters drop the job type\n%s", tc.query, body)
			}
		}
	})
}
