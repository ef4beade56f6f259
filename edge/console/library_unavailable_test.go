package console_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/labstack/echo/v4"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/vesta-cx/euterpe/daemon"
	"github.com/vesta-cx/euterpe/daemon/testsvc"
	"github.com/vesta-cx/euterpe/edge/console"
	"github.com/vesta-cx/euterpe/edge/jobs"
	"github.com/vesta-cx/euterpe/edge/library"
)

// A library that is configured but whose database cannot be opened (a full
// disk, a read-only state directory) is not "off": the library page answers
// 503 and says why and that jobs run, and the queue page's readiness says
// the same; an unconfigured and an open library keep their pages.
func TestConsoleLibraryPageWhileTheDatabaseCannotBeOpened(t *testing.T) {
	rdb, _ := testsvc.Redis(t)
	store := jobs.NewStore(rdb)
	s := library.Defaults()
	s.Roots = t.TempDir()
	s.Watch = false
	lib, err := library.New(context.Background(), slog.New(slog.DiscardHandler), t.TempDir(), "w", s)
	require.NoError(t, err)
	t.Cleanup(func() { lib.Store.Close() })

	readOnly := errors.New("open /var/lib/euterpe/library.db: read-only file system")
	long := errors.New(strings.Repeat("x", 2000))
	unavailable := "the library database cannot be opened: "
	cases := []struct {
		name    string
		lib     *library.Library
		state   *console.LibraryState // nil: no LibraryState func at all
		code    int
		want    []string
		wantNot []string
		ready   string // the queue page's library readiness
	}{
		{name: "not configured", code: http.StatusOK,
			want: []string{"The media library is off"}, wantNot: []string{unavailable},
			ready: "not configured (EUTERPE_LIBRARY_ROOTS is empty)"},
		{name: "not configured, reported", state: &console.LibraryState{}, code: http.StatusOK,
			want: []string{"The media library is off"}, wantNot: []string{unavailable},
			ready: "not configured (EUTERPE_LIBRARY_ROOTS is empty)"},
		{name: "configured, cannot be opened", state: &console.LibraryState{Configured: true, OpenErr: readOnly},
			code:    http.StatusServiceUnavailable,
			want:    []string{unavailable + "open /var/lib/euterpe/library.db: read-only file system; jobs run as usual; retrying"},
			wantNot: []string{"The media library is off", "Scan progress"},
			ready:   unavailable + "open /var/lib/euterpe/library.db: read-only file system; jobs run as usual; retrying"},
		{name: "configured, reason not known yet", state: &console.LibraryState{Configured: true},
			code: http.StatusServiceUnavailable, want: []string{unavailable, "jobs run as usual; retrying"},
			wantNot: []string{"The media library is off"}, ready: unavailable},
		{name: "configured, long reason", state: &console.LibraryState{Configured: true, OpenErr: long},
			code: http.StatusServiceUnavailable, want: []string{unavailable, "jobs run as usual; retrying"},
			wantNot: []string{strings.Repeat("x", 513)}, ready: unavailable},
		{name: "open", lib: lib, state: &console.LibraryState{Configured: true}, code: http.StatusOK,
			want: []string{"Scan progress", "No duplicates."}, wantNot: []string{unavailable, "The media library is off"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			d := console.Deps{Jobs: store, Metrics: prometheus.NewRegistry(),
				Library: func() *library.Library { return c.lib }}
			if c.state != nil {
				st := *c.state
				d.LibraryState = func() console.LibraryState { return st }
			}
			e := mountedWith(t, d)
			rec := httptest.NewRecorder()
			e.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/ui/library", nil))
			body := rec.Body.String()
			assert.Equal(t, c.code, rec.Code, body)
			for _, w := range c.want {
				assert.Contains(t, body, w)
			}
			for _, w := range c.wantNot {
				assert.NotContains(t, body, w)
			}

			rec = httptest.NewRecorder()
			e.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/ui/queue", nil))
			require.Equal(t, http.StatusOK, rec.Code)
			if c.ready != "" {
				assert.Contains(t, rec.Body.String(), c.ready)
			}
			if c.lib != nil {
				assert.NotContains(t, rec.Body.String(), unavailable)
			}
		})
	}
}

// mountedWith serves a console built from d with a quiet log.
func mountedWith(t *testing.T, d console.Deps) *echo.Echo {
	t.Helper()
	c, err := console.New(d)
	require.NoError(t, err)
	e := daemon.NewEcho(slog.New(slog.NewTextHandler(io.Discard, nil)))
	c.Mount(e)
	return e
}
