package console

import (
	"errors"
	"net/http"
	"net/url"
	"path"
	"strings"

	"github.com/labstack/echo/v4"
	"github.com/vesta-cx/euterpe/central/pipeline"
	"github.com/vesta-cx/euterpe/central/pipeline/objstore"
	"github.com/vesta-cx/euterpe/daemon"
	dconsole "github.com/vesta-cx/euterpe/daemon/console"
	"github.com/vesta-cx/euterpe/daemon/lease"
)

type pipelineView struct {
	Days                 []pipeline.DayCount
	Jobs                 []pipeline.JobRecord
	Asof, Symbol, Status string
	JobType              string
	Statuses             []string
	Next                 string
	Reports              bool
	HistoryPath          string
	Back                 string
}

func (r *Role) pipelinePage(c echo.Context) error {
	ctx := c.Request().Context()
	f := pipeline.Filter{Asof: c.QueryParam("asof"), Symbol: c.QueryParam("symbol"), Status: c.QueryParam("status"),
		JobType: c.QueryParam("job_type"), Cursor: c.QueryParam("cursor"), Limit: 100}
	// The API's check: a value no job can have is refused, not shown as an
	// empty page.
	var fe *pipeline.FilterError
	if err := f.Check(); errors.As(err, &fe) {
		return daemon.Errorf(http.StatusBadRequest, "invalid_request", "%s", fe.Message)
	}
	days, err := r.pipeline.ByDay(ctx, 14)
	if err != nil {
		return err
	}
	page, err := r.pipeline.List(ctx, f)
	if errors.Is(err, pipeline.ErrBadCursor) {
		return daemon.Errorf(http.StatusBadRequest, "invalid_cursor", "cursor is not one this page made")
	}
	if err != nil {
		return err
	}
	return r.render(c, r.ui.pipeline, "Pipeline", pathPipeline, pipelineView{Days: days, Jobs: page.Jobs, Asof: f.Asof,
		Symbol: f.Symbol, Status: f.Status, JobType: f.JobType, Statuses: pipeline.ListStatuses, Next: page.NextCursor, Reports: r.reports != nil,
		HistoryPath: pathHistory, Back: c.Request().URL.RequestURI()})
}

func (r *Role) dlqPage(c echo.Context) error {
	page, err := r.pipeline.List(c.Request().Context(), pipeline.Filter{Status: pipeline.StatusDeadLetter, Cursor: c.QueryParam("cursor"), Limit: 200})
	if errors.Is(err, pipeline.ErrBadCursor) {
		return daemon.Errorf(http.StatusBadRequest, "invalid_cursor", "cursor is not one this page made")
	}
	if err != nil {
		return err
	}
	return r.render(c, r.ui.dlq, "Pipeline dead-letter queue", pathDLQ, pipelineView{Jobs: page.Jobs, Next: page.NextCursor, Back: pathDLQ})
}

// redrivePipeline is the pipeline API's redrive (pipeline.Store.Redrive)
// behind the console's sign-in.
func (r *Role) redrivePipeline(c echo.Context) error {
	id := strings.TrimSpace(c.FormValue("id"))
	_, err := r.pipeline.Redrive(c.Request().Context(), id)
	var te *lease.TransitionError
	switch {
	case errors.Is(err, pipeline.ErrNotFound):
		return daemon.Errorf(http.StatusNotFound, "not_found", "no such pipeline job")
	case errors.As(err, &te):
		return daemon.Errorf(http.StatusConflict, "not_dead_lettered", "only a dead-lettered job is redriven")
	case errors.Is(err, pipeline.ErrConflict):
		return daemon.Errorf(http.StatusConflict, "conflict", "another job of the same key is active")
	case err != nil:
		return err
	}
	op := operatorOf(c)
	r.log.Info("pipeline job redriven from the console", "operator_id", op.ID, "job_id", id)
	return c.Redirect(http.StatusSeeOther, withRedriven(nextPath(c.FormValue("back")), 1))
}

// reportPage shows a succeeded job's stored report as plain text: read
// through the report store (which refuses any ref outside it), never
// rendered as HTML.
func (r *Role) reportPage(c echo.Context) error {
	if r.reports == nil {
		return daemon.Errorf(http.StatusNotFound, "not_found", "the report store cannot be read back")
	}
	ctx := c.Request().Context()
	j, err := r.pipeline.GetByID(ctx, c.QueryParam("id"))
	if errors.Is(err, pipeline.ErrNotFound) || (err == nil && j.ResultRef == "") {
		return daemon.Errorf(http.StatusNotFound, "not_found", "no report for this job")
	}
	if err != nil {
		return err
	}
	body, err := r.reports.Get(ctx, j.ResultRef)
	switch {
	case errors.Is(err, objstore.ErrForeignRef):
		return daemon.Errorf(http.StatusNotFound, "not_found", "the report is not in the configured store")
	case errors.Is(err, objstore.ErrTooLarge):
		return daemon.Errorf(http.StatusRequestEntityTooLarge, "too_large", "the report is too large to show")
	case err != nil:
		r.log.Warn("read pipeline report", "job_id", j.JobID, "err", err)
		return daemon.Errorf(http.StatusBadGateway, "unavailable", "the report cannot be read")
	}
	h := c.Response().Header()
	dconsole.SecurityHeaders(h)
	h.Set("Content-Security-Policy", "sandbox; default-src 'none'")
	name := "report"
	if u, err := url.Parse(j.ResultRef); err == nil {
		name = path.Base(u.Path)
	}
	h.Set("Content-Disposition", `inline; filename="`+strings.Map(safeName, name)+`"`)
	return c.Blob(http.StatusOK, "text/plain; charset=utf-8", body)
}

func safeName(r rune) rune {
	if r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '.' || r == '-' || r == '_' {
		return r
	}
	return '_'
}
