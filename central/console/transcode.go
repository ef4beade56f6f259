package console

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"

	"github.com/labstack/echo/v4"
	"github.com/vesta-cx/euterpe/central/inbox"
	"github.com/vesta-cx/euterpe/central/outbox"
	"github.com/vesta-cx/euterpe/central/schema"
	"github.com/vesta-cx/euterpe/daemon"
	"github.com/vesta-cx/euterpe/daemon/sqldb"
)

// jobStatuses are the filters of the job list, in lifecycle order.
var jobStatuses = []string{schema.StatusQueued, schema.StatusClaimed, schema.StatusFetching, schema.StatusProcessing,
	schema.StatusUploading, schema.StatusSucceeded, schema.StatusFailed, schema.StatusDeadLetter}

type overview struct {
	Jobs        map[string]int64
	Running     int64
	Outbox      map[string]int64
	Edges       int
	StaleEdges  int
	Fleet       bool
	Pipeline    bool
	PBacklog    int64
	PDLQ        int64
	HistoryPath string
}

func (r *Role) overviewPage(c echo.Context) error {
	ctx := c.Request().Context()
	v := overview{Jobs: map[string]int64{}, Outbox: map[string]int64{}, Fleet: r.withFleet, Pipeline: r.withPipeline, HistoryPath: pathHistory}
	if err := r.countBy(c, "inbox_jobs", v.Jobs); err != nil {
		return err
	}
	for _, s := range []string{schema.StatusClaimed, schema.StatusFetching, schema.StatusProcessing, schema.StatusUploading} {
		v.Running += v.Jobs[s]
	}
	if err := r.countBy(c, "job_outbox_events", v.Outbox); err != nil {
		return err
	}
	if r.withFleet {
		edges, err := r.fleet.Edges(ctx, r.staleAfter)
		if err != nil {
			return err
		}
		v.Edges = len(edges)
		for _, e := range edges {
			if e.Stale && e.DisabledAt == nil {
				v.StaleEdges++
			}
		}
	}
	if r.withPipeline {
		var err error
		if v.PBacklog, v.PDLQ, err = r.pipeline.Counts(ctx); err != nil {
			return err
		}
	}
	return r.render(c, r.ui.overview, "Overview", pathOverview, v)
}

// countBy counts table's rows by status into m.
func (r *Role) countBy(c echo.Context, table string, m map[string]int64) error {
	rows, err := r.db().QueryContext(c.Request().Context(), `SELECT status, COUNT(*) FROM `+table+` GROUP BY status`)
	if err != nil {
		return fmt.Errorf("console: count %s: %w", table, err)
	}
	defer rows.Close()
	for rows.Next() {
		var s string
		var n int64
		if err := rows.Scan(&s, &n); err != nil {
			return err
		}
		m[s] = n
	}
	return rows.Err()
}

type jobsView struct {
	Status   string
	Statuses []string
	Jobs     []*inbox.View
	Limit    int
	Next     string
}

// listPageSize is how many rows a page of the job and dead-letter lists
// shows; tests make it small to page through a few rows.
var listPageSize atomic.Int64

func init() { listPageSize.Store(200) }

func (r *Role) jobsPage(c echo.Context) error {
	status := c.QueryParam("status")
	if status != "" && !slices.Contains(jobStatuses, status) {
		return daemon.Errorf(http.StatusBadRequest, "invalid_request", "status must be one of %s", strings.Join(jobStatuses, ", "))
	}
	f := inbox.Filter{Status: status, Cursor: c.QueryParam("cursor"), Limit: int(listPageSize.Load())}
	page, err := r.inbox.List(c.Request().Context(), f)
	if errors.Is(err, inbox.ErrBadCursor) {
		return daemon.Errorf(http.StatusBadRequest, "invalid_cursor", "cursor is not one this page made")
	}
	if err != nil {
		return err
	}
	return r.render(c, r.ui.jobs, "Transcode jobs", pathJobs, jobsView{Status: status, Statuses: jobStatuses, Jobs: page.Jobs,
		Limit: f.Limit, Next: page.NextCursor})
}

type jobView struct {
	Job        *inbox.View
	Pruned     bool
	Outputs    []inbox.OutputFile
	Deliveries []outbox.Delivery
	Back       string
}

func (r *Role) jobPage(c echo.Context) error {
	ctx := c.Request().Context()
	id := c.QueryParam("id")
	if !sqldb.IsText(id) {
		return daemon.Errorf(http.StatusNotFound, "not_found", "no such job")
	}
	v, err := r.inbox.Get(ctx, id)
	switch {
	case errors.Is(err, inbox.ErrNotFound):
		return daemon.Errorf(http.StatusNotFound, "not_found", "no such job")
	case errors.Is(err, inbox.ErrPruned):
	case err != nil:
		return err
	}
	out := jobView{Job: v, Pruned: v.Pruned, Back: pathJob + "?id=" + url.QueryEscape(id)}
	if len(v.Outputs) > 0 {
		_ = json.Unmarshal(v.Outputs, &out.Outputs) // shown raw below when it does not parse
	}
	if out.Deliveries, err = r.outbox.Deliveries(ctx, id); err != nil {
		return err
	}
	return r.render(c, r.ui.job, "Job "+id, pathJobs, out)
}

type deadView struct {
	Events []outbox.Delivery
	Back   string
	Next   string
}

func (r *Role) deadPage(c echo.Context) error {
	page, err := r.outbox.DeadLetters(c.Request().Context(), outbox.DeadFilter{Cursor: c.QueryParam("cursor"), Limit: int(listPageSize.Load())})
	if errors.Is(err, outbox.ErrBadCursor) {
		return daemon.Errorf(http.StatusBadRequest, "invalid_cursor", "cursor is not one this page made")
	}
	if err != nil {
		return err
	}
	return r.render(c, r.ui.dead, "Webhook dead letters", pathDead, deadView{Events: page.Events, Back: pathDead, Next: page.NextCursor})
}

// redriveWebhook puts dead-lettered outbox events back through the same
// path as `euterpe-central outbox redrive`: one event (event_id) or every
// dead letter of a job (job_id).
func (r *Role) redriveWebhook(c echo.Context) error {
	f := outbox.RedriveFilter{JobID: strings.TrimSpace(c.FormValue("job_id"))}
	if id := strings.TrimSpace(c.FormValue("event_id")); id != "" {
		f.EventIDs = []string{id}
	}
	if !sqldb.IsText(f.JobID) || !sqldb.IsText(strings.Join(f.EventIDs, "")) {
		return daemon.Errorf(http.StatusBadRequest, "invalid_request", "event_id and job_id must be UTF-8 text without NUL")
	}
	n, err := r.outbox.Redrive(c.Request().Context(), f)
	if errors.Is(err, outbox.ErrEmptyFilter) {
		return daemon.Errorf(http.StatusBadRequest, "invalid_request", "give an event_id or a job_id")
	}
	if err != nil {
		return err
	}
	op := operatorOf(c)
	r.log.Info("outbox events redriven from the console", "operator_id", op.ID, "count", n, "job_id", f.JobID, "event_ids", f.EventIDs)
	return c.Redirect(http.StatusSeeOther, withRedriven(nextPath(c.FormValue("back")), n))
}

// withRedriven tells the next page how many items a redrive moved. Only a
// number travels in the URL, so a crafted link cannot put words on a page.
func withRedriven(path string, n int64) string {
	u, err := url.Parse(path)
	if err != nil {
		return path
	}
	q := u.Query()
	q.Set("redriven", strconv.FormatInt(n, 10))
	u.RawQuery = q.Encode()
	return u.String()
}
