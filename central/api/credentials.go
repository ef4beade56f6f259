package api

import (
	"context"
	"errors"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/labstack/echo/v4"
	"github.com/vesta-cx/euterpe/central/credentials"
	"github.com/vesta-cx/euterpe/central/inbox"
	"github.com/vesta-cx/euterpe/daemon"
)

// CredentialsRequest is the body of PUT /transcode/credentials: a
// requester's answer to a refresh call. It replaces the job's whole
// credential set, the same shape as at enqueue: source credentials (or a
// new signed source URL) and output credentials.
type CredentialsRequest struct {
	Source *struct {
		URL         string          `json:"url,omitempty"`
		Credentials *credentials.S3 `json:"credentials,omitempty"`
	} `json:"source"`
	Output *struct {
		Credentials *credentials.S3 `json:"credentials"`
	} `json:"output"`
}

// CredentialsUpdated is the 200 body of PUT /transcode/credentials.
type CredentialsUpdated struct {
	JobID             string `json:"job_id"`
	CredentialVersion int    `json:"credential_version"`
}

// validate checks r; expiry is judged at now, the database's time.
func (r *CredentialsRequest) validate(now time.Time) (credentials.Storage, error) {
	var st credentials.Storage
	if r.Source == nil {
		return st, &FieldError{"source", "is required"}
	}
	switch {
	case r.Source.URL != "" && r.Source.Credentials != nil:
		return st, &FieldError{"source", "must be either {url} or {credentials}, not both"}
	case r.Source.URL != "":
		if err := httpURL(r.Source.URL); err != nil {
			return st, &FieldError{"source.url", err.Error()}
		}
		if len(r.Source.URL) > maxURL {
			return st, &FieldError{"source.url", "is too long"}
		}
		st.SourceURL = r.Source.URL
	case r.Source.Credentials != nil:
		if err := validateCreds("source.credentials", r.Source.Credentials); err != nil {
			return st, err
		}
		if err := unexpired("source.credentials", r.Source.Credentials, now); err != nil {
			return st, err
		}
		st.Source = r.Source.Credentials
	default:
		return st, &FieldError{"source", "must have url or credentials"}
	}
	if r.Output == nil || r.Output.Credentials == nil {
		return st, &FieldError{"output.credentials", "is required"}
	}
	if err := validateCreds("output.credentials", r.Output.Credentials); err != nil {
		return st, err
	}
	if err := unexpired("output.credentials", r.Output.Credentials, now); err != nil {
		return st, err
	}
	st.Output = *r.Output.Credentials
	return st, nil
}

// updateCredentials handles PUT /transcode/credentials?job_id=…: the new
// credentials are sealed like at enqueue and credential_version advances,
// which a runner waiting on a refresh takes as its cue to retry.
func (a *API) updateCredentials(c echo.Context) error {
	req, _ := Requester(c)
	id, err := jobIDParam(c)
	if err != nil {
		return err
	}
	body, err := io.ReadAll(http.MaxBytesReader(c.Response(), c.Request().Body, a.cfg.MaxBodyBytes))
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			return daemon.Errorf(http.StatusRequestEntityTooLarge, "body_too_large", "request body exceeds %d bytes", a.cfg.MaxBodyBytes)
		}
		return daemon.Errorf(http.StatusBadRequest, "invalid_request", "could not read the request body")
	}
	defer clear(body)
	var r CredentialsRequest
	var st credentials.Storage
	err = decodeStrict(body, &r)
	if err == nil {
		// The inbox's time (the database's clock), which UpdateCredentials
		// also writes by: a pod whose clock runs ahead must not refuse
		// credentials that are still valid.
		st, err = r.validate(a.cfg.Inbox.Now())
	}
	var fe *FieldError
	if errors.As(err, &fe) {
		return daemon.Errorf(http.StatusBadRequest, "invalid_request", "%s %s", fe.Field, fe.Reason)
	}
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(c.Request().Context(), 10*time.Second)
	defer cancel()
	v, err := a.cfg.Inbox.UpdateCredentials(ctx, id, req.ID, st)
	switch {
	case errors.Is(err, inbox.ErrNotFound), errors.Is(err, inbox.ErrForbidden):
		// Another requester's job is as unknown as a missing one (status).
		return notFound(id)
	case errors.Is(err, inbox.ErrFinished):
		return daemon.Errorf(http.StatusConflict, "job_finished", "job %s has finished; its credentials can no longer change", id)
	case errors.Is(err, inbox.ErrSourceMismatch):
		return daemon.Errorf(http.StatusBadRequest, "invalid_request", "%s", daemon.CapMessage(strings.TrimPrefix(err.Error(), "inbox: ")))
	case errors.Is(err, inbox.ErrCredentialConflict):
		// Two answers raced; the first committed. Re-reading the status
		// shows the version it set; resending is safe.
		return daemon.Errorf(http.StatusConflict, "credentials_conflict", "job %s: credentials were updated concurrently; retry", id)
	case err != nil:
		return err
	}
	a.cfg.Log.Info("job credentials updated", "job_id", id, "requester_id", req.ID, "credential_version", v)
	return c.JSON(http.StatusOK, CredentialsUpdated{JobID: id, CredentialVersion: v})
}
