package console_test

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/labstack/echo/v4"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/vesta-cx/euterpe/daemon"
	"github.com/vesta-cx/euterpe/daemon/console"
)

const hostile = `</title><script>alert(1)</script><img src=x onerror=alert(2)>`

func newServer(t *testing.T) (*echo.Echo, *console.Console) {
	e := daemon.NewEcho(slog.New(slog.NewTextHandler(io.Discard, nil)))
	c := console.New(console.Options{Product: "euterpe-test", Nav: []console.NavItem{{Title: "Home", Path: "/ui/"}}})
	c.Mount(e)
	return e, c
}

func get(t *testing.T, h http.Handler, path string) *httptest.ResponseRecorder {
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, path, nil))
	return rec
}

func TestPageEscapesData(t *testing.T) {
	e, c := newServer(t)
	p := c.MustPage("home", `{{define "content"}}<p id="v">{{.Data}}</p><a href="{{.Data}}">x</a>{{end}}`)
	e.GET("/ui/", func(ec echo.Context) error {
		return p.Render(ec, http.StatusOK, console.View{Title: hostile, Active: "/ui/", Data: hostile})
	})
	rec := get(t, e, "/ui/")
	require.Equal(t, http.StatusOK, rec.Code)
	body := rec.Body.String()
	require.NotContains(t, body, "<script>alert")
	require.NotContains(t, body, "<img src=x")
	require.Contains(t, body, "&lt;script&gt;alert(1)&lt;/script&gt;")
	require.Contains(t, rec.Header().Get("Content-Security-Policy"), "script-src 'self'")
	require.Contains(t, body, `class="active"`)
}

func TestAssetsServed(t *testing.T) {
	e, _ := newServer(t)
	for _, tc := range []struct {
		path string
		code int
		ct   string
	}{
		{"/ui/assets/console.js", 200, "javascript"},
		{"/ui/assets/console.css", 200, "text/css"},
		{"/ui/assets/base.html", 404, ""},
		{"/ui/assets/base.html/.", 404, ""}, // cleaned to base.html by the file server
		{"/ui/assets/x/../base.html", 404, ""},
		{"/ui/assets/", 404, ""},
		{"/ui/assets/nope.js", 404, ""},
	} {
		rec := get(t, e, tc.path)
		require.Equal(t, tc.code, rec.Code, tc.path)
		if tc.ct != "" {
			require.Contains(t, rec.Header().Get("Content-Type"), tc.ct, tc.path)
		}
	}
	require.Equal(t, http.StatusFound, get(t, e, "/ui").Code)
}

func TestCrossOrigin(t *testing.T) {
	mw, err := console.CrossOrigin("https://proxy.example")
	require.NoError(t, err)
	_, err = console.CrossOrigin("not a url")
	require.Error(t, err)
	e := daemon.NewEcho(slog.New(slog.NewTextHandler(io.Discard, nil)))
	e.Use(mw)
	e.POST("/x", func(c echo.Context) error { return c.NoContent(204) })
	e.GET("/x", func(c echo.Context) error { return c.NoContent(204) })
	for _, tc := range []struct {
		name, method string
		headers      map[string]string
		code         int
	}{
		{"no browser headers (curl)", "POST", nil, 204},
		{"same origin", "POST", map[string]string{"Sec-Fetch-Site": "same-origin"}, 204},
		{"cross site", "POST", map[string]string{"Sec-Fetch-Site": "cross-site"}, 403},
		{"same site other origin", "POST", map[string]string{"Sec-Fetch-Site": "same-site"}, 403},
		{"origin mismatch", "POST", map[string]string{"Origin": "https://evil.example"}, 403},
		{"origin matches host", "POST", map[string]string{"Origin": "http://example.com"}, 204},
		{"trusted origin", "POST", map[string]string{"Origin": "https://proxy.example", "Sec-Fetch-Site": "cross-site"}, 204},
		{"cross-site GET is safe", "GET", map[string]string{"Sec-Fetch-Site": "cross-site"}, 204},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req := httptest.NewRequest(tc.method, "http://example.com/x", nil)
			for k, v := range tc.headers {
				req.Header.Set(k, v)
			}
			rec := httptest.NewRecorder()
			e.ServeHTTP(rec, req)
			require.Equal(t, tc.code, rec.Code, rec.Body.String())
			if tc.code == 403 {
				require.Contains(t, rec.Body.String(), "cross_origin")
			}
		})
	}
}

func TestTokens(t *testing.T) {
	a, b := console.NewTokens(), console.NewTokens()
	tok := a.Issue("s1")
	require.True(t, a.Valid("s1", tok))
	require.False(t, a.Valid("s2", tok), "bound to the session")
	require.False(t, b.Valid("s1", tok), "bound to the key")
	require.False(t, a.Valid("", a.Issue("")), "no session, no token")
	require.False(t, a.Valid("s1", ""))
	req := httptest.NewRequest("POST", "/", strings.NewReader("csrf="+tok))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	require.Equal(t, tok, console.FromRequest(req))
	req.Header.Set("X-CSRF-Token", "h")
	require.Equal(t, "h", console.FromRequest(req))
}

func TestHistory(t *testing.T) {
	reg := prometheus.NewRegistry()
	done := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "t_done_total"}, []string{"status"})
	dur := prometheus.NewHistogram(prometheus.HistogramOpts{Name: "t_duration_seconds", Buckets: []float64{1, 10}})
	reg.MustRegister(done, dur)
	h := console.NewHistory(nil, 10*time.Second, time.Minute) // 6 samples kept
	level := 0.0
	h.Gauge("backlog", "jobs", func(context.Context) (float64, error) { return level, nil })
	h.Gauge("broken", "", func(context.Context) (float64, error) { return 0, io.ErrUnexpectedEOF })
	h.Rate("throughput", "jobs/s", console.GatherValue(reg, "t_done_total", nil))
	h.Rate("failures", "jobs/s", console.GatherValue(reg, "t_done_total", map[string]string{"status": "error"}))
	h.Histogram("duration", console.GatherHistogram(reg, "t_duration_seconds", "s"))

	t0 := time.Unix(1_700_000_000, 0)
	for i := 0; i < 10; i++ {
		level = float64(i)
		done.WithLabelValues("done").Add(20) // 2/s
		if i%2 == 0 {
			done.WithLabelValues("error").Add(10)
		}
		dur.Observe(0.5)
		if i >= 8 {
			dur.Observe(5)
		}
		h.Sample(context.Background(), t0.Add(time.Duration(i)*10*time.Second))
	}
	s := h.Snapshot()
	require.Len(t, s.Series["backlog"].Points, 6, "the ring keeps the span")
	require.Equal(t, 9.0, s.Series["backlog"].Points[5][1])
	require.Empty(t, s.Series["broken"].Points, "a failing source leaves holes, not zeros")
	tp := s.Series["throughput"].Points
	require.Len(t, tp, 6)
	for _, p := range tp {
		require.InDelta(t, 2.5, p[1], 0.6) // 20 done + 0 or 10 errors per 10 s
	}
	hv := s.Histograms["duration"]
	require.Len(t, hv.Buckets, 3)
	// The window spans the last 7 cumulative snapshots (6 intervals).
	require.Equal(t, []float64{6, 2, 0}, []float64{hv.Buckets[0].Value, hv.Buckets[1].Value, hv.Buckets[2].Value})
	require.Equal(t, "≤1s", hv.Buckets[0].Label)

	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest("GET", "/ui/history.json", nil))
	var got console.Snapshot
	require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &got))
	require.Equal(t, 60.0, got.SpanS)
	require.Len(t, got.Series["backlog"].Points, 6)
}
