package ingest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strconv"
	"time"

	"github.com/labstack/echo/v4"
	"github.com/vesta-cx/euterpe/daemon"
	"github.com/vesta-cx/euterpe/sync/wire"
)

// API is the operator API over the ingested data: the fleet, an edge's
// jobs, a job's events and gaps, and the live fleet tail. Every route sits
// behind the operator-token middleware.
type API struct {
	Store *Store
	Auth  echo.MiddlewareFunc
	Log   *slog.Logger
	// StaleAfter: an edge not seen for longer is reported stale.
	StaleAfter time.Duration
	// Tail pacing: Poll is how often a tail looks for rows other pods
	// wrote; Heartbeat is the comment frame interval; WriteTimeout bounds
	// each write to a client.
	Poll, Heartbeat, WriteTimeout time.Duration
	// On Postgres the tails log a warning when rows have been held back
	// from them (see TailHeld) by the same horizon for HeldWarnAfter, at
	// most once per HeldWarnEvery (0: DefaultHeldWarnAfter,
	// DefaultHeldWarnEvery), so a stall shows in the log, not only in the
	// metrics.
	HeldWarnAfter, HeldWarnEvery time.Duration
	wake                         *wakeup
	held                         heldWatch
}

// Routes are the operator routes API mounts (method, echo path); the
// OpenAPI test checks each is documented.
var Routes = [][2]string{
	{http.MethodGet, "/v1/edges"},
	{http.MethodGet, "/v1/edges/events"},
	{http.MethodGet, "/v1/edges/:id"},
	{http.MethodGet, "/v1/edges/:id/jobs"},
	{http.MethodGet, "/v1/edges/:id/jobs/:job_id/events"},
}

// Mount adds the operator routes to e.
func (a *API) Mount(e *echo.Echo) {
	if a.wake == nil {
		a.wake = newWakeup()
	}
	g := e.Group("/v1/edges", a.Auth)
	g.GET("", a.list)
	g.GET("/events", a.Tail)
	g.GET("/:id", a.get)
	g.GET("/:id/jobs", a.jobs)
	g.GET("/:id/jobs/:job_id/events", a.events)
}

// checkHeld looks, at most once per Heartbeat for all of a's tails,
// whether a transaction holds the tails back, and warns (see heldWatch).
func (a *API) checkHeld(ctx context.Context) {
	after, every := a.HeldWarnAfter, a.HeldWarnEvery
	if after <= 0 {
		after = DefaultHeldWarnAfter
	}
	if every <= 0 {
		every = DefaultHeldWarnEvery
	}
	a.held.check(ctx, a.Store, a.Log, a.Heartbeat, after, every)
}

// Notify wakes this process's tails after a commit.
func (a *API) Notify() {
	if a.wake != nil {
		a.wake.Notify()
	}
}

func notFound(what string) error {
	return daemon.Errorf(http.StatusNotFound, "not_found", "%s", what)
}

func badRequest(code, format string, args ...any) error {
	return daemon.Errorf(http.StatusBadRequest, code, format, args...)
}

func (a *API) list(c echo.Context) error {
	edges, err := a.Store.Edges(c.Request().Context(), a.StaleAfter)
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, map[string]any{"edges": edges})
}

func (a *API) get(c echo.Context) error {
	v, err := a.Store.Edge(c.Request().Context(), c.Param("id"), a.StaleAfter)
	if errors.Is(err, ErrNotFound) {
		return notFound("no such edge")
	}
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, v)
}

// intParam reads an optional bounded integer query parameter.
func intParam(c echo.Context, name string, def, lo, hi int) (int, error) {
	v := c.QueryParam(name)
	if v == "" {
		return def, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < lo || n > hi {
		return 0, badRequest("invalid_request", "%s must be an integer from %d to %d", name, lo, hi)
	}
	return n, nil
}

var jobStatuses = map[string]bool{StatusQueued: true, StatusRunning: true, StatusDone: true, StatusError: true, StatusCanceled: true}

func (a *API) jobs(c echo.Context) error {
	ctx := c.Request().Context()
	id := c.Param("id")
	status := c.QueryParam("status")
	if status != "" && !jobStatuses[status] {
		return badRequest("invalid_request", "status must be queued, running, done, error or canceled")
	}
	limit, err := intParam(c, "limit", 50, 1, 500)
	if err != nil {
		return err
	}
	if _, err := a.Store.Edge(ctx, id, a.StaleAfter); errors.Is(err, ErrNotFound) {
		return notFound("no such edge")
	} else if err != nil {
		return err
	}
	jobs, next, err := a.Store.Jobs(ctx, id, status, c.QueryParam("cursor"), limit)
	if errors.Is(err, ErrBadCursor) {
		return badRequest("invalid_cursor", "cursor is not one this API returned")
	}
	if err != nil {
		return err
	}
	out := map[string]any{"jobs": jobs}
	if next != "" {
		out["next_cursor"] = next
	}
	return c.JSON(http.StatusOK, out)
}

func (a *API) events(c echo.Context) error {
	ctx := c.Request().Context()
	after := c.QueryParam("after")
	if after != "" && !wire.ValidEntryID(after) {
		return badRequest("invalid_request", `after must be a stream entry id "<ms>-<seq>"`)
	}
	limit, err := intParam(c, "limit", 1000, 1, 5000)
	if err != nil {
		return err
	}
	job, err := a.Store.Job(ctx, c.Param("id"), c.Param("job_id"))
	if errors.Is(err, ErrNotFound) {
		return notFound("no such job on this edge")
	}
	if err != nil {
		return err
	}
	events, gaps, err := a.Store.JobEvents(ctx, job.EdgeID, job.JobID, after, limit)
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, map[string]any{"job": job, "events": events, "gaps": gaps})
}

const tailPage = 500

// Tail is GET /v1/edges/events: every stored edge event, live, as
// Server-Sent Events (id = seq, event = edge_event). It starts at the
// current end, or after Last-Event-ID (exactly) or ?last_event_id= (at
// least once; 0: from the oldest retained event); ?edge_id= keeps one
// edge's events. The console mounts it too, behind its own sign-in; an
// API not built by New (no wakeup) finds new rows by polling alone.
func (a *API) Tail(c echo.Context) error {
	r := c.Request()
	ctx := r.Context()
	// Last-Event-ID is what a client sends on reconnecting: the id of the
	// last event this tail sent it, resumed exactly. ?last_event_id= takes
	// any event's seq (one read from the operator API): resumed at least
	// once, so nothing committed after that read is skipped. A reconnect
	// to a URL with both carries the newer position in the header.
	start := a.Store.TailStart
	last := r.Header.Get("Last-Event-ID")
	if last == "" {
		last = c.QueryParam("last_event_id")
		start = a.Store.TailStartAnySeq
	}
	from := int64(-1)
	if last != "" {
		n, err := parseLastEventID(last)
		if err != nil {
			return badRequest("invalid_last_event_id", "%s", err.Error())
		}
		from = n
	}
	edge := c.QueryParam("edge_id")
	cur, err := start(ctx, from)
	if err != nil {
		return err
	}
	w := c.Response()
	rc := http.NewResponseController(w)
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	h.Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	write := func(b []byte) error {
		_ = rc.SetWriteDeadline(time.Now().Add(a.WriteTimeout))
		if _, err := w.Write(b); err != nil {
			return err
		}
		return rc.Flush()
	}
	if write([]byte("retry: 2000\n: connected\n\n")) != nil {
		return nil
	}
	poll := time.NewTicker(a.Poll)
	defer poll.Stop()
	beat := time.NewTicker(a.Heartbeat)
	defer beat.Stop()
	for {
		var wake <-chan struct{}
		if a.wake != nil {
			wake = a.wake.C() // before reading, so a commit during the read is not missed
		}
		page, next, err := a.Store.TailPage(ctx, cur, tailPage)
		if err != nil {
			if ctx.Err() == nil {
				a.Log.Warn("fleet tail: read failed", "err", err)
			}
			return nil
		}
		var frames []byte
		for _, e := range page {
			if edge != "" && e.EdgeID != edge {
				continue
			}
			data, _ := json.Marshal(e)
			frames = fmt.Appendf(frames, "id: %d\nevent: edge_event\ndata: %s\n\n", e.Seq, data)
		}
		// The credential that opened the stream may have ended since
		// (sign-out, expiry, a disabled operator): nothing more is sent.
		if len(frames) > 0 && (daemon.Recheck(c) != nil || write(frames) != nil) {
			return nil
		}
		cur = next
		if len(page) == tailPage {
			continue
		}
		select {
		case <-ctx.Done():
			return nil
		case <-wake:
		case <-poll.C:
		case <-beat.C:
			if daemon.Recheck(c) != nil || write([]byte(": ping\n\n")) != nil {
				return nil
			}
			a.checkHeld(ctx)
		}
	}
}
