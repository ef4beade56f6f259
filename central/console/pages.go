package console

import (
	"embed"
	"encoding/json"
	"fmt"
	"html/template"
	"io/fs"
	"net/http"
	"strconv"
	"time"

	"github.com/labstack/echo/v4"
	dconsole "github.com/vesta-cx/euterpe/daemon/console"
)

//go:embed pages/*.html
var pageFiles embed.FS

//go:embed app
var appFiles embed.FS

// pages are the parsed templates of the console.
type pages struct {
	r                                   *Role
	c                                   *dconsole.Console
	signin, overview, jobs, job, dead   *dconsole.Page
	fleet, edge, edgeJob, pipeline, dlq *dconsole.Page
}

// Paths of the pages.
const (
	pathOverview  = dconsole.Prefix
	pathJobs      = dconsole.Prefix + "transcode"
	pathJob       = dconsole.Prefix + "transcode/job"
	pathDead      = dconsole.Prefix + "transcode/dead"
	pathRedrive   = dconsole.Prefix + "transcode/redrive"
	pathFleet     = dconsole.Prefix + "fleet"
	pathEdge      = dconsole.Prefix + "fleet/edge"
	pathEdgeJob   = dconsole.Prefix + "fleet/job"
	pathTail      = dconsole.Prefix + "fleet/events"
	pathPipeline  = dconsole.Prefix + "pipeline"
	pathDLQ       = dconsole.Prefix + "pipeline/dlq"
	pathPRedrive  = dconsole.Prefix + "pipeline/redrive"
	pathReport    = dconsole.Prefix + "pipeline/report"
	pathHistory   = dconsole.Prefix + "history.json"
	pathDurations = dconsole.Prefix + "transcode/durations.json"
)

func newPages(r *Role) *pages {
	nav := []dconsole.NavItem{{Title: "Overview", Path: pathOverview}, {Title: "Transcode", Path: pathJobs}, {Title: "Webhook dead letters", Path: pathDead}}
	if r.withFleet {
		nav = append(nav, dconsole.NavItem{Title: "Fleet", Path: pathFleet})
	}
	if r.withPipeline {
		nav = append(nav, dconsole.NavItem{Title: "Pipeline", Path: pathPipeline}, dconsole.NavItem{Title: "Pipeline DLQ", Path: pathDLQ})
	}
	app, err := fs.Sub(appFiles, "app")
	if err != nil {
		panic(err) // fixed at build time
	}
	c := dconsole.New(dconsole.Options{Product: "euterpe-central", Nav: nav, Assets: app, Funcs: funcs})
	p := &pages{r: r, c: c}
	load := func(name string) *dconsole.Page {
		common, err := pageFiles.ReadFile("pages/common.html")
		if err != nil {
			panic(err)
		}
		src, err := pageFiles.ReadFile("pages/" + name + ".html")
		if err != nil {
			panic(err)
		}
		return c.MustPage(name, string(common)+string(src))
	}
	p.signin, p.overview, p.jobs, p.job, p.dead = load("signin"), load("overview"), load("jobs"), load("job"), load("dead")
	p.fleet, p.edge, p.edgeJob = load("fleet"), load("edge"), load("edgejob")
	p.pipeline, p.dlq = load("pipeline"), load("dlq")
	return p
}

func (p *pages) mount(e *echo.Echo) {
	r := p.r
	cross, err := dconsole.CrossOriginList(r.settings.Origins)
	if err != nil {
		panic(err) // checked when the setting was parsed
	}
	form := dconsole.FormBody(dconsole.MaxForm)
	p.c.Mount(e)
	e.GET(signinPath, r.getSignin)
	e.POST(signinPath, r.postSignin, form, cross)
	// Per route, not through an e.Group("", …): a group's middleware
	// registers a catch-all for its prefix, which for "" is the whole
	// server, and every unknown path of the API would answer with a
	// console sign-in redirect instead of a 404.
	mw := []echo.MiddlewareFunc{form, cross, r.requireSession, requireCSRF}
	get := func(path string, h echo.HandlerFunc) { e.GET(path, h, mw...) }
	post := func(path string, h echo.HandlerFunc) { e.POST(path, h, mw...) }
	post(signoutPath, r.postSignout)
	get(pathOverview, r.overviewPage)
	get(pathHistory, echo.WrapHandler(r.history))
	get(pathJobs, r.jobsPage)
	get(pathJob, r.jobPage)
	get(pathDead, r.deadPage)
	post(pathRedrive, r.redriveWebhook)
	if r.withFleet {
		get(pathFleet, r.fleetPage)
		get(pathEdge, r.edgePage)
		get(pathEdgeJob, r.edgeJobPage)
		get(pathTail, noStore(r.tail.Tail))
	}
	if r.withPipeline {
		get(pathPipeline, r.pipelinePage)
		get(pathDLQ, r.dlqPage)
		post(pathPRedrive, r.redrivePipeline)
		get(pathReport, r.reportPage)
	}
}

// noStore gives h's response the headers of every console page: the
// fleet tail is the sync role's handler, which sets Cache-Control:
// no-cache (a cache may still store the events it carries). The hook runs
// when the status is written, after the handler has set its own headers.
func noStore(h echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		res := c.Response()
		res.Before(func() { dconsole.SecurityHeaders(res.Header()) })
		return h(c)
	}
}

// pageData is what every signed-in page template gets as .Data.
type pageData struct {
	Operator string
	CSRF     string
	Flash    string
	Body     any
}

func (r *Role) render(c echo.Context, page *dconsole.Page, title, active string, body any) error {
	csrf := csrfOf(c)
	var flash string
	if n, err := strconv.ParseInt(c.QueryParam("redriven"), 10, 64); err == nil && n >= 0 {
		flash = fmt.Sprintf("Redriven: %d.", n)
	}
	return page.Render(c, http.StatusOK, dconsole.View{Title: title, Active: active, CSRF: csrf,
		Data: pageData{Operator: operatorOf(c).Name, CSRF: csrf, Flash: flash, Body: body}})
}

const timeLayout = "2006-01-02 15:04:05Z"

var funcs = template.FuncMap{
	// sclass is the badge class of a status of any of the queues.
	"sclass": func(status string) string {
		switch status {
		case "dead_letter", "failed", "error":
			return "s-dead"
		case "claimed", "fetching", "processing", "uploading", "delivering", "running":
			return "s-running"
		case "queued", "pending":
			return "s-queued"
		case "succeeded", "delivered", "done":
			return "s-ok"
		case "canceled":
			return "s-canceled"
		}
		return ""
	},
	// when formats a time.Time or *time.Time in UTC ("—" for none).
	"when": func(v any) string {
		switch t := v.(type) {
		case time.Time:
			if !t.IsZero() {
				return t.UTC().Format(timeLayout)
			}
		case *time.Time:
			if t != nil && !t.IsZero() {
				return t.UTC().Format(timeLayout)
			}
		}
		return "—"
	},
	// ago is the age of a *time.Time or time.Time, rounded.
	"ago": func(v any) string {
		var t time.Time
		switch x := v.(type) {
		case time.Time:
			t = x
		case *time.Time:
			if x == nil {
				return "never"
			}
			t = *x
		}
		if t.IsZero() {
			return "never"
		}
		return roundAge(time.Since(t)) + " ago"
	},
	// span is the time between two *time.Time ("" when either is missing).
	"span": func(a, b *time.Time) string {
		if a == nil || b == nil {
			return ""
		}
		return b.Sub(*a).Round(time.Millisecond).String()
	},
	// unixms formats Unix milliseconds (edge clocks) in UTC.
	"unixms": func(v any) string {
		switch x := v.(type) {
		case int64:
			return time.UnixMilli(x).UTC().Format(timeLayout)
		case *int64:
			if x != nil {
				return time.UnixMilli(*x).UTC().Format(timeLayout)
			}
		}
		return "—"
	},
	// seconds formats a *int64 count of seconds as a duration.
	"seconds": func(v *int64) string {
		if v == nil {
			return "—"
		}
		return (time.Duration(*v) * time.Second).String()
	},
	// count is the number of elements of a JSON array (outputs).
	"count": func(v json.RawMessage) int {
		var xs []json.RawMessage
		if json.Unmarshal(v, &xs) != nil {
			return 0
		}
		return len(xs)
	},
	"num": func(v *int64) string {
		if v == nil {
			return "—"
		}
		return fmt.Sprint(*v)
	},
	"str": func(v *string) string {
		if v == nil {
			return ""
		}
		return *v
	},
	// pretty indents a JSON document for a <pre>, clipped to PageText
	// (html/template escapes it like any text).
	"pretty": dconsole.Pretty,
}

func roundAge(d time.Duration) string {
	switch {
	case d < time.Minute:
		return d.Round(time.Second).String()
	case d < time.Hour:
		return d.Round(time.Minute).String()
	default:
		return d.Round(time.Hour).String()
	}
}
