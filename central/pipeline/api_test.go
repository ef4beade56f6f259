package pipeline

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"net/url"
	"testing"
	"time"

	"github.com/labstack/echo/v4"
	"github.com/vesta-cx/euterpe/daemon"
	"github.com/vesta-cx/euterpe/daemon/lease"
	"github.com/vesta-cx/euterpe/daemon/sqldb"
)

// apiServer serves the pipeline routes of f's store over HTTP (no operator
// auth: the middleware passes every request).
func apiServer(t *testing.T, f *fixture) string {
	t.Helper()
	e := daemon.NewEcho(f.store.Log)
	a := &API{Store: f.store, Log: f.store.Log, Attempts: 1, Backoff: lease.Backoff{Base: time.Millisecond, Cap: time.Millisecond}, Budget: 5 * time.Second}
	a.Mount(e, func(next echo.HandlerFunc) echo.HandlerFunc { return next })
	srv := httptest.NewServer(e)
	t.Cleanup(srv.Close)
	return srv.URL
}

type apiAnswer struct {
	status int
	code   string
	page   Page
}

func call(t *testing.T, method, u string) apiAnswer {
	t.Helper()
	req, err := http.NewRequest(method, u, nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var body struct {
		Error struct {
			Code string `json:"code"`
		} `json:"error"`
		Page
	}
	_ = json.NewDecoder(resp.Body).Decode(&body)
	return apiAnswer{status: resp.StatusCode, code: body.Error.Code, page: body.Page}
}

// A job id, a list filter or a cursor holding bytes that are not UTF-8 (or
// NUL), which Postgres refuses as a parameter, is answered the same on both
// engines, before any query: an id that is not a job id is 404 not_found, a
// filter value or cursor that is not one is 400 invalid_request. Never 500.
func TestAPINonUTF8Params(t *testing.T) {
	badCursor := base64.RawURLEncoding.EncodeToString([]byte{0xff, 0xfe})
	eachEngine(t, func(t *testing.T, db *sqldb.DB) {
		f := newFixture(t, db, nil)
		base := apiServer(t, f)
		c := f.submit(t, "noop", "AAPL", "2026-01-02")
		f.submit(t, "noop", "AAPL", "2026-01-03")
		cases := []struct {
			method, path string
			status       int
			code         string
		}{
			{"GET", "/v1/pipeline/jobs/%FF", 404, "not_found"},
			{"POST", "/v1/pipeline/jobs/%FF/redrive", 404, "not_found"},
			{"GET", "/v1/pipeline/jobs?symbol=%FF", 400, "invalid_request"},
			{"GET", "/v1/pipeline/jobs?cursor=" + badCursor, 400, "invalid_request"},
			// More of the same.
			{"GET", "/v1/pipeline/jobs/%00", 404, "not_found"},
			{"GET", "/v1/pipeline/jobs/%C3%28", 404, "not_found"},
			{"GET", "/v1/pipeline/jobs/not-a-job-id", 404, "not_found"},
			{"GET", "/v1/pipeline/jobs/" + NewJobID(), 404, "not_found"},
			{"POST", "/v1/pipeline/jobs/not-a-job-id/redrive", 404, "not_found"},
			{"GET", "/v1/pipeline/jobs?job_type=%FF", 400, "invalid_request"},
			{"GET", "/v1/pipeline/jobs?symbol=A%00B", 400, "invalid_request"},
			{"GET", "/v1/pipeline/dlq?symbol=%FF", 400, "invalid_request"},
			{"GET", "/v1/pipeline/dlq?cursor=" + badCursor, 400, "invalid_request"},
			{"GET", "/v1/pipeline/jobs?cursor=" + base64.RawURLEncoding.EncodeToString([]byte("not-a-job-id")), 400, "invalid_request"},
		}
		for _, k := range cases {
			if r := call(t, k.method, base+k.path); r.status != k.status || r.code != k.code {
				t.Errorf("%s %s: %d %q, want %d %s", k.method, k.path, r.status, r.code, k.status, k.code)
			}
		}
		// Good requests still answer.
		if r := call(t, "GET", base+"/v1/pipeline/jobs/"+c.JobID); r.status != 200 {
			t.Fatalf("get: %d %s", r.status, r.code)
		}
		r := call(t, "GET", base+"/v1/pipeline/jobs?symbol=AAPL&limit=1")
		if r.status != 200 || len(r.page.Jobs) != 1 || r.page.NextCursor == "" {
			t.Fatalf("page 1: %d %+v", r.status, r.page)
		}
		r = call(t, "GET", base+"/v1/pipeline/jobs?symbol=AAPL&limit=1&cursor="+url.QueryEscape(r.page.NextCursor))
		if r.status != 200 || len(r.page.Jobs) != 1 || r.page.Jobs[0].JobID != c.JobID || r.page.NextCursor != "" {
			t.Fatalf("page 2: %d %+v", r.status, r.page)
		}
		if r := call(t, "GET", base+"/v1/pipeline/jobs?symbol=%C3%A9"); r.status != 200 || len(r.page.Jobs) != 0 {
			t.Fatalf("UTF-8 symbol: %d %+v", r.status, r.page)
		}

		// The store answers the same without the API in front.
		ctx := context.Background()
		if _, err := f.store.GetByID(ctx, "\xff"); !errors.Is(err, ErrNotFound) {
			t.Fatalf("get: %v", err)
		}
		if _, err := f.store.Redrive(ctx, "\xff"); !errors.Is(err, ErrNotFound) {
			t.Fatalf("redrive: %v", err)
		}
		if p, err := f.store.List(ctx, Filter{Symbol: "\xff"}); err != nil || len(p.Jobs) != 0 {
			t.Fatalf("list: %+v %v", p, err)
		}
		if _, err := f.store.List(ctx, Filter{Cursor: badCursor}); !errors.Is(err, ErrBadCursor) {
			t.Fatalf("cursor: %v", err)
		}
		m := f.store.Message(Request{JobType: "noop", Symbol: "MSFT", Asof: "2026-01-02", RequestedBy: "test"})
		m.JobID = "j1"
		if _, err := f.store.CreateQueued(ctx, m); ErrorCode(err) != CodeInvalidMessage {
			t.Fatalf("create_queued with a job id that is not one: %v", err)
		}
	})
}
