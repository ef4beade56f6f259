package api

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/labstack/echo/v4"
	"github.com/vesta-cx/euterpe/central/idempotency"
	"github.com/vesta-cx/euterpe/central/inbox"
	"github.com/vesta-cx/euterpe/central/requesters"
	"github.com/vesta-cx/euterpe/central/ssrf"
	"github.com/vesta-cx/euterpe/daemon"
	"github.com/vesta-cx/euterpe/daemon/sqldb"
)

// Config wires the API to its stores.
type Config struct {
	DB          *sqldb.DB
	Inbox       *inbox.Store
	Requesters  *requesters.Store
	Idempotency *idempotency.Store
	Log         *slog.Logger
	// CheckURL, when set, vets status_webhook_url and refresh_url after the
	// syntactic check (http/https absolute URL) — the single hook for the
	// address policy (private and loopback targets).
	CheckURL func(string) error
	// MaxBodyBytes bounds a request body (default 1 MiB).
	MaxBodyBytes int64
	// Document is the OpenAPI document served at /openapi.json (default
	// OpenAPI; serve passes it merged with the other roles' fragments).
	Document []byte
}

// API serves the transcode endpoints.
type API struct {
	cfg Config
}

// New returns the API for cfg.
func New(cfg Config) *API {
	if cfg.MaxBodyBytes <= 0 {
		cfg.MaxBodyBytes = 1 << 20
	}
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	if cfg.Document == nil {
		cfg.Document = OpenAPI
	}
	return &API{cfg: cfg}
}

// Mount adds the routes to e.
func (a *API) Mount(e *echo.Echo) {
	e.GET("/openapi.json", func(c echo.Context) error {
		return c.Blob(http.StatusOK, echo.MIMEApplicationJSON, a.cfg.Document)
	})
	// Per route, not through an e.Group("", …): a group's middleware
	// registers a catch-all for its prefix, which for "" is the whole
	// server, and every unknown path (a console page among them) would
	// answer 401 asking for an API key instead of 404.
	auth := Auth(a.cfg.Requesters)
	e.POST("/transcode", a.enqueue, auth)
	e.GET("/transcode/status", a.status, auth)
	e.PUT("/transcode/credentials", a.updateCredentials, auth)
}

// MountRoutes lets the API be composed like any other role's routes.
func (a *API) MountRoutes(e *echo.Echo) { a.Mount(e) }

const requesterKey = "euterpe.requester"

// Auth is the middleware that resolves Authorization: Bearer <api_key> to
// a requester (read it with Requester): missing or unknown keys are 401.
// Routes other roles add use it too (serve passes it in Deps.Auth).
func Auth(reqs *requesters.Store) echo.MiddlewareFunc {
	return func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c echo.Context) error {
			h := c.Request().Header.Get(echo.HeaderAuthorization)
			scheme, key, ok := strings.Cut(h, " ")
			if !ok || !strings.EqualFold(scheme, "bearer") || strings.TrimSpace(key) == "" {
				c.Response().Header().Set(echo.HeaderWWWAuthenticate, `Bearer realm="euterpe"`)
				return daemon.Errorf(http.StatusUnauthorized, "unauthorized", "missing Authorization: Bearer <api_key>")
			}
			r, err := reqs.Authenticate(c.Request().Context(), strings.TrimSpace(key))
			if errors.Is(err, requesters.ErrUnknownKey) {
				c.Response().Header().Set(echo.HeaderWWWAuthenticate, `Bearer realm="euterpe", error="invalid_token"`)
				return daemon.Errorf(http.StatusUnauthorized, "unauthorized", "unknown API key")
			}
			if err != nil {
				return err
			}
			c.Set(requesterKey, r)
			return next(c)
		}
	}
}

// Requester returns the requester Auth authenticated for c.
func Requester(c echo.Context) (requesters.Requester, bool) {
	r, ok := c.Get(requesterKey).(requesters.Requester)
	return r, ok
}

// Accepted is the 202 body of POST /transcode.
type Accepted struct {
	JobID  string `json:"job_id"`
	Status string `json:"status"`
}

func (a *API) enqueue(c echo.Context) error {
	ctx := c.Request().Context()
	req, _ := Requester(c)
	key := c.Request().Header.Get("Idempotency-Key")
	if key == "" {
		return daemon.Errorf(http.StatusBadRequest, "idempotency_key_required", "header Idempotency-Key is required")
	}
	// Printable ASCII is 0x20-0x7E: a space inside a key ("order 42") is
	// taken; net/http has already trimmed the value's outer whitespace.
	if len(key) > 255 || strings.IndexFunc(key, func(r rune) bool { return r < 0x20 || r > 0x7e }) >= 0 {
		return daemon.Errorf(http.StatusBadRequest, "invalid_idempotency_key", "header Idempotency-Key must be 1-255 printable ASCII characters")
	}
	body, err := io.ReadAll(http.MaxBytesReader(c.Response(), c.Request().Body, a.cfg.MaxBodyBytes))
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			return daemon.Errorf(http.StatusRequestEntityTooLarge, "body_too_large", "request body exceeds %d bytes", a.cfg.MaxBodyBytes)
		}
		return daemon.Errorf(http.StatusBadRequest, "invalid_request", "could not read the request body")
	}
	r, err := decode(body)
	if err == nil {
		err = r.validate(a.cfg.CheckURL)
	}
	var fe *FieldError
	if errors.As(err, &fe) {
		var re *ssrf.RefusedError
		if errors.As(err, &re) {
			a.cfg.Log.Info("callback URL refused by the outbound address policy", "requester_id", req.ID,
				"field", fe.Field, "host", re.Host, "reason", re.Reason, "hint", ssrf.Hint)
		}
		return daemon.Errorf(http.StatusBadRequest, "invalid_request", "%s %s", fe.Field, fe.Reason)
	}
	if err != nil {
		return err
	}
	hash := idempotency.Hash(r.canonical())
	jobID := inbox.NewJobID()
	resp, _ := json.Marshal(Accepted{JobID: jobID, Status: "queued"})
	var stored *idempotency.Response
	err = a.cfg.DB.Tx(ctx, func(tx *sql.Tx) error {
		// The time of this transaction's writes, read on it (inbox.NowTx).
		now, err := a.cfg.Inbox.NowTx(ctx, tx)
		if err != nil {
			return fmt.Errorf("api: enqueue: %w", err)
		}
		stored, err = a.cfg.Idempotency.Reserve(ctx, tx, now, req.ID, key, hash,
			idempotency.Response{Status: http.StatusAccepted, Body: resp, JobID: jobID})
		if err != nil || stored != nil {
			return err
		}
		// Only a request that creates the job needs live credentials; the
		// error rolls the key's reservation back with the transaction.
		// Expiry is judged at the transaction's time, like the key's: a pod
		// whose clock runs ahead must not refuse credentials still valid.
		if err := r.unexpired(now); err != nil {
			return err
		}
		return a.cfg.Inbox.Insert(ctx, tx, inbox.NewJob{
			ID:               jobID,
			RequesterID:      req.ID,
			IdempotencyKey:   key,
			Source:           r.source(),
			Output:           inbox.Output{Bucket: r.Output.Bucket, Prefix: r.Output.Prefix, Endpoint: r.Output.Endpoint, Region: r.Output.Region},
			Renditions:       r.Renditions,
			StatusWebhookURL: r.StatusWebhookURL,
			RefreshURL:       r.RefreshURL,
			Metadata:         r.Metadata,
			Credentials:      r.secrets(),
		})
	})
	if errors.Is(err, idempotency.ErrConflict) {
		return daemon.Errorf(http.StatusConflict, "idempotency_conflict",
			"Idempotency-Key was already used with a different request")
	}
	if errors.As(err, &fe) {
		return daemon.Errorf(http.StatusBadRequest, "invalid_request", "%s %s", fe.Field, fe.Reason)
	}
	if err != nil {
		return err
	}
	if stored != nil {
		c.Response().Header().Set("Idempotent-Replayed", "true")
		var acc Accepted
		if json.Unmarshal(stored.Body, &acc) == nil {
			return c.JSON(stored.Status, acc)
		}
		return c.JSONBlob(stored.Status, stored.Body)
	}
	a.cfg.Log.Info("job accepted", "job_id", jobID, "requester_id", req.ID)
	return c.JSON(http.StatusAccepted, Accepted{JobID: jobID, Status: "queued"})
}

// jobIDParam reads the job_id query parameter of the job routes: missing →
// 400 invalid_request; not a job id (UUID) → 404, as no such job can exist.
// The id is returned in the canonical form jobs are stored under: a UUID is
// case-insensitive, and a client may print it in upper case.
func jobIDParam(c echo.Context) (string, error) {
	id := c.QueryParam("job_id")
	if id == "" {
		return "", daemon.Errorf(http.StatusBadRequest, "invalid_request", "query parameter job_id is required")
	}
	u, err := uuid.Parse(id)
	if err != nil {
		return "", daemon.Errorf(http.StatusNotFound, "not_found", "no job %q", daemon.CapMessage(id))
	}
	return u.String(), nil
}

// notFound is the answer for a job id the caller cannot see: unknown, or
// another requester's.
func notFound(id string) error {
	return daemon.Errorf(http.StatusNotFound, "not_found", "no job %s", id)
}

func (a *API) status(c echo.Context) error {
	req, _ := Requester(c)
	id, err := jobIDParam(c)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(c.Request().Context(), 10*time.Second)
	defer cancel()
	v, err := a.cfg.Inbox.Get(ctx, id)
	switch {
	// Another requester's job answers as an unknown one, word for word: a
	// 403 would tell any API key which job ids exist.
	case errors.Is(err, inbox.ErrNotFound), v != nil && v.RequesterID != req.ID:
		return notFound(id)
	case errors.Is(err, inbox.ErrPruned):
		return daemon.Errorf(http.StatusGone, "gone", "job %s was pruned by retention", id)
	case err != nil:
		return err
	}
	return c.JSON(http.StatusOK, v)
}
