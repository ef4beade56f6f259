package gateway

import (
	"context"
	"errors"
	"io"
	"net/http"

	"github.com/google/uuid"
	"github.com/labstack/echo/v4"
	"github.com/vesta-cx/euterpe/daemon"
	"github.com/vesta-cx/euterpe/edge/jobs"
)

// CreateResponse is the 202 body of POST /v1/jobs.
type CreateResponse struct {
	JobID  string `json:"job_id"`
	Status string `json:"status"`
}

func (g *Gateway) createJob(c echo.Context) error {
	r := c.Request()
	limit := int64(g.set.MaxBodyBytes)
	if r.ContentLength > limit {
		return tooLarge(limit)
	}
	body, err := io.ReadAll(http.MaxBytesReader(c.Response(), r.Body, limit))
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			return tooLarge(limit)
		}
		return bad("invalid_json", "could not read request body")
	}
	req, err := ParseCreate(body, int64(g.set.MaxJobTTL))
	if err != nil {
		return err
	}
	key := r.Header.Get("Idempotency-Key")
	if key != "" && !validIdempotencyKey(key) {
		return bad("invalid_idempotency_key", "Idempotency-Key must be 1-255 visible ASCII characters")
	}
	ctx := r.Context()
	ttl := req.TTL
	if ttl == 0 {
		ttl = int64(g.set.JobTTL)
	}
	var created jobs.Created
	if err = g.checkBacklog(ctx); err != nil {
		// A full backlog refuses new jobs, not the retry of one already
		// accepted (its answer lost on the way): that gets its job.
		replayed := false
		if key != "" {
			var rerr error
			created, replayed, rerr = g.store.Replay(ctx, key, req.Fingerprint())
			if replayed {
				err = rerr
			}
		}
		if !replayed {
			return unavailable(err, g.set.RetryAfter)
		}
	} else {
		created, err = g.store.Create(ctx, jobs.NewJob{
			Task: req.Task, Payload: req.Payload, TTL: ttl,
			IdempotencyKey: key, Fingerprint: req.Fingerprint(),
		})
	}
	switch {
	case errors.Is(err, jobs.ErrIdempotencyConflict):
		return daemon.Errorf(http.StatusConflict, "idempotency_conflict", "Idempotency-Key was already used with a different request body")
	case err != nil:
		return unavailable(err, g.set.RetryAfter)
	}
	status := jobs.Queued
	if created.Duplicate {
		status = created.Status
	}
	return c.JSON(http.StatusAccepted, CreateResponse{JobID: created.ID, Status: status})
}

func tooLarge(limit int64) error {
	return daemon.Errorf(http.StatusRequestEntityTooLarge, "body_too_large", "request body exceeds %d bytes", limit)
}

func (g *Gateway) getJob(c echo.Context) error {
	id, err := jobID(c)
	if err != nil {
		return err
	}
	j, err := g.store.Get(c.Request().Context(), id)
	switch {
	case errors.Is(err, jobs.ErrNotFound):
		return notFound(id)
	case errors.Is(err, jobs.ErrUnknownStatus):
		return statusUnknown(id, "read")
	case err != nil:
		return unavailable(err, g.set.RetryAfter)
	}
	return c.JSON(http.StatusOK, j)
}

func (g *Gateway) cancelJob(c echo.Context) error {
	id, err := jobID(c)
	if err != nil {
		return err
	}
	_, err = g.store.Cancel(c.Request().Context(), id, "gateway.cancel", "canceled by client")
	switch {
	case errors.Is(err, jobs.ErrNotFound):
		return notFound(id)
	case errors.Is(err, jobs.ErrFinished):
		status := ""
		if j, gerr := g.store.Get(c.Request().Context(), id); gerr == nil {
			status = j.Status
		}
		return daemon.Errorf(http.StatusConflict, "job_finished", "job %s is already %s", id, status)
	case errors.Is(err, jobs.ErrUnknownStatus):
		// Written by a newer version, or corrupt: what cancelling means
		// for it is not this gateway's to decide, and a retry would not
		// change the answer.
		return statusUnknown(id, "cancelled")
	case err != nil:
		return unavailable(err, g.set.RetryAfter)
	}
	return c.JSON(http.StatusOK, CreateResponse{JobID: id, Status: jobs.Canceled})
}

// jobID returns the :id parameter; anything but a UUID cannot be a job.
func jobID(c echo.Context) (string, error) {
	id := c.Param("id")
	if _, err := uuid.Parse(id); err != nil || len(id) != 36 {
		return "", notFound(truncate(id, 64))
	}
	return id, nil
}

// statusUnknown is 409 job_status_unknown: the job's status is none this
// gateway knows, or its key is no hash at all (jobs.ErrUnknownStatus). It
// is refused rather than failed (500): no retry changes it. done says
// what was not done to it ("read", "cancelled", "streamed").
func statusUnknown(id, done string) error {
	return daemon.Errorf(http.StatusConflict, "job_status_unknown", "job %s has a status this gateway does not know, or is not stored as a job hash; it was not %s", id, done)
}

func notFound(id string) error {
	return daemon.Errorf(http.StatusNotFound, "not_found", "job %s not found", id)
}

// checkBacklog answers 429 when undelivered + pending queue entries exceed
// the limit. One measurement is reused for BacklogInterval so the check
// costs Redis a few calls a second, not one per request.
func (g *Gateway) checkBacklog(ctx context.Context) error {
	limit := int64(g.set.BacklogLimit)
	n, err := g.backlog.value(ctx, func(ctx context.Context) (int64, error) { return g.store.Backlog(ctx, limit) })
	if err != nil {
		return err
	}
	if n > limit {
		e := daemon.Errorf(http.StatusTooManyRequests, "backlog_full", "queue backlog exceeds %d jobs; retry later", limit)
		e.RetryAfter = g.set.RetryAfter
		return e
	}
	return nil
}
