package console_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/vesta-cx/euterpe/central/console"
	"github.com/vesta-cx/euterpe/central/pipeline"
	dconsole "github.com/vesta-cx/euterpe/daemon/console"
	"github.com/vesta-cx/euterpe/daemon/sqldb"
	"github.com/vesta-cx/euterpe/sync/ingest"
	"github.com/vesta-cx/euterpe/sync/wire"
)

const evil = `<script>window.pwned=1</script>`

// receiver is a webhook receiver that refuses for good (410) until ok is
// set.
type receiver struct {
	srv       *httptest.Server
	ok        atomic.Bool
	delivered atomic.Int64
}

func newReceiver(t *testing.T) *receiver {
	r := &receiver{}
	r.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		if !r.ok.Load() {
			w.WriteHeader(http.StatusGone)
			return
		}
		r.delivered.Add(1)
		w.WriteHeader(http.StatusNoContent)
	}))
	t.Cleanup(r.srv.Close)
	return r
}

// fixture is a central with something on every page: a transcode job with
// a dead-lettered webhook event, an edge with a job, a pipeline job in the
// DLQ and one with a report. Shown values carry a <script>.
type fixture struct {
	*central
	recv             *receiver
	jobID, edgeID    string
	edgeJob          string
	deadID, reportID string
}

func newFixture(t *testing.T, e sqldb.Engine) *fixture {
	t.Helper()
	script := filepath.Join(t.TempDir(), "broken.sh")
	if err := os.WriteFile(script, []byte("#!/bin/sh\necho '{\"error_code\":\"STORAGE_WRITE_FAILED\",\"error_message\":\"nothing <script>x</script>\"}'\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	c := startCentral(t, e, map[string]string{
		"EUTERPE_PIPELINE_TYPES":        "broken=exec:" + script,
		"EUTERPE_PIPELINE_MAX_ATTEMPTS": "1",
	})
	f := &fixture{central: c, recv: newReceiver(t)}
	f.jobID = c.enqueue(t, f.recv.srv.URL+"/hook?token=receiver-token-do-not-show", `{"title":"`+strings.ReplaceAll(evil, `"`, `\"`)+`"}`)
	if got := c.advance(t); got != f.jobID {
		t.Fatalf("advanced %s, want %s", got, f.jobID)
	}
	c.waitFor(t, "webhook dead-lettered", func() bool {
		var n int
		_ = c.deps.DB.QueryRow(c.deps.DB.Rebind(`SELECT COUNT(*) FROM job_outbox_events WHERE job_id = ? AND status <> 'dead_letter'`), f.jobID).Scan(&n)
		var dead int
		_ = c.deps.DB.QueryRow(c.deps.DB.Rebind(`SELECT COUNT(*) FROM job_outbox_events WHERE job_id = ? AND status = 'dead_letter'`), f.jobID).Scan(&dead)
		return n == 0 && dead == 2 // claimed and fetching
	})
	f.edgeJob = "job-" + evil
	f.edgeID = c.edge(t, "edge-"+evil, f.edgeJob)

	ctx := context.Background()
	ps := pipeline.NewStore(c.deps.DB, nil)
	ps.MaxAttempts = 1
	today := time.Now().UTC().Format("2006-01-02")
	dead, err := ps.Submit(ctx, pipeline.Request{JobType: "broken", Symbol: "SYM", Asof: today, RequestedBy: "test"})
	if err != nil {
		t.Fatal(err)
	}
	rep, err := ps.Submit(ctx, pipeline.Request{JobType: "edge_daily", Symbol: f.edgeID, Asof: today, RequestedBy: "test"})
	if err != nil {
		t.Fatal(err)
	}
	f.deadID, f.reportID = dead.JobID, rep.JobID
	c.waitFor(t, "pipeline jobs finished", func() bool {
		d, err1 := ps.GetByID(ctx, f.deadID)
		r, err2 := ps.GetByID(ctx, f.reportID)
		return err1 == nil && err2 == nil && d.Status == pipeline.StatusDeadLetter && r.Status == pipeline.StatusSucceeded
	})
	return f
}

// Every page answers, shows its data as text (a <script> in any value is
// escaped) and never a secret.
func TestPages(t *testing.T) {
	engines(t, func(t *testing.T, e sqldb.Engine) {
		f := newFixture(t, e)
		cl := f.client(t)
		cl.signIn(f.op.Token)
		pages := []struct {
			path string
			want []string
		}{
			{"/ui/", []string{"Transcode backlog", "Pipeline job duration"}},
			{"/ui/transcode", []string{f.jobID, "fetching", "test-worker"}},
			{"/ui/transcode?status=fetching", []string{f.jobID}},
			{"/ui/transcode/job?id=" + f.jobID, []string{"&lt;script&gt;window.pwned=1&lt;/script&gt;", "dead_letter", "HTTP 410", "/hook", "Redrive"}},
			{"/ui/transcode/dead", []string{f.jobID, "receiver answered 410 Gone"}},
			{"/ui/fleet", []string{"edge-&lt;script&gt;", "1.2.3&lt;script&gt;", "/ui/fleet/events"}},
			{"/ui/fleet/edge?id=" + f.edgeID, []string{"job-&lt;script&gt;", "running"}},
			{"/ui/fleet/job?edge=" + f.edgeID + "&id=" + url.QueryEscape(f.edgeJob), []string{"step.running", "&lt;script&gt;window.pwned=1&lt;/script&gt;"}},
			{"/ui/pipeline", []string{"SYM", f.reportID, "/ui/pipeline/report?id=" + f.reportID}},
			{"/ui/pipeline?symbol=SYM&status=dead_letter", []string{f.deadID, "STORAGE_WRITE_FAILED", "nothing &lt;script&gt;x&lt;/script&gt;"}},
			{"/ui/pipeline/dlq", []string{f.deadID, "Redrive"}},
		}
		secrets := []string{f.req.APIKey, f.req.WebhookSecret, f.op.Token, "source-secret-do-not-show", "output-secret-do-not-show",
			"AKIASOURCE", "receiver-token-do-not-show"}
		for _, p := range pages {
			res, body := cl.get(p.path)
			if res.StatusCode != http.StatusOK {
				t.Errorf("%s: %d\n%s", p.path, res.StatusCode, body)
				continue
			}
			if csp := res.Header.Get("Content-Security-Policy"); !strings.Contains(csp, "script-src 'self'") {
				t.Errorf("%s: CSP %q", p.path, csp)
			}
			for _, w := range p.want {
				if !strings.Contains(body, w) {
					t.Errorf("%s: missing %q", p.path, w)
				}
			}
			if strings.Contains(body, "<script>window") || strings.Contains(body, "<script>x") || strings.Contains(body, "<script>v") {
				t.Errorf("%s: an unescaped <script> from data", p.path)
			}
			for _, s := range secrets {
				if s != "" && strings.Contains(body, s) {
					t.Errorf("%s: shows a secret %q…", p.path, s[:min(len(s), 8)])
				}
			}
		}
		// The report is served as text, never as a page.
		res, body := cl.get("/ui/pipeline/report?id=" + f.reportID)
		if res.StatusCode != http.StatusOK || !strings.HasPrefix(res.Header.Get("Content-Type"), "text/plain") ||
			!strings.Contains(res.Header.Get("Content-Security-Policy"), "sandbox") || !strings.Contains(body, f.edgeID) {
			t.Fatalf("report: %d %s\n%s", res.StatusCode, res.Header, body)
		}
		for _, bad := range []string{"/ui/transcode?status=nope", "/ui/pipeline?asof=yesterday", "/ui/pipeline?status=nope"} {
			if res, _ := cl.get(bad); res.StatusCode != http.StatusBadRequest {
				t.Errorf("%s: %d", bad, res.StatusCode)
			}
		}
		for _, missing := range []string{"/ui/transcode/job?id=nope", "/ui/fleet/edge?id=nope", "/ui/fleet/job?edge=nope&id=x", "/ui/pipeline/report?id=" + f.deadID} {
			if res, _ := cl.get(missing); res.StatusCode != http.StatusNotFound {
				t.Errorf("%s: %d", missing, res.StatusCode)
			}
		}
	})
}

// Redrive from the console: refused without the CSRF token, and with it
// the event goes back to the dispatcher and reaches the receiver.
func TestRedrive(t *testing.T) {
	engines(t, func(t *testing.T, e sqldb.Engine) {
		f := newFixture(t, e)
		cl := f.client(t)
		cl.signIn(f.op.Token)
		_, page := cl.get("/ui/transcode/dead")
		var eventID string
		if err := f.deps.DB.QueryRow(f.deps.DB.Rebind(`SELECT event_id FROM job_outbox_events WHERE job_id = ? AND status = 'dead_letter' ORDER BY sequence LIMIT 1`), f.jobID).Scan(&eventID); err != nil {
			t.Fatal(err)
		}
		f.recv.ok.Store(true)
		for _, form := range []url.Values{
			{"event_id": {eventID}},
			{"event_id": {eventID}, "csrf": {"forged"}},
		} {
			if res, _ := cl.post("/ui/transcode/redrive", form); res.StatusCode != http.StatusForbidden {
				t.Fatalf("redrive without a valid csrf token: %d", res.StatusCode)
			}
		}
		// A form posted from another site is refused before the token is looked at.
		req, _ := http.NewRequest(http.MethodPost, f.base+"/ui/transcode/redrive", strings.NewReader(url.Values{"event_id": {eventID}, "csrf": {csrf(t, page)}}.Encode()))
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		req.Header.Set("Origin", "https://evil.example")
		req.Header.Set("Sec-Fetch-Site", "cross-site")
		if res, err := cl.http.Do(req); err != nil || res.StatusCode != http.StatusForbidden {
			t.Fatalf("cross-site redrive: %v %v", err, res)
		}
		if f.recv.delivered.Load() != 0 {
			t.Fatal("delivered before the redrive")
		}
		res, _ := cl.post("/ui/transcode/redrive", url.Values{"event_id": {eventID}, "csrf": {csrf(t, page)}, "back": {"/ui/transcode/dead"}})
		if res.StatusCode != http.StatusSeeOther || res.Header.Get("Location") != "/ui/transcode/dead?redriven=1" {
			t.Fatalf("redrive: %d %s", res.StatusCode, res.Header.Get("Location"))
		}
		f.waitFor(t, "redriven event delivered", func() bool { return f.recv.delivered.Load() == 1 })

		// The pipeline DLQ's redrive queues the job again.
		_, page = cl.get("/ui/pipeline/dlq")
		if res, _ := cl.post("/ui/pipeline/redrive", url.Values{"id": {f.deadID}}); res.StatusCode != http.StatusForbidden {
			t.Fatalf("pipeline redrive without csrf: %d", res.StatusCode)
		}
		res, _ = cl.post("/ui/pipeline/redrive", url.Values{"id": {f.deadID}, "csrf": {csrf(t, page)}, "back": {"/ui/pipeline/dlq"}})
		if res.StatusCode != http.StatusSeeOther {
			t.Fatalf("pipeline redrive: %d", res.StatusCode)
		}
		ps := pipeline.NewStore(f.deps.DB, nil)
		f.waitFor(t, "pipeline job redriven and dead again", func() bool {
			j, err := ps.GetByID(context.Background(), f.deadID)
			return err == nil && j.Status == pipeline.StatusDeadLetter && j.Attempts == 1 && j.UpdatedAt.After(j.CreatedAt)
		})
		if res, _ := cl.post("/ui/pipeline/redrive", url.Values{"id": {f.reportID}, "csrf": {csrf(t, page)}}); res.StatusCode != http.StatusConflict {
			t.Fatalf("redrive of a succeeded job: %d", res.StatusCode)
		}
	})
}

// An edge job's page shows its first edgeJobEvents events, each clipped to
// PageText, and says there are more: a job of thousands of 64 KiB events
// made a page of hundreds of megabytes on the pod that built it.
func TestEdgeJobPageIsBounded(t *testing.T) {
	engines(t, func(t *testing.T, e sqldb.Engine) {
		c := startCentral(t, e, nil)
		job := "long-job"
		edge := c.edge(t, "edge-long", job)
		big := json.RawMessage(`{"text":"` + strings.Repeat("x", 20<<10) + `"}`)
		ms := time.Now().UnixMilli()
		for sent := 2; sent < console.EdgeJobEvents+10; {
			b := wire.Batch{EdgeID: edge, SentAt: time.Now()}
			for i := 0; i < 50; i++ {
				ev := wire.NewEvent(edge, job, fmt.Sprintf("%d-0", ms+int64(sent)), "delta", "step.delta", ms+int64(sent), big)
				ev.Task = "chat"
				b.Events = append(b.Events, ev)
				sent++
			}
			if _, err := ingest.NewStore(c.deps.DB).Ingest(context.Background(), b); err != nil {
				t.Fatal(err)
			}
		}
		cl := c.client(t)
		cl.signIn(c.op.Token)
		res, body := cl.get("/ui/fleet/job?edge=" + edge + "&id=" + job)
		if res.StatusCode != http.StatusOK {
			t.Fatalf("%d\n%.500s", res.StatusCode, body)
		}
		if n := strings.Count(body, "<pre>"); n != console.EdgeJobEvents {
			t.Errorf("%d events shown, want %d", n, console.EdgeJobEvents)
		}
		if !strings.Contains(body, `id="edge-events-more"`) || !strings.Contains(body, "euterpectl edges events "+edge+" "+job) {
			t.Error("the page does not say that more events exist")
		}
		if max := console.EdgeJobEvents * (dconsole.PageText + 1024); len(body) > max {
			t.Errorf("page of %d bytes, want at most %d: event data not clipped", len(body), max)
		}
		if !strings.Contains(body, "truncated (") {
			t.Error("a clipped event does not say so")
		}
	})
}
