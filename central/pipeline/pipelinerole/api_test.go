package pipelinerole

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/labstack/echo/v4"
	"github.com/vesta-cx/euterpe/central/operators"
	"github.com/vesta-cx/euterpe/central/pipeline"
	"github.com/vesta-cx/euterpe/central/serve"
	"github.com/vesta-cx/euterpe/daemon"
	"github.com/vesta-cx/euterpe/daemon/sqldb"
	"github.com/vesta-cx/euterpe/daemon/sqldb/sqltest"
	"github.com/vesta-cx/euterpe/daemon/testsvc"
)

func TestAPI(t *testing.T) {
	sqltest.Each(t, sets, func(t *testing.T, db *sqldb.DB) {
		s := newServer(t, db, testConfig())
		// Operator tokens only.
		req, _ := http.NewRequest(http.MethodPost, s.url+"/v1/pipeline/jobs", strings.NewReader(`{}`))
		if resp, _ := http.DefaultClient.Do(req); resp.StatusCode != 401 {
			t.Fatalf("no token: %d", resp.StatusCode)
		}
		// §7 idempotent triple submit over HTTP.
		var first pipeline.Created
		body := map[string]string{"job_type": "edge_daily", "symbol": "edge-1", "asof": "2026-01-02"}
		if r := s.do(t, "POST", "/v1/pipeline/jobs", body, &first); r.StatusCode != 202 || !first.Created || first.Status != "queued" {
			t.Fatalf("%d %+v", r.StatusCode, first)
		}
		for i := 0; i < 2; i++ {
			var again pipeline.Created
			if r := s.do(t, "POST", "/v1/pipeline/jobs", body, &again); r.StatusCode != 202 || again.Created || again.JobID != first.JobID {
				t.Fatalf("%d %+v", r.StatusCode, again)
			}
		}
		var rec pipeline.JobRecord
		if r := s.do(t, "GET", "/v1/pipeline/jobs/"+first.JobID, nil, &rec); r.StatusCode != 200 || rec.RequestedBy[:9] != "operator:" || rec.Symbol != "edge-1" {
			t.Fatalf("%d %+v", r.StatusCode, rec)
		}
		var e apiErr
		for _, c := range []struct {
			body   string
			status int
			code   string
		}{
			{`{"job_type":"edge_daily","symbol":"edge-1","asof":"2026-1-2"}`, 400, pipeline.CodeInvalidMessage},
			{`{"job_type":"nope","symbol":"x","asof":"2026-01-02"}`, 400, pipeline.CodeInvalidMessage},
			{`{"job_type":"edge_daily","symbol":"../x","asof":"2026-01-02"}`, 400, pipeline.CodeInvalidMessage},
			{`{"job_type":"edge_daily","symbol":"e","asof":"2026-01-02","x":1}`, 400, pipeline.CodeInvalidMessage},
			{`not json`, 400, pipeline.CodeInvalidMessage},
			{`{"job_type":"edge_daily","symbol":"` + strings.Repeat("a", 20000) + `","asof":"2026-01-02"}`, 413, pipeline.CodeMessageTooLarge},
		} {
			if r := s.do(t, "POST", "/v1/pipeline/jobs", c.body, &e); r.StatusCode != c.status || e.Error.Code != c.code {
				t.Errorf("%.60s: %d %+v", c.body, r.StatusCode, e)
			}
		}
		if !strings.Contains(s.logs.String(), `"alert":true`) {
			t.Error("refused message not logged with alert")
		}
		if r := s.do(t, "GET", "/v1/pipeline/jobs/"+pipeline.NewJobID(), nil, &e); r.StatusCode != 404 {
			t.Fatalf("unknown: %d", r.StatusCode)
		}
		// Keyset pages.
		for i := 3; i <= 9; i++ {
			s.do(t, "POST", "/v1/pipeline/jobs", map[string]string{"job_type": "edge_daily", "symbol": "edge-1", "asof": fmt.Sprintf("2026-01-%02d", i)}, nil)
		}
		seen := map[string]bool{}
		cursor := ""
		pages := 0
		for {
			var p pipeline.Page
			s.do(t, "GET", "/v1/pipeline/jobs?status=queued&job_type=edge_daily&symbol=edge-1&limit=3&cursor="+url.QueryEscape(cursor), nil, &p)
			pages++
			for _, j := range p.Jobs {
				if seen[j.JobID] {
					t.Fatalf("job %s on two pages", j.JobID)
				}
				seen[j.JobID] = true
			}
			if p.NextCursor == "" {
				break
			}
			cursor = p.NextCursor
		}
		if len(seen) != 8 || pages != 3 {
			t.Fatalf("%d jobs on %d pages", len(seen), pages)
		}
		if r := s.do(t, "GET", "/v1/pipeline/jobs?status=bogus", nil, &e); r.StatusCode != 400 {
			t.Fatalf("bad status: %d", r.StatusCode)
		}
		if r := s.do(t, "GET", "/v1/pipeline/jobs?cursor=%21%21", nil, &e); r.StatusCode != 400 {
			t.Fatalf("bad cursor: %d", r.StatusCode)
		}
		// Redrive of a job that is not dead-lettered: 409.
		if r := s.do(t, "POST", "/v1/pipeline/jobs/"+first.JobID+"/redrive", nil, &e); r.StatusCode != 409 || e.Error.Code != "invalid_transition" {
			t.Fatalf("redrive queued: %d %+v", r.StatusCode, e)
		}
		// The worker runs them: no events synced → failed UPSTREAM_EMPTY.
		s.run(t)
		waitFor(t, "failures", func() bool {
			var r pipeline.JobRecord
			s.do(t, "GET", "/v1/pipeline/jobs/"+first.JobID, nil, &r)
			return r.Status == pipeline.StatusFailed
		})
		s.do(t, "GET", "/v1/pipeline/jobs/"+first.JobID, nil, &rec)
		if rec.LastError == nil || rec.LastError.ErrorCode != pipeline.CodeUpstreamEmpty {
			t.Fatalf("%+v", rec.LastError)
		}
		// DLQ and redrive.
		_, _ = db.ExecContext(context.Background(), db.Rebind("UPDATE pipeline_jobs SET status = 'dead_letter' WHERE job_id = ?"), first.JobID)
		var dlq pipeline.Page
		if s.do(t, "GET", "/v1/pipeline/dlq", nil, &dlq); len(dlq.Jobs) != 1 || dlq.Jobs[0].JobID != first.JobID {
			t.Fatalf("dlq %+v", dlq)
		}
		var red pipeline.Redriven
		if r := s.do(t, "POST", "/v1/pipeline/jobs/"+first.JobID+"/redrive", nil, &red); r.StatusCode != 202 || red.Status != "queued" {
			t.Fatalf("redrive: %d %+v", r.StatusCode, red)
		}
		// Metrics.
		resp, _ := http.Get(s.url + "/metrics")
		var b strings.Builder
		buf := make([]byte, 1<<16)
		for {
			n, err := resp.Body.Read(buf)
			b.Write(buf[:n])
			if err != nil {
				break
			}
		}
		resp.Body.Close()
		for _, m := range []string{"euterpe_pipeline_enqueued_total", "euterpe_pipeline_backlog", "euterpe_pipeline_dlq_size", "euterpe_pipeline_job_duration_seconds_bucket",
			"euterpe_pipeline_failures_total{error_code=\"UPSTREAM_EMPTY\"", "euterpe_pipeline_idempotency_conflicts_total{job_type=\"edge_daily\"} 2", "euterpe_pipeline_finished_total"} {
			if !strings.Contains(b.String(), m) {
				t.Errorf("/metrics lacks %s", m)
			}
		}
	})
}

// Every route the role mounts is in its OpenAPI fragment and vice versa;
// the schemas list exactly the Go types' JSON fields.
func TestOpenAPIFragment(t *testing.T) {
	var doc struct {
		Paths      map[string]map[string]json.RawMessage `json:"paths"`
		Components struct {
			Schemas map[string]struct {
				Properties map[string]any `json:"properties"`
			} `json:"schemas"`
		} `json:"components"`
	}
	if err := json.Unmarshal(pipeline.OpenAPI(), &doc); err != nil {
		t.Fatal(err)
	}
	e := echo.New()
	(&pipeline.API{}).Mount(e, func(next echo.HandlerFunc) echo.HandlerFunc { return next })
	mounted := map[string]bool{}
	for _, r := range e.Routes() {
		if !strings.HasPrefix(r.Path, "/v1/pipeline/") || r.Method == "echo_route_not_found" || strings.HasSuffix(r.Path, "*") {
			continue
		}
		p := strings.ReplaceAll(r.Path, ":id", "{id}")
		mounted[strings.ToLower(r.Method)+" "+p] = true
		if _, ok := doc.Paths[p][strings.ToLower(r.Method)]; !ok {
			t.Errorf("%s %s mounted but not documented", r.Method, p)
		}
	}
	for p, ops := range doc.Paths {
		for m := range ops {
			if !mounted[m+" "+p] {
				t.Errorf("%s %s documented but not mounted", m, p)
			}
		}
	}
	types := map[string]any{
		"PipelineSubmitRequest": pipeline.SubmitRequest{}, "PipelineCreated": pipeline.Created{}, "PipelineJob": pipeline.JobRecord{},
		"PipelineLastError": pipeline.LastError{}, "PipelinePage": pipeline.Page{}, "PipelineRedriven": pipeline.Redriven{},
		"PipelineRefusedDay": pipeline.RefusedDay{}, "PipelineRefusedPage": pipeline.RefusedPage{},
	}
	if len(types) != len(doc.Components.Schemas) {
		t.Errorf("%d schemas, %d Go types", len(doc.Components.Schemas), len(types))
	}
	for name, v := range types {
		var want []string
		rt := reflect.TypeOf(v)
		for i := 0; i < rt.NumField(); i++ {
			if tag := strings.Split(rt.Field(i).Tag.Get("json"), ",")[0]; tag != "" && tag != "-" {
				want = append(want, tag)
			}
		}
		var got []string
		for k := range doc.Components.Schemas[name].Properties {
			got = append(got, k)
		}
		if !sameSet(got, want) {
			t.Errorf("schema %s: %v, Go fields %v", name, got, want)
		}
	}
}

func sameSet(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	m := map[string]bool{}
	for _, x := range a {
		m[x] = true
	}
	for _, x := range b {
		if !m[x] {
			return false
		}
	}
	return true
}

func waitFor(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(25 * time.Millisecond)
	}
}

func testsvcPostgresURL() string { return testsvc.PostgresURL() }

// A configured exec job type must exist and be executable at start.
func TestExecTypeMustExist(t *testing.T) {
	db := sqltest.Open(t, sqldb.SQLite, sets...)
	cfg := testConfig()
	cfg.Types = "prices=exec:/nonexistent/prices-pipeline"
	d := &serve.Deps{DB: db, Log: slog.New(slog.DiscardHandler), StateDir: t.TempDir(), WorkerID: "w"}
	_, err := New(context.Background(), cfg, d)
	var se *daemon.SettingError
	if !errors.As(err, &se) || se.Setting != "EUTERPE_PIPELINE_TYPES" {
		t.Fatalf("%v", err)
	}
}

// TestDisabledTokenRefusedWithinAuthCache: the submit route remembers a
// verified operator token for EUTERPE_PIPELINE_AUTH_CACHE; once the
// operator is disabled, the token is refused (401) within that bound.
func TestDisabledTokenRefusedWithinAuthCache(t *testing.T) {
	sqltest.Each(t, sets, func(t *testing.T, db *sqldb.DB) {
		cfg := testConfig()
		cfg.AuthCache = 300 * time.Millisecond
		s := newServer(t, db, cfg)
		body := map[string]string{"job_type": "edge_daily", "symbol": "edge-1", "asof": "2026-01-01"}
		if resp := s.do(t, "POST", "/v1/pipeline/jobs", body, nil); resp.StatusCode != http.StatusAccepted {
			t.Fatalf("submit: %d", resp.StatusCode)
		}
		ops := operators.New(db)
		op, err := ops.Authenticate(context.Background(), s.token)
		if err != nil {
			t.Fatal(err)
		}
		if err := ops.Disable(context.Background(), op.ID); err != nil {
			t.Fatal(err)
		}
		disabled := time.Now()
		for {
			resp := s.do(t, "POST", "/v1/pipeline/jobs", body, nil)
			if resp.StatusCode == http.StatusUnauthorized {
				break
			}
			if resp.StatusCode != http.StatusAccepted || time.Since(disabled) > cfg.AuthCache+time.Second {
				t.Fatalf("disabled token still answered %d after %v", resp.StatusCode, time.Since(disabled))
			}
			time.Sleep(20 * time.Millisecond)
		}
	})
}

// The role's claims take only the job types its pod runs (the Go ones and
// EUTERPE_PIPELINE_TYPES): a job of a type this pod lacks is left queued
// for a pod that has it, not claimed and retried here.
func TestRoleClaimsOnlyItsTypes(t *testing.T) {
	db := sqltest.Open(t, sqldb.SQLite, sets...)
	cfg := testConfig()
	cfg.Types = "prices=exec:/bin/true"
	d := &serve.Deps{DB: db, Log: slog.New(slog.DiscardHandler), StateDir: t.TempDir(), WorkerID: "w"}
	r, err := New(context.Background(), cfg, d)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := r.Store.LeaseQueue().Spec.Where, "job_type IN ('edge_daily', 'prices')"; got != want {
		t.Fatalf("claim predicate %q, want %q", got, want)
	}
}
