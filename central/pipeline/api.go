package pipeline

import (
	"bytes"
	"context"
	_ "embed"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"strconv"
	"time"

	"github.com/labstack/echo/v4"
	"github.com/vesta-cx/euterpe/central/operators"
	"github.com/vesta-cx/euterpe/daemon"
	"github.com/vesta-cx/euterpe/daemon/lease"
	"github.com/vesta-cx/euterpe/daemon/sqldb"
)

//go:embed openapi.json
var openAPI []byte

// OpenAPI is the fragment of /openapi.json for the routes Mount adds.
func OpenAPI() []byte { return openAPI }

// SubmitRequest is the body of POST /v1/pipeline/jobs.
type SubmitRequest struct {
	JobType string `json:"job_type"`
	Symbol  string `json:"symbol"`
	Asof    string `json:"asof"`
}

// Redriven is the answer of POST /v1/pipeline/jobs/{id}/redrive.
type Redriven struct {
	JobID  string `json:"job_id"`
	Status string `json:"status"`
}

// API is the operator API of the pipeline queue.
type API struct {
	Store *Store
	Log   *slog.Logger
	// Retry is the in-request retry of an enqueue that found the database
	// unreachable (§3.3: exponential back-off): attempts and backoff, all
	// within Budget; then 503 QUEUE_UNAVAILABLE with Retry-After.
	Attempts int
	Backoff  lease.Backoff
	Budget   time.Duration
}

// MaxBodyBytes bounds a submit body.
const MaxBodyBytes = 16 << 10

// Routes lists what Mount adds (method and echo path), for the OpenAPI test.
var Routes = [][2]string{
	{http.MethodPost, "/v1/pipeline/jobs"},
	{http.MethodGet, "/v1/pipeline/jobs"},
	{http.MethodGet, "/v1/pipeline/jobs/:id"},
	{http.MethodPost, "/v1/pipeline/jobs/:id/redrive"},
	{http.MethodGet, "/v1/pipeline/dlq"},
	{http.MethodGet, "/v1/pipeline/schedule/refused"},
}

// Mount adds the routes behind auth (the operator-token middleware).
func (a *API) Mount(e *echo.Echo, auth echo.MiddlewareFunc) {
	g := e.Group("/v1/pipeline", a.authUnavailable(auth))
	g.POST("/jobs", a.submit)
	g.GET("/jobs", a.list)
	g.GET("/jobs/:id", a.get)
	g.POST("/jobs/:id/redrive", a.redrive)
	g.GET("/dlq", a.dlq)
	g.GET("/schedule/refused", a.refused)
}

// authUnavailable wraps the operator-token middleware: the token is looked
// up in the same database as the queue, so when that lookup cannot reach it
// the answer is the contract's — QUEUE_UNAVAILABLE on a submit,
// REPO_UNAVAILABLE elsewhere, 503 with Retry-After — after the same
// in-request retries a submit gets.
func (a *API) authUnavailable(auth echo.MiddlewareFunc) echo.MiddlewareFunc {
	return func(next echo.HandlerFunc) echo.HandlerFunc {
		h := auth(next)
		return func(c echo.Context) error {
			code := CodeRepoUnavailable
			if c.Request().Method == http.MethodPost && c.Path() == "/v1/pipeline/jobs" {
				code = CodeQueueUnavailable
			}
			deadline := time.Now().Add(a.Budget)
			for attempt := 1; ; attempt++ {
				err := h(c)
				var ae *daemon.APIError
				if !errors.As(err, &ae) || ae.Status != http.StatusServiceUnavailable || ae.Code != "unavailable" {
					return err
				}
				if err := c.Request().Context().Err(); err != nil {
					return err // the client is gone: no answer to give, nothing to alert on
				}
				d := a.Backoff.Delay(attempt)
				if attempt >= a.Attempts || time.Now().Add(d).After(deadline) {
					a.Log.Error("pipeline: database unreachable", "error_code", code, "stage", "operator lookup", "tries", attempt)
					e := daemon.Errorf(http.StatusServiceUnavailable, code, "the pipeline queue database cannot be reached; retry later")
					e.RetryAfter = 5
					return e
				}
				a.Log.Warn("pipeline: database unreachable; retrying", "error_code", code, "stage", "operator lookup", "try", attempt, "retry_in", d.String())
				select {
				case <-c.Request().Context().Done():
				case <-time.After(d):
				}
			}
		}
	}
}

func requestedBy(c echo.Context) string {
	if op, ok := operators.FromContext(c); ok {
		return "operator:" + op.ID
	}
	return "operator"
}

func (a *API) submit(c echo.Context) error {
	body, err := io.ReadAll(http.MaxBytesReader(c.Response(), c.Request().Body, MaxBodyBytes))
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			a.Log.Error("pipeline message refused", "error_code", CodeMessageTooLarge, "requested_by", requestedBy(c), "alert", true)
			return daemon.Errorf(http.StatusRequestEntityTooLarge, CodeMessageTooLarge, "request body exceeds %d bytes", MaxBodyBytes)
		}
		return daemon.Errorf(http.StatusBadRequest, CodeInvalidMessage, "could not read the request body")
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	var r SubmitRequest
	if err := dec.Decode(&r); err != nil || !atEOF(dec) {
		a.Log.Error("pipeline message refused", "error_code", CodeInvalidMessage, "error_message", "body is not one JSON object {job_type, symbol, asof}",
			"requested_by", requestedBy(c), "alert", true)
		return daemon.Errorf(http.StatusBadRequest, CodeInvalidMessage, "body must be one JSON object {job_type, symbol, asof}")
	}
	// One message for every try: a try answered as failed that committed
	// after all is then found by the next as this request's job.
	m := a.Store.Message(Request{JobType: r.JobType, Symbol: r.Symbol, Asof: r.Asof, RequestedBy: requestedBy(c)})
	// m's created_at is the database's clock.
	if err := CheckDayStarted(m.Asof, m.CreatedAt); err != nil {
		jobLog(a.Log, m, "", err).Error("pipeline message refused", alertAttr(err)...)
		return a.errorLog(a.Log, err)
	}
	ctx := c.Request().Context()
	bctx, cancel := context.WithTimeout(ctx, a.Budget)
	defer cancel()
	var out Created
	for attempt := 1; ; attempt++ {
		actx, acancel := context.WithTimeout(bctx, a.Budget/time.Duration(max(a.Attempts, 1)))
		out, err = a.Store.SubmitMessage(actx, m)
		acancel()
		var ue *UnavailableError
		// An outcome left unknown means the server stopped answering while
		// settling it: another try now would only wait out its own.
		if !errors.As(err, &ue) || attempt >= a.Attempts || bctx.Err() != nil || errors.Is(err, sqldb.ErrUnsettled) {
			break
		}
		d := a.Backoff.Delay(attempt)
		jobLog(a.Log, m, "", nil).Warn("pipeline enqueue: queue unavailable; retrying", "error_code", CodeQueueUnavailable, "reason", ue.Reason,
			"try", attempt, "retry_in", d.String())
		select {
		case <-bctx.Done():
		case <-time.After(d):
		}
	}
	if err != nil {
		return a.errorLog(jobLog(a.Log, m, "", nil), err)
	}
	return c.JSON(http.StatusAccepted, out)
}

// error maps store errors to the API's: contract codes for the contract's
// failures, 503 with Retry-After (never 500) for an unreachable database.
func (a *API) error(err error) error { return a.errorLog(a.Log, err) }

// errorLog is error with its log line on lg (a submit's carries the
// message's tracing fields).
func (a *API) errorLog(lg *slog.Logger, err error) error {
	var ue *UnavailableError
	var te *lease.TransitionError
	switch code := ErrorCode(err); {
	case errors.As(err, &ue):
		lg.Error("pipeline: database unreachable", "error_code", ue.Code, "reason", ue.Reason, "err", Redact(err.Error()))
		e := daemon.Errorf(http.StatusServiceUnavailable, ue.Code, "the pipeline queue database cannot be reached (%s); retry later", ue.Reason)
		e.RetryAfter = 5
		return e
	case code == CodeMessageTooLarge || code == CodeInvalidMessage:
		var je *JobError
		errors.As(err, &je)
		status := http.StatusBadRequest
		if code == CodeMessageTooLarge {
			status = http.StatusRequestEntityTooLarge
		}
		return daemon.Errorf(status, code, "%s", je.Message)
	case errors.Is(err, ErrNotFound):
		return daemon.Errorf(http.StatusNotFound, "not_found", "no such pipeline job")
	case errors.Is(err, ErrConflict):
		return daemon.Errorf(http.StatusConflict, CodeIdempotencyConflict, "another job of the same idempotency key is active")
	case errors.As(err, &te):
		return daemon.Errorf(http.StatusConflict, "invalid_transition", "job is %s; only a dead_letter job can be redriven", te.From)
	case errors.Is(err, ErrBadCursor):
		return daemon.Errorf(http.StatusBadRequest, "invalid_request", "invalid cursor")
	}
	return err
}

func (a *API) get(c echo.Context) error {
	j, err := a.Store.GetByID(c.Request().Context(), c.Param("id"))
	if err != nil {
		return a.error(err)
	}
	return c.JSON(http.StatusOK, j)
}

func (a *API) filter(c echo.Context) (Filter, error) {
	f := Filter{Status: c.QueryParam("status"), JobType: c.QueryParam("job_type"), Symbol: c.QueryParam("symbol"), Cursor: c.QueryParam("cursor")}
	var fe *FilterError
	if err := f.Check(); errors.As(err, &fe) {
		return f, daemon.Errorf(http.StatusBadRequest, "invalid_request", "%s", fe.Message)
	}
	n, err := queryLimit(c)
	f.Limit = n
	return f, err
}

// queryLimit reads the limit of a page (1-500; 0 when absent: the
// default).
func queryLimit(c echo.Context) (int, error) {
	l := c.QueryParam("limit")
	if l == "" {
		return 0, nil
	}
	n, err := strconv.Atoi(l)
	if err != nil || n < 1 || n > 500 {
		return 0, daemon.Errorf(http.StatusBadRequest, "invalid_request", "limit must be 1-500")
	}
	return n, nil
}

func (a *API) list(c echo.Context) error {
	f, err := a.filter(c)
	if err != nil {
		return err
	}
	p, err := a.Store.List(c.Request().Context(), f)
	if err != nil {
		return a.error(err)
	}
	return c.JSON(http.StatusOK, p)
}

func (a *API) dlq(c echo.Context) error {
	f, err := a.filter(c)
	if err != nil {
		return err
	}
	if f.Status != "" && f.Status != StatusDeadLetter {
		return daemon.Errorf(http.StatusBadRequest, "invalid_request", "the DLQ holds dead_letter jobs only")
	}
	f.Status = StatusDeadLetter
	p, err := a.Store.List(c.Request().Context(), f)
	if err != nil {
		return a.error(err)
	}
	return c.JSON(http.StatusOK, p)
}

func (a *API) redrive(c echo.Context) error {
	j, err := a.Store.Redrive(c.Request().Context(), c.Param("id"))
	if err != nil {
		return a.error(err)
	}
	a.Log.Info("pipeline job redriven", "job_id", j.JobID, "idempotency_key", j.IdempotencyKey, "symbol", j.Symbol, "asof", j.Asof,
		"status", j.Status, "requested_by", requestedBy(c))
	return c.JSON(http.StatusAccepted, Redriven{JobID: j.JobID, Status: j.Status})
}

// refused lists the scheduled days the scheduler refused for good, which
// wait for the operator to fix the cause and submit them.
func (a *API) refused(c echo.Context) error {
	f := RefusedFilter{JobType: c.QueryParam("job_type"), Symbol: c.QueryParam("symbol"), Cursor: c.QueryParam("cursor")}
	for _, p := range []struct{ name, v string }{{"job_type", f.JobType}, {"symbol", f.Symbol}} {
		if !sqldb.IsText(p.v) {
			return daemon.Errorf(http.StatusBadRequest, "invalid_request", "%s must be UTF-8 text", p.name)
		}
	}
	n, err := queryLimit(c)
	if err != nil {
		return err
	}
	f.Limit = n
	p, err := a.Store.Refused(c.Request().Context(), f)
	if err != nil {
		return a.error(err)
	}
	return c.JSON(http.StatusOK, p)
}
