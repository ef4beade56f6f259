package console

import (
	"errors"
	"net/http"

	"github.com/labstack/echo/v4"
	"github.com/vesta-cx/euterpe/daemon"
	"github.com/vesta-cx/euterpe/daemon/sqldb"
	"github.com/vesta-cx/euterpe/sync/ingest"
)

type fleetView struct {
	Edges      []ingest.EdgeView
	StaleAfter string
	TailPath   string
}

func (r *Role) fleetPage(c echo.Context) error {
	edges, err := r.fleet.Edges(c.Request().Context(), r.staleAfter)
	if err != nil {
		return err
	}
	return r.render(c, r.ui.fleet, "Fleet", pathFleet, fleetView{Edges: edges, StaleAfter: r.staleAfter.String(), TailPath: pathTail})
}

// edgeStatuses are the edge job statuses the sync store knows.
var edgeStatuses = []string{"queued", "running", "done", "error", "canceled"}

type edgeView struct {
	Edge     ingest.EdgeView
	Jobs     []ingest.JobView
	Status   string
	Statuses []string
	Next     string
	TailPath string
}

func (r *Role) edgePage(c echo.Context) error {
	ctx := c.Request().Context()
	if !sqldb.IsText(c.QueryParam("id")) {
		return daemon.Errorf(http.StatusNotFound, "not_found", "no such edge")
	}
	e, err := r.fleet.Edge(ctx, c.QueryParam("id"), r.staleAfter)
	if errors.Is(err, ingest.ErrNotFound) {
		return daemon.Errorf(http.StatusNotFound, "not_found", "no such edge")
	}
	if err != nil {
		return err
	}
	status := c.QueryParam("status")
	valid := status == ""
	for _, s := range edgeStatuses {
		valid = valid || s == status
	}
	if !valid {
		return daemon.Errorf(http.StatusBadRequest, "invalid_request", "status must be queued, running, done, error or canceled")
	}
	jobs, next, err := r.fleet.Jobs(ctx, e.EdgeID, status, c.QueryParam("cursor"), 100)
	if errors.Is(err, ingest.ErrBadCursor) {
		return daemon.Errorf(http.StatusBadRequest, "invalid_cursor", "cursor is not one this page made")
	}
	if err != nil {
		return err
	}
	return r.render(c, r.ui.edge, "Edge "+e.Name, pathFleet, edgeView{Edge: e, Jobs: jobs, Status: status, Statuses: edgeStatuses, Next: next, TailPath: pathTail})
}

type edgeJobView struct {
	Job    ingest.JobView
	Events []ingest.EventView
	Gaps   []ingest.GapView
	More   bool // the job has events past the first edgeJobEvents
}

// edgeJobEvents is how many of a job's events its page shows, each clipped
// to dconsole.PageText: a job may hold thousands of 64 KiB events, which
// would make a page of hundreds of megabytes on the pod that builds it.
// euterpectl edges events prints them all.
const edgeJobEvents = 500

func (r *Role) edgeJobPage(c echo.Context) error {
	ctx := c.Request().Context()
	if !sqldb.IsText(c.QueryParam("edge")) || !sqldb.IsText(c.QueryParam("id")) {
		return daemon.Errorf(http.StatusNotFound, "not_found", "no such job on this edge")
	}
	j, err := r.fleet.Job(ctx, c.QueryParam("edge"), c.QueryParam("id"))
	if errors.Is(err, ingest.ErrNotFound) {
		return daemon.Errorf(http.StatusNotFound, "not_found", "no such job on this edge")
	}
	if err != nil {
		return err
	}
	events, gaps, err := r.fleet.JobEvents(ctx, j.EdgeID, j.JobID, "", edgeJobEvents+1)
	if err != nil {
		return err
	}
	v := edgeJobView{Job: j, Events: events, Gaps: gaps}
	if len(events) > edgeJobEvents {
		v.Events, v.More = events[:edgeJobEvents], true
	}
	return r.render(c, r.ui.edgeJob, "Edge job "+j.JobID, pathFleet, v)
}
