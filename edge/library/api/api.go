package api

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"net/url"
	"strconv"

	"github.com/labstack/echo/v4"

	"github.com/vesta-cx/euterpe/daemon"
	"github.com/vesta-cx/euterpe/edge/library/policy"
	"github.com/vesta-cx/euterpe/edge/library/store"
)

// Handlers serves the library API.
type Handlers struct {
	Store       *store.Store
	Policy      *policy.Policy
	ThumbFormat string
	ThumbSize   int
}

const (
	defaultLimit = 50
	maxLimit     = 500
	maxBody      = 1 << 20
)

// Mount registers every route on e.
func (h *Handlers) Mount(e *echo.Echo) { MountCurrent(e, func() *Handlers { return h }) }

// MountCurrent registers every route on e, served by the handlers current
// returns at each request: while it returns nil (the library database is
// not open yet) they answer 503 library_unavailable, and the routes need
// not wait for the database to be mounted.
func MountCurrent(e *echo.Echo, current func() *Handlers) {
	on := func(serve func(*Handlers, echo.Context) error) echo.HandlerFunc {
		return func(c echo.Context) error {
			h := current()
			if h == nil {
				return errUnavailable
			}
			return serve(h, c)
		}
	}
	// strictQuery is added per route: a group-wide Use would also answer
	// every unknown path under /api/v1, which other components share.
	g := e.Group("/api/v1")
	g.POST("/scans", on((*Handlers).postScan), strictQuery)
	g.GET("/jobs", on((*Handlers).listJobs), strictQuery)
	g.GET("/jobs/:id", on((*Handlers).getJob), strictQuery)
	g.GET("/duplicates/groups", on((*Handlers).listGroups), strictQuery)
	g.GET("/duplicates/groups/:group_key/files", on((*Handlers).groupFiles), strictQuery)
	g.POST("/duplicates/groups/:group_key/delete", on((*Handlers).deleteDuplicates), strictQuery)
	g.GET("/files/:id/thumbnail", on((*Handlers).thumbnail), strictQuery)
	g.POST("/maintenance/wal", on((*Handlers).postWAL), strictQuery)
}

// errUnavailable answers the library's routes while its database cannot be
// opened (a full disk, a read-only state directory); the open is retried
// with backoff of up to a minute, hence the Retry-After.
var errUnavailable = &daemon.APIError{Status: http.StatusServiceUnavailable, Code: "library_unavailable",
	Message: "the library database is not open (see the edge log); it is retried in the background", RetryAfter: 60}

func badRequest(format string, args ...any) error {
	return daemon.Errorf(http.StatusBadRequest, "bad_request", format, args...)
}

// mapErr turns domain errors into API errors.
// errorAnswers maps the library's error values to HTTP answers, first match
// wins; anything else is an internal error.
var errorAnswers = []struct {
	err        error
	status     int
	code       string
	retryAfter int
}{
	{store.ErrBadCursor, http.StatusBadRequest, "bad_cursor", 0},
	{store.ErrBadGroupKey, http.StatusBadRequest, "bad_group_key", 0},
	{store.ErrNotFound, http.StatusNotFound, "not_found", 0},
	{policy.ErrActive, http.StatusConflict, "scan_active", 0},
	{policy.ErrConflict, http.StatusConflict, "conflict", 0},
	{policy.ErrInvalid, http.StatusBadRequest, "bad_request", 0},
	{policy.ErrUnsupported, http.StatusUnsupportedMediaType, "unsupported_media", 0},
	{policy.ErrQueueFull, http.StatusTooManyRequests, "queue_full", 5},
}

func mapErr(err error) error {
	if err == nil {
		return nil
	}
	for _, a := range errorAnswers {
		if errors.Is(err, a.err) {
			return &daemon.APIError{Status: a.status, Code: a.code, Message: daemon.CapMessage(err.Error()), RetryAfter: a.retryAfter}
		}
	}
	return err
}

func limitParam(c echo.Context) (int, error) {
	v := c.QueryParam("limit")
	if v == "" {
		return defaultLimit, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 || n > maxLimit {
		return 0, badRequest("limit must be an integer between 1 and %d", maxLimit)
	}
	return n, nil
}

// groupKeyParam parses the group_key path segment. echo hands it over as
// sent when the path holds an escape it would not have written itself, so
// a key whose ':' a client escaped (encodeURIComponent writes %3A) arrives
// escaped: it is unescaped first.
func groupKeyParam(c echo.Context) (store.GroupKey, error) {
	raw := c.Param("group_key")
	v, err := url.PathUnescape(raw)
	if err != nil {
		return store.GroupKey{}, daemon.Errorf(http.StatusBadRequest, "bad_group_key", "group_key is not a valid path segment: %s", capParam(raw))
	}
	k, err := store.ParseGroupKey(v)
	if err != nil {
		return k, mapErr(err)
	}
	return k, nil
}

func idParam(c echo.Context, name string) (int64, error) {
	n, err := strconv.ParseInt(c.Param(name), 10, 64)
	if err != nil || n <= 0 {
		return 0, daemon.Errorf(http.StatusNotFound, "not_found", "no %s %q", name, c.Param(name))
	}
	return n, nil
}

// decodeBody reads a JSON object strictly (unknown fields refused).
func decodeBody(c echo.Context, v any) error {
	body, err := io.ReadAll(io.LimitReader(c.Request().Body, maxBody+1))
	if err != nil {
		return badRequest("unreadable body")
	}
	if len(body) > maxBody {
		return daemon.Errorf(http.StatusRequestEntityTooLarge, "body_too_large", "body exceeds %d bytes", maxBody)
	}
	if t := bytes.TrimLeft(body, " \t\r\n"); len(t) == 0 || t[0] != '{' {
		return badRequest("the body must be a JSON object")
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return badRequest("invalid JSON body: %s", err.Error())
	}
	// One object and nothing after it but white space, as the gateway
	// reads its bodies: trailing text is refused, not ignored.
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return badRequest("invalid JSON body: unexpected data after the object")
	}
	return nil
}

// strictQuery refuses a query string that does not parse (echo would drop
// the malformed pair and serve page 1) and a repeated parameter (echo
// would read the first), with 400 bad_query.
func strictQuery(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		q, err := url.ParseQuery(c.Request().URL.RawQuery)
		if err != nil {
			return daemon.Errorf(http.StatusBadRequest, "bad_query", "malformed query string: %s", err.Error())
		}
		for k, v := range q {
			if len(v) > 1 {
				return daemon.Errorf(http.StatusBadRequest, "bad_query", "query parameter %q is repeated", capParam(k))
			}
		}
		return next(c)
	}
}

func capParam(s string) string {
	if len(s) > 32 {
		return s[:32] + "…"
	}
	return s
}

type page[T any] struct {
	Items      []T    `json:"items"`
	NextCursor string `json:"next_cursor,omitempty"`
}

func (h *Handlers) postScan(c echo.Context) error {
	j, err := h.Policy.EnqueueScan(c.Request().Context())
	if err != nil {
		return mapErr(err)
	}
	return c.JSON(http.StatusAccepted, j)
}

func (h *Handlers) listJobs(c echo.Context) error {
	limit, err := limitParam(c)
	if err != nil {
		return err
	}
	var cursor int64
	if v := c.QueryParam("cursor"); v != "" {
		if cursor, err = store.DecodeIDCursor(v); err != nil {
			return mapErr(err)
		}
	}
	jobs, next, err := h.Store.ListJobs(c.Request().Context(), cursor, limit)
	if err != nil {
		return mapErr(err)
	}
	p := page[store.Job]{Items: nonNil(jobs)}
	if next > 0 {
		p.NextCursor = strconv.FormatInt(next, 10)
	}
	return c.JSON(http.StatusOK, p)
}

func (h *Handlers) getJob(c echo.Context) error {
	id, err := idParam(c, "id")
	if err != nil {
		return err
	}
	j, err := h.Store.GetJob(c.Request().Context(), id)
	if err != nil {
		return mapErr(err)
	}
	if j.Kind != store.KindDelete {
		return c.JSON(http.StatusOK, j)
	}
	d, err := h.Store.Decisions(c.Request().Context(), id)
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, struct {
		store.Job
		Decisions []store.Decision `json:"decisions"`
	}{j, nonNil(d)})
}

func (h *Handlers) listGroups(c echo.Context) error {
	limit, err := limitParam(c)
	if err != nil {
		return err
	}
	var cursor *store.GroupCursor
	if v := c.QueryParam("cursor"); v != "" {
		gc, err := store.DecodeGroupCursor(v)
		if err != nil {
			return mapErr(err)
		}
		cursor = &gc
	}
	groups, next, err := h.Store.ListGroups(c.Request().Context(), cursor, limit)
	if err != nil {
		return mapErr(err)
	}
	p := page[store.Group]{Items: nonNil(groups)}
	if next != nil {
		p.NextCursor = next.Encode()
	}
	return c.JSON(http.StatusOK, p)
}

func (h *Handlers) groupFiles(c echo.Context) error {
	k, err := groupKeyParam(c)
	if err != nil {
		return err
	}
	limit, err := limitParam(c)
	if err != nil {
		return err
	}
	var cursor int64
	if v := c.QueryParam("cursor"); v != "" {
		if cursor, err = store.DecodeIDCursor(v); err != nil {
			return mapErr(err)
		}
	}
	// §6.2 groups only digests held by more than one live file; one held
	// by a single file is no duplicate group, on any page (as for a delete
	// request in it).
	n, err := h.Store.GroupSize(c.Request().Context(), k)
	if err != nil {
		return mapErr(err)
	}
	if n < 2 {
		return daemon.Errorf(http.StatusNotFound, "not_found", "no duplicate group %s", k)
	}
	files, next, err := h.Store.GroupFiles(c.Request().Context(), k, cursor, limit)
	if err != nil {
		return mapErr(err)
	}
	if len(files) == 0 && cursor == 0 {
		return daemon.Errorf(http.StatusNotFound, "not_found", "no duplicate group %s", k)
	}
	p := page[store.File]{Items: nonNil(files)}
	if next > 0 {
		p.NextCursor = strconv.FormatInt(next, 10)
	}
	return c.JSON(http.StatusOK, p)
}

func (h *Handlers) deleteDuplicates(c echo.Context) error {
	k, err := groupKeyParam(c)
	if err != nil {
		return err
	}
	var req policy.DeleteRequest
	if err := decodeBody(c, &req); err != nil {
		return err
	}
	j, err := h.Policy.RequestDelete(c.Request().Context(), k, req)
	if err != nil {
		return mapErr(err)
	}
	return c.JSON(http.StatusAccepted, j)
}

func (h *Handlers) postWAL(c echo.Context) error {
	var req struct {
		Mode string `json:"mode"`
	}
	if err := decodeBody(c, &req); err != nil {
		return err
	}
	w, err := h.Policy.EnqueueWAL(c.Request().Context(), req.Mode)
	if err != nil {
		return mapErr(err)
	}
	return c.JSON(http.StatusAccepted, w)
}

func (h *Handlers) thumbnail(c echo.Context) error {
	id, err := idParam(c, "id")
	if err != nil {
		return err
	}
	ctx := c.Request().Context()
	f, err := h.Store.GetFile(ctx, id)
	if err != nil {
		return mapErr(err)
	}
	t, err := h.Policy.AdmitThumbnail(ctx, f, h.ThumbFormat, h.ThumbSize)
	if err != nil {
		return mapErr(err)
	}
	switch t.Status {
	case store.StatusReady:
		ct := "image/jpeg"
		if t.Format == store.FormatWebP {
			ct = "image/webp"
		}
		f, err := h.Policy.OpenReady(t)
		if err != nil {
			// Admission found the file a moment ago: gone since (a
			// cleanup, a cleared cache), the next request renders it again.
			if errors.Is(err, fs.ErrNotExist) {
				return &daemon.APIError{Status: http.StatusServiceUnavailable, Code: "thumbnail_gone",
					Message: "the thumbnail's cache file was removed; ask again to render it", RetryAfter: 1}
			}
			return fmt.Errorf("thumbnail %d: %w", t.ID, err)
		}
		defer f.Close()
		st, err := f.Stat()
		if err != nil {
			return fmt.Errorf("thumbnail %d: %w", t.ID, err)
		}
		c.Response().Header().Set(echo.HeaderContentType, ct)
		c.Response().Header().Set("Cache-Control", "private, max-age=3600")
		http.ServeContent(c.Response(), c.Request(), "", st.ModTime(), f)
		return nil
	case store.StatusFailed:
		if h.Policy.ThumbMaxAttempts > 0 && t.ErrorCount >= int64(h.Policy.ThumbMaxAttempts) {
			// Not retried: saying "later" would have clients ask for ever.
			return daemon.Errorf(http.StatusUnprocessableEntity, "thumbnail_failed",
				"thumbnail failed (%s) after %d attempts; it is rendered again once the file changes", deref(t.ErrorCode), t.ErrorCount)
		}
		ae := daemon.Errorf(http.StatusServiceUnavailable, "thumbnail_failed", "thumbnail failed (%s); retried later", deref(t.ErrorCode))
		if t.RetryAfter != nil {
			if s := (*t.RetryAfter - h.Store.NowMS() + 999) / 1000; s > 0 {
				ae.RetryAfter = int(s)
			}
		}
		return ae
	}
	return c.JSON(http.StatusAccepted, t)
}

func deref(s *string) string {
	if s == nil {
		return "unknown"
	}
	return *s
}

func nonNil[T any](s []T) []T {
	if s == nil {
		return []T{}
	}
	return s
}
