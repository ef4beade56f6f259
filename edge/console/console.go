package console

import (
	"context"
	"embed"
	"encoding/json"
	"errors"
	"fmt"
	"html/template"
	"io/fs"
	"log/slog"
	"net/http"
	"net/url"
	"time"

	"github.com/google/uuid"
	"github.com/labstack/echo/v4"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/vesta-cx/euterpe/daemon"
	ui "github.com/vesta-cx/euterpe/daemon/console"
	"github.com/vesta-cx/euterpe/edge/jobs"
	"github.com/vesta-cx/euterpe/edge/library"
)

//go:embed pages/*.html
var pageFS embed.FS

//go:embed static
var staticFS embed.FS

// Deps are what the console reads.
type Deps struct {
	Log  *slog.Logger
	Jobs *jobs.Store
	// Library returns the media library, nil when it has no roots. It is
	// read at request time: the library is built after the console.
	Library func() *library.Library
	// LibraryState tells a library that is configured but whose database
	// is not open yet (a full disk, a read-only state directory; the
	// library retries) from one that is off. Nil: a nil Library is off.
	LibraryState func() LibraryState
	// Metrics is the daemon's registry: the console adds the queue's
	// gauges and charts the worker's series from it.
	Metrics *prometheus.Registry
	// HistoryEvery is the charts' sampling interval (an hour is kept).
	HistoryEvery time.Duration
	// Now is the clock pages compute ages with (tests may fix it).
	Now func() time.Time
}

// LibraryState is what the library reports while Library returns nil.
type LibraryState struct {
	Configured bool  // the library has roots
	OpenErr    error // the last failure to open its database, nil if not known
}

// Console is the edge's /ui/.
type Console struct {
	d       Deps
	ui      *ui.Console
	history *ui.History
	pages   map[string]*ui.Page
}

// Nav is the edge console's navigation.
var Nav = []ui.NavItem{
	{Title: "Jobs", Path: "/ui/"},
	{Title: "Queue", Path: "/ui/queue"},
	{Title: "Library", Path: "/ui/library"},
}

// New builds the console and registers its gauges on d.Metrics.
func New(d Deps) (*Console, error) {
	if d.Log == nil {
		d.Log = slog.New(slog.DiscardHandler)
	}
	if d.Now == nil {
		d.Now = time.Now
	}
	if d.Library == nil {
		d.Library = func() *library.Library { return nil }
	}
	static, err := fs.Sub(staticFS, "static")
	if err != nil {
		return nil, err
	}
	c := &Console{d: d, pages: map[string]*ui.Page{}}
	c.ui = ui.New(ui.Options{Product: "euterpe-edge", Nav: Nav, Assets: static, Funcs: c.funcs()})
	for _, name := range []string{"jobs", "job", "queue", "library", "notfound"} {
		src, err := pageFS.ReadFile("pages/" + name + ".html")
		if err != nil {
			return nil, err
		}
		c.pages[name] = c.ui.MustPage(name, string(src))
	}
	if err := d.Metrics.Register(newQueueCollector(d.Jobs, d.Library)); err != nil {
		return nil, fmt.Errorf("console metrics: %w", err)
	}
	h := ui.NewHistory(d.Log, d.HistoryEvery, time.Hour)
	h.Gauge("backlog", "jobs", ui.GatherValue(d.Metrics, MetricBacklog, nil))
	h.Gauge("dead_letters", "jobs", ui.GatherValue(d.Metrics, MetricDead, nil))
	h.Rate("throughput", "jobs/s", ui.GatherValue(d.Metrics, MetricFinished, nil))
	h.Rate("failures", "jobs/s", ui.GatherValue(d.Metrics, MetricFinished, map[string]string{"status": jobs.Error}))
	h.Histogram("run_seconds", ui.GatherHistogram(d.Metrics, MetricRunSeconds, "s"))
	c.history = h
	return c, nil
}

// History is the console's in-memory history (tests sample it directly).
func (c *Console) History() *ui.History { return c.history }

// Mount adds /ui/ and its pages.
func (c *Console) Mount(e *echo.Echo) {
	c.ui.Mount(e)
	e.GET("/ui/", c.jobsPage)
	e.GET("/ui/jobs/:id", c.jobPage)
	e.GET("/ui/queue", c.queuePage)
	e.GET("/ui/library", c.libraryPage)
	e.GET("/ui/history.json", echo.WrapHandler(c.history))
}

// Run samples the history until ctx ends.
func (c *Console) Run(ctx context.Context) error { return c.history.Run(ctx) }

func (c *Console) render(ec echo.Context, status int, page, title, active string, data any) error {
	return c.pages[page].Render(ec, status, ui.View{Title: title, Active: active, Data: data})
}

// statuses are the filters of the jobs list.
var statuses = []string{jobs.Queued, jobs.Running, jobs.Done, jobs.Error, jobs.Canceled}

type jobsData struct {
	List     JobList
	Status   string
	Statuses []string
	Tasks    []string
	Limit    int
}

func (c *Console) jobsPage(ec echo.Context) error {
	status := ec.QueryParam("status")
	if status != "" && !contains(statuses, status) {
		return c.render(ec, http.StatusBadRequest, "notfound", "Unknown status", "/ui/", daemon.CapMessage("no job status "+status))
	}
	list, err := LatestJobs(ec.Request().Context(), c.d.Jobs.Redis(), status, 100)
	if err != nil {
		return err
	}
	return c.render(ec, http.StatusOK, "jobs", "Jobs", "/ui/",
		jobsData{List: list, Status: status, Statuses: statuses, Tasks: jobs.Tasks, Limit: 100})
}

type jobData struct {
	Job      *jobs.Job
	Terminal bool
}

func (c *Console) jobPage(ec echo.Context) error {
	id := ec.Param("id")
	if _, err := uuid.Parse(id); err != nil || len(id) != 36 {
		return c.render(ec, http.StatusNotFound, "notfound", "Job not found", "/ui/", daemon.CapMessage("no job "+id))
	}
	j, err := c.d.Jobs.Get(ec.Request().Context(), id)
	if errors.Is(err, jobs.ErrNotFound) {
		return c.render(ec, http.StatusNotFound, "notfound", "Job not found", "/ui/",
			"no job "+id+" (unknown, or expired after its TTL)")
	}
	if errors.Is(err, jobs.ErrUnknownStatus) {
		return c.render(ec, http.StatusConflict, "notfound", "Job unreadable", "/ui/",
			"job "+id+" is not stored as a job hash (its key holds another type)")
	}
	if err != nil {
		return err
	}
	// The hash's fields are whatever the worker side wrote.
	shown := *j
	shown.ID, shown.Task, shown.Status = daemon.CapMessage(j.ID), daemon.CapMessage(j.Task), daemon.CapMessage(j.Status)
	return c.render(ec, http.StatusOK, "job", "Job "+shown.ID, "/ui/", jobData{Job: &shown, Terminal: jobs.IsTerminal(j.Status)})
}

type readiness struct {
	Name  string
	Error string
}

type queueData struct {
	Queue Queue
	Ready []readiness
}

func (c *Console) queuePage(ec echo.Context) error {
	ctx := ec.Request().Context()
	d := queueData{Ready: c.readiness(ctx)}
	q, err := ReadQueue(ctx, c.d.Jobs, 20)
	if err != nil {
		d.Ready = append(d.Ready, readiness{Name: "queue", Error: errorText(err)})
	}
	d.Queue = q
	return c.render(ec, http.StatusOK, "queue", "Queue health", "/ui/queue", d)
}

// readiness probes what /ready probes for the parts the console shows.
func (c *Console) readiness(ctx context.Context) []readiness {
	probe := func(name string, f func(context.Context) error) readiness {
		pctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		r := readiness{Name: name}
		if err := f(pctx); err != nil {
			r.Error = errorText(err)
		}
		return r
	}
	out := []readiness{probe("redis", func(ctx context.Context) error { return c.d.Jobs.Redis().Ping(ctx).Err() })}
	l, unavailable := c.library()
	switch {
	case l != nil:
		out = append(out, probe("library", l.Store.Ping))
	case unavailable != "":
		out = append(out, readiness{Name: "library", Error: unavailable})
	default:
		out = append(out, readiness{Name: "library", Error: "not configured (EUTERPE_LIBRARY_ROOTS is empty)"})
	}
	return out
}

// library is the open library, or nil and, when the library is configured
// but its database is not open, what to say about it ("" when it is off).
func (c *Console) library() (*library.Library, string) {
	if l := c.d.Library(); l != nil {
		return l, ""
	}
	if c.d.LibraryState == nil {
		return nil, ""
	}
	st := c.d.LibraryState()
	if !st.Configured {
		return nil, ""
	}
	// Not "off": an operator must not go and set EUTERPE_LIBRARY_ROOTS
	// when the state directory is full or read-only.
	reason := "the reason is in the edge log"
	if st.OpenErr != nil {
		reason = errorText(st.OpenErr)
	}
	return nil, "the library database cannot be opened: " + reason + "; jobs run as usual; retrying"
}

type libraryData struct {
	Configured  bool
	Unavailable string // why a configured library shows nothing
	View        LibraryView
}

func (c *Console) libraryPage(ec echo.Context) error {
	l, unavailable := c.library()
	if unavailable != "" {
		return c.render(ec, http.StatusServiceUnavailable, "library", "Library", "/ui/library",
			libraryData{Configured: true, Unavailable: unavailable})
	}
	if l == nil {
		return c.render(ec, http.StatusOK, "library", "Library", "/ui/library", libraryData{})
	}
	v, err := ReadLibrary(ec.Request().Context(), l)
	if err != nil {
		return err
	}
	return c.render(ec, http.StatusOK, "library", "Library", "/ui/library", libraryData{Configured: true, View: v})
}

func contains(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}

func (c *Console) funcs() template.FuncMap {
	return template.FuncMap{
		// ago renders a unix-ms time as an age ("3 min ago").
		"ago": func(ms int64) string {
			if ms <= 0 {
				return ""
			}
			return humanDuration(c.d.Now().Sub(time.UnixMilli(ms))) + " ago"
		},
		"agoPtr": func(ms *int64) string {
			if ms == nil || *ms <= 0 {
				return ""
			}
			return humanDuration(c.d.Now().Sub(time.UnixMilli(*ms))) + " ago"
		},
		// took renders the span between two unix-ms times.
		"took": func(from, to int64) string {
			if from <= 0 || to < from {
				return ""
			}
			return humanDuration(time.Duration(to-from) * time.Millisecond)
		},
		"ms":     func(d int64) string { return humanDuration(time.Duration(d) * time.Millisecond) },
		"utc":    func(ms int64) string { return time.UnixMilli(ms).UTC().Format("2006-01-02 15:04:05Z") },
		"bytes":  humanBytes,
		"pretty": ui.Pretty,
		"clip":   func(s string) string { return ui.Clip(s, len(s)) },
		"deref": func(p *string) string {
			if p == nil {
				return ""
			}
			return *p
		},
		"derefInt": func(p *int64) int64 {
			if p == nil {
				return 0
			}
			return *p
		},
		"errorJSON": errorJSON,
		"pct":       func(f float64) string { return fmt.Sprintf("%.0f%%", f*100) },
		// The id is one path segment whatever it holds: job ids in
		// dead letters and queue entries are written by any worker.
		"jobURL":   func(id string) string { return "/ui/jobs/" + url.PathEscape(id) },
		"terminal": jobs.IsTerminal,
	}
}

// errorText is an error as the console shows it: capped, and without a
// password a connection URL in it may carry.
func errorText(err error) string { return daemon.CapMessage(daemon.RedactURL(err.Error())) }

// errorJSON renders a job's error field indented, every string in it
// capped with daemon.CapMessage: the field is whatever the worker side
// stored (a worker of another implementation caps nothing), and cutting
// the strings rather than the document keeps it JSON. A document still
// longer than PageText (many strings) is clipped like a payload.
func errorJSON(raw json.RawMessage) string {
	if len(raw) == 0 {
		return ""
	}
	if len(raw) > 4*PageText {
		return ui.Clip(string(raw), len(raw))
	}
	var v any
	if err := json.Unmarshal(raw, &v); err != nil {
		return daemon.CapMessage(string(raw))
	}
	b, err := json.MarshalIndent(capStrings(v), "", "  ")
	if err != nil {
		return daemon.CapMessage(string(raw))
	}
	return ui.Clip(string(b), len(raw))
}

func capStrings(v any) any {
	switch x := v.(type) {
	case string:
		return daemon.CapMessage(x)
	case []any:
		for i := range x {
			x[i] = capStrings(x[i])
		}
	case map[string]any:
		for k := range x {
			x[k] = capStrings(x[k])
		}
	}
	return v
}

func humanDuration(d time.Duration) string {
	switch {
	case d < 0:
		return "0 s"
	case d < time.Second:
		return fmt.Sprintf("%d ms", d.Milliseconds())
	case d < time.Minute:
		return fmt.Sprintf("%.1f s", d.Seconds())
	case d < time.Hour:
		return fmt.Sprintf("%d min %d s", int(d.Minutes()), int(d.Seconds())%60)
	case d < 48*time.Hour:
		return fmt.Sprintf("%d h %d min", int(d.Hours()), int(d.Minutes())%60)
	}
	return fmt.Sprintf("%d d", int(d.Hours()/24))
}

func humanBytes(n int64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	div, exp := int64(unit), 0
	for m := n / unit; m >= unit; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %ciB", float64(n)/float64(div), "KMGTPE"[exp])
}
