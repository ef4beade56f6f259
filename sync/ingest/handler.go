package ingest

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"github.com/labstack/echo/v4"
	"github.com/vesta-cx/euterpe/central/webhook"
	"github.com/vesta-cx/euterpe/daemon"
	"github.com/vesta-cx/euterpe/sync/wire"
)

// Receiver serves the two signed sync endpoints, POST /sync/v1/batches and
// POST /sync/v1/heartbeat. They take no bearer token: the edge named by
// X-Euterpe-Edge-Id is authenticated by its signature over the exact bytes
// sent, checked before anything is inflated or decoded.
type Receiver struct {
	Registry *Registry
	Store    *Store
	// Nonces is shared by every pod (Nonces on the database), so a request
	// replayed to another pod is refused too.
	Nonces webhook.NonceStore
	// Skew is the accepted clock difference (0: webhook.DefaultSkew).
	Skew time.Duration
	// Limiter rate-limits each edge's requests in this process.
	Limiter *Limiter
	Metrics *Metrics
	Log     *slog.Logger
	// OnIngest is called after a batch with new events committed (wakes
	// this process's fleet tails).
	OnIngest func()
	Now      func() time.Time
}

// Mount adds the sync routes to e.
func (r *Receiver) Mount(e *echo.Echo) {
	e.POST(wire.BatchPath, r.batch)
	e.POST(wire.HeartbeatPath, r.heartbeat)
}

// refuse counts (by code), logs (without secrets or bodies) and answers a
// refused sync request.
func (r *Receiver) refuse(c echo.Context, edgeID string, status int, code, msg string, err error) error {
	r.Metrics.Refused.WithLabelValues(code).Inc()
	attrs := []any{"edge_id", logID(edgeID), "path", c.Path(), "code", code}
	if err != nil {
		attrs = append(attrs, "err", daemon.CapMessage(err.Error()))
	}
	r.Log.Info("sync request refused", attrs...)
	ae := daemon.Errorf(status, code, "%s", msg)
	if code == wire.CodeRateLimited {
		ae.RetryAfter = 1
		if d, ok := err.(retryAfter); ok {
			ae.RetryAfter = int(d)
		}
	}
	return ae
}

// logID caps what an unauthenticated header can put in the log.
func logID(id string) string {
	if len(id) > 128 {
		return strings.ToValidUTF8(id[:128], "") + "…"
	}
	return strings.ToValidUTF8(id, "\uFFFD")
}

type retryAfter int

func (r retryAfter) Error() string { return fmt.Sprintf("retry after %ds", int(r)) }

// authenticate finds the edge, reads the body under its cap and verifies
// the signature. It returns the edge id and the body as sent.
func (r *Receiver) authenticate(c echo.Context) (string, []byte, error) {
	req := c.Request()
	now := r.Now()
	// Central's clock, for an edge whose signature is refused for skew.
	c.Response().Header().Set("Date", now.UTC().Format(http.TimeFormat))
	edgeID := req.Header.Get(wire.HeaderEdgeID)
	// An id no edge can have is unknown without asking the database:
	// Postgres fails on invalid UTF-8, which would answer 503 (retry).
	if wire.CheckEdgeID(edgeID) != nil {
		return "", nil, r.refuse(c, edgeID, http.StatusUnauthorized, wire.CodeUnauthorized, "unknown edge", nil)
	}
	creds, err := r.Registry.CredentialsAt(req.Context(), edgeID, now)
	switch {
	case errors.Is(err, ErrNotFound):
		return "", nil, r.refuse(c, edgeID, http.StatusUnauthorized, wire.CodeUnauthorized, "unknown edge", nil)
	case creds.Disabled:
		return "", nil, r.refuse(c, edgeID, http.StatusForbidden, wire.CodeEdgeDisabled, "this edge is disabled", nil)
	case err != nil:
		return "", nil, r.unavailable(c, edgeID, err)
	}
	if req.ContentLength > wire.MaxCompressedBytes {
		return "", nil, r.refuse(c, edgeID, http.StatusRequestEntityTooLarge, wire.CodeTooLarge,
			fmt.Sprintf("body exceeds %d bytes", wire.MaxCompressedBytes), nil)
	}
	// A sized body (checked above) is read to its length and no further; a
	// chunked one to one byte past the cap, to tell "at the cap" from "over".
	limit := int64(wire.MaxCompressedBytes) + 1
	if req.ContentLength >= 0 {
		limit = req.ContentLength
	}
	body, err := io.ReadAll(io.LimitReader(req.Body, limit))
	if err != nil {
		// A body cut off on the way (a slow link meeting the server's read
		// timeout, a dropped connection) is not a bad batch: 400
		// invalid_batch would set a good one aside for good.
		return "", nil, r.refuse(c, edgeID, http.StatusRequestTimeout, wire.CodeIncompleteBody, "the body ended before its end", err)
	}
	if len(body) > wire.MaxCompressedBytes {
		return "", nil, r.refuse(c, edgeID, http.StatusRequestEntityTooLarge, wire.CodeTooLarge,
			fmt.Sprintf("body exceeds %d bytes", wire.MaxCompressedBytes), nil)
	}
	v := webhook.Verifier{Secrets: creds.Secrets, Skew: r.Skew, Nonces: r.Nonces}
	_, err = v.Verify(req.Context(), req.Header, body, now)
	switch {
	case err == nil:
	case errors.Is(err, webhook.ErrStaleTimestamp):
		return "", nil, r.refuse(c, edgeID, http.StatusUnauthorized, wire.CodeClockSkew,
			"x-euterpe-timestamp is outside the accepted window; the Date header has central's clock", err)
	case errors.Is(err, webhook.ErrReplayedNonce), errors.Is(err, webhook.ErrBadSignature), errors.Is(err, webhook.ErrMissingHeader),
		errors.Is(err, webhook.ErrBadNonce), errors.Is(err, webhook.ErrBadTimestamp), errors.Is(err, webhook.ErrNoSecret):
		return "", nil, r.refuse(c, edgeID, http.StatusUnauthorized, wire.CodeUnauthorized, "signature not accepted", err)
	case errors.Is(err, webhook.ErrEventIDMismatch):
		// The signature matched, so the body is the edge's own: an
		// identity body with a top-level event_id, a field no batch or
		// status has. It is refused as one, for good; a resend is
		// refused the same way, so retrying it (503) would never end.
		return "", nil, r.refuse(c, edgeID, http.StatusBadRequest, wire.CodeInvalidBatch,
			"the body's top-level event_id differs from x-euterpe-event-id; a batch or status has no event_id", err)
	default:
		return "", nil, r.unavailable(c, edgeID, err)
	}
	if ok, wait := r.Limiter.Allow(edgeID, now); !ok {
		return "", nil, r.refuse(c, edgeID, http.StatusTooManyRequests, wire.CodeRateLimited, "too many requests from this edge", retryAfter(wait))
	}
	return edgeID, body, nil
}

func (r *Receiver) unavailable(c echo.Context, edgeID string, err error) error {
	r.Metrics.Refused.WithLabelValues("unavailable").Inc()
	if !errors.Is(err, context.Canceled) {
		r.Log.Warn("sync request failed", "edge_id", logID(edgeID), "path", c.Path(), "err", daemon.CapMessage(err.Error()))
	}
	return &daemon.APIError{Status: http.StatusServiceUnavailable, Code: "unavailable", Message: "central cannot store this now; retry later", RetryAfter: 5}
}

// inflate undoes Content-Encoding: gzip under the decompressed cap; an
// identity body is taken as sent.
func (r *Receiver) inflate(c echo.Context, edgeID string, body []byte) ([]byte, error) {
	switch enc := strings.ToLower(strings.TrimSpace(c.Request().Header.Get(echo.HeaderContentEncoding))); enc {
	case "", "identity":
		return body, nil
	case "gzip":
		out, err := wire.Decompress(body, wire.MaxBodyBytes)
		switch {
		case errors.Is(err, wire.ErrTooLarge):
			return nil, r.refuse(c, edgeID, http.StatusRequestEntityTooLarge, wire.CodeTooLarge,
				fmt.Sprintf("decompressed body exceeds %d bytes", wire.MaxBodyBytes), err)
		case err != nil:
			return nil, r.refuse(c, edgeID, http.StatusBadRequest, wire.CodeInvalidBatch, "body is not valid gzip", err)
		}
		return out, nil
	default:
		return nil, r.refuse(c, edgeID, http.StatusBadRequest, wire.CodeInvalidBatch, "Content-Encoding must be gzip", nil)
	}
}

// receive authenticates a sync request and inflates its body: the
// prelude every sync route shares.
func (r *Receiver) receive(c echo.Context) (edgeID string, raw []byte, err error) {
	edgeID, body, err := r.authenticate(c)
	if err != nil {
		return "", nil, err
	}
	raw, err = r.inflate(c, edgeID, body)
	return edgeID, raw, err
}

func (r *Receiver) batch(c echo.Context) error {
	edgeID, raw, err := r.receive(c)
	if err != nil {
		return err
	}
	b, err := wire.Decode(raw)
	if err != nil {
		return r.undecodable(c, edgeID, err)
	}
	if b.EdgeID != edgeID {
		return r.refuse(c, edgeID, http.StatusBadRequest, wire.CodeInvalidBatch, "the batch's edge_id differs from "+wire.HeaderEdgeID, nil)
	}
	res, err := r.Store.Ingest(c.Request().Context(), b)
	if err != nil {
		return r.unavailable(c, edgeID, err)
	}
	r.Metrics.Batches.Inc()
	r.Metrics.Events.WithLabelValues("accepted").Add(float64(res.Accepted))
	r.Metrics.Events.WithLabelValues("duplicate").Add(float64(res.Duplicates))
	r.Metrics.Gaps.Add(float64(res.Gaps))
	if res.Accepted > 0 && r.OnIngest != nil {
		r.OnIngest()
	}
	r.Log.Debug("sync batch stored", "edge_id", edgeID, "accepted", res.Accepted, "duplicates", res.Duplicates, "gaps", res.Gaps)
	if res.Pruned > 0 || res.PrunedGaps > 0 {
		// Central cannot tell a resend of what it stored and pruned from
		// entries it never stored (a quarantined batch resent late):
		// either way they are not stored, and an operator should hear so.
		r.Log.Info("sync batch entries older than retention not stored", "edge_id", edgeID,
			"events", res.Pruned, "gaps", res.PrunedGaps)
	}
	return c.JSON(http.StatusOK, res)
}

// undecodable refuses a body wire.Decode or wire.DecodeStatus refused. A
// body that is one but for fields this central does not know comes from a
// newer edge, not a bad one: unsupported_format makes the edge keep its
// events and retry, where invalid_batch would have it set them aside.
func (r *Receiver) undecodable(c echo.Context, edgeID string, err error) error {
	if errors.Is(err, wire.ErrUnsupported) {
		return r.refuse(c, edgeID, http.StatusBadRequest, wire.CodeUnsupportedFormat,
			daemon.CapMessage("the body has fields this central does not know (the edge is newer than central): "+err.Error()), err)
	}
	return r.refuse(c, edgeID, http.StatusBadRequest, wire.CodeInvalidBatch, daemon.CapMessage(err.Error()), err)
}

func (r *Receiver) heartbeat(c echo.Context) error {
	edgeID, raw, err := r.receive(c)
	if err != nil {
		return err
	}
	st, err := wire.DecodeStatus(raw)
	if err != nil {
		return r.undecodable(c, edgeID, err)
	}
	if st.EdgeID != edgeID {
		return r.refuse(c, edgeID, http.StatusBadRequest, wire.CodeInvalidBatch, "the status's edge_id differs from "+wire.HeaderEdgeID, nil)
	}
	if err := r.Store.Heartbeat(c.Request().Context(), st, raw); err != nil {
		return r.unavailable(c, edgeID, err)
	}
	r.Metrics.Heartbeats.Inc()
	return c.NoContent(http.StatusNoContent)
}
