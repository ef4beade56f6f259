package console_test

import (
	"fmt"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"
	"github.com/vesta-cx/euterpe/daemon/console/browsertest"
	"github.com/vesta-cx/euterpe/daemon/sqldb"
)

const wait = 30 * time.Second

// TestConsoleInBrowser drives the console in headless Chromium against a
// running euterpe-central on each engine: sign-in (a requester's API key
// is refused), every page with hostile values shown as text, the live
// fleet tail, a webhook redrive that reaches the receiver, and a POST
// without the CSRF token refused. Screenshots of each page go to
// .run/screenshots/ (from the SQLite run).
func TestConsoleInBrowser(t *testing.T) {
	engines(t, func(t *testing.T, e sqldb.Engine) {
		f := newFixture(t, e)
		b := browsertest.New(t)
		shot := func(name string) {
			if e == sqldb.SQLite {
				b.Screenshot(name)
			}
		}
		signIn := func(token string) {
			b.Run(chromedp.SetValue("#token", token, chromedp.ByQuery), chromedp.Submit("#signin", chromedp.ByQuery))
		}

		// Not signed in: to the form. A requester's API key does not open it.
		b.Open(f.base + "/ui/transcode")
		b.WaitFor("the sign-in form", `!!document.querySelector("#signin")`, wait)
		signIn(f.req.APIKey)
		b.WaitText("#signin-error", "Requesters' API keys do not open the console", wait)
		shot("central-signin")
		refused := len(b.Errors()) // the browser logs the 401 of the refused sign-in
		signIn(f.op.Token)
		b.WaitText("h1", "Transcode jobs", wait) // back where it was going
		b.WaitText("#jobs", f.jobID, wait)
		shot("central-transcode")

		pwned := func(where string) {
			var got bool
			b.Eval(`window.pwned === 1`, &got)
			if got {
				t.Fatalf("%s: a <script> from the data ran", where)
			}
		}
		pages := []struct {
			path, sel, text, shot string
		}{
			{"/ui/", ".account", "alice", "central-overview"},
			{"/ui/transcode/job?id=" + f.jobID, "#metadata", evil, "central-job"},
			{"/ui/transcode/dead", "#dead", "receiver answered 410 Gone", "central-webhook-dead-letters"},
			{"/ui/fleet/edge?id=" + f.edgeID, "#edge-jobs", "job-" + evil, "central-edge"},
			{"/ui/fleet/job?edge=" + f.edgeID + "&id=" + url.QueryEscape(f.edgeJob), "#edge-events", evil, "central-edge-job"},
			{"/ui/pipeline", "#pipeline-jobs", f.reportID, "central-pipeline"},
			{"/ui/pipeline/dlq", "#dlq", "nothing <script>x</script>", "central-pipeline-dlq"},
		}
		for _, p := range pages {
			b.Open(f.base + p.path)
			b.WaitText(p.sel, p.text, wait)
			pwned(p.path)
			if p.path == "/ui/" {
				b.WaitFor("the backlog chart", `!!document.querySelector('[data-series="transcode_backlog"] svg')`, wait)
			}
			shot(p.shot)
		}

		// The live fleet tail shows events stored after the page opened.
		b.Open(f.base + "/ui/fleet")
		b.WaitText("#edges", "edge-"+evil, wait)
		b.WaitText("#tail-state", "open", wait)
		f.edgeEvents(t, f.edgeID, f.edgeJob, time.Now().UnixMilli(), "progress", "done")
		b.WaitText("#tail", "done step.done", wait)
		b.WaitText("#tail", `{"note":"<script>`, wait)
		pwned("fleet tail")
		shot("central-fleet")

		// A phone-sized screen.
		b.Viewport(390, 844)
		b.Open(f.base + "/ui/transcode")
		b.WaitText("#jobs", f.jobID, wait)
		shot("central-transcode-phone")
		b.Viewport(1280, 900)

		// Redrive a dead-lettered webhook: it reaches the receiver.
		f.recv.ok.Store(true)
		b.Open(f.base + "/ui/transcode/dead")
		b.Run(chromedp.Click("button.redrive", chromedp.ByQuery))
		b.WaitText("#flash", "Redriven: 1.", wait)
		// The receiver counts a delivery before the dispatcher records it, and
		// the job page is drawn once: wait for the record, not the request.
		f.waitFor(t, "redriven webhook delivered and recorded", func() bool {
			var n int
			err := f.deps.DB.QueryRow(f.deps.DB.Rebind(`SELECT COUNT(*) FROM job_outbox_events WHERE job_id = ? AND status = 'delivered'`), f.jobID).Scan(&n)
			return err == nil && n >= 1 && f.recv.delivered.Load() >= 1
		})
		b.Open(f.base + "/ui/transcode/job?id=" + f.jobID)
		b.WaitText("#deliveries", "delivered", wait)

		if errs := b.Errors()[refused:]; len(errs) > 0 {
			t.Fatalf("page errors: %s", strings.Join(errs, "\n"))
		}

		// A POST without the CSRF token is refused, even from the page itself.
		var status int
		b.Run(chromedp.Evaluate(fmt.Sprintf(`fetch("/ui/transcode/redrive", {method: "POST", credentials: "same-origin",
			body: new URLSearchParams({job_id: %q})}).then(function (r) { return r.status; })`, f.jobID), &status,
			func(p *runtime.EvaluateParams) *runtime.EvaluateParams { return p.WithAwaitPromise(true) }))
		if status != 403 {
			t.Fatalf("POST without csrf from the page: %d", status)
		}

		// Sign out: the console asks for the token again.
		b.Open(f.base + "/ui/")
		b.Run(chromedp.Click("#signout", chromedp.ByQuery))
		b.WaitFor("the sign-in form", `!!document.querySelector("#signin")`, wait)
	})
}
