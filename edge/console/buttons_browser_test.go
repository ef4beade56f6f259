package console_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/labstack/echo/v4"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/vesta-cx/euterpe/daemon/console/browsertest"
	"github.com/vesta-cx/euterpe/daemon/testsvc"
	"github.com/vesta-cx/euterpe/edge/console"
	"github.com/vesta-cx/euterpe/edge/jobs"
	"github.com/vesta-cx/euterpe/edge/library"
)

// A button whose request gets no answer at all (the edge down, the
// network gone: fetch rejects) is usable again and says so, rather than
// staying disabled with nothing shown.
func TestButtonsWhenTheEdgeDoesNotAnswer(t *testing.T) {
	b := browsertest.New(t)
	rdb, _ := testsvc.Redis(t)
	store := jobs.NewStore(rdb)
	ctx := context.Background()
	s := library.Defaults()
	s.Roots = t.TempDir()
	s.Watch = false
	lib, err := library.New(ctx, slog.New(slog.DiscardHandler), t.TempDir(), "w", s)
	require.NoError(t, err)
	t.Cleanup(func() { lib.Store.Close() })
	e := mountedWith(t, console.Deps{Jobs: store, Metrics: prometheus.NewRegistry(),
		Library: func() *library.Library { return lib }})
	// The job page's stream: opened, then quiet.
	e.GET("/v1/jobs/:id/events", func(ec echo.Context) error {
		ec.Response().Header().Set("Content-Type", "text/event-stream")
		ec.Response().WriteHeader(http.StatusOK)
		_, _ = fmt.Fprint(ec.Response(), "event: hello\ndata: {}\n\n")
		ec.Response().Flush()
		<-ec.Request().Context().Done()
		return nil
	})
	srv := httptest.NewServer(e)
	// The quiet stream ends only with its connection.
	t.Cleanup(func() { srv.CloseClientConnections(); srv.Close() })
	cr, err := store.Create(ctx, jobs.NewJob{Task: "chat", Payload: json.RawMessage(`{}`), TTL: 60})
	require.NoError(t, err)

	// Not subtests: the browser fails the test it was made for.
	for _, tc := range []struct{ name, page, button, out string }{
		{"submit", "/ui/", "#submit", "#submit-result"},
		{"cancel", "/ui/jobs/" + cr.ID, "#cancel", "#cancel-result"},
		{"scan", "/ui/library", "#scan-now", "#scan-result"},
	} {
		b.Open(srv.URL + tc.page)
		b.Eval(`window.fetch = function () { return Promise.reject(new TypeError("Failed to fetch")); }; true`, nil)
		b.Run(chromedp.Click(tc.button, chromedp.ByQuery))
		b.WaitFor(tc.name+": the message", `document.querySelector("`+tc.out+`").textContent.indexOf("did not answer") >= 0`, 10*time.Second)
		var disabled bool
		b.Eval(`document.querySelector("`+tc.button+`").disabled`, &disabled)
		assert.False(t, disabled, "%s: the button stays disabled", tc.name)
	}
	assert.Empty(t, b.Errors())
}

// A long streamed answer neither grows the page without bound nor costs
// the whole text again on each delta: the events table keeps its last 500
// rows and says how many it dropped, and the text its last 256 Ki
// characters, saying how many came in all.
func TestJobPageBoundsALongStream(t *testing.T) {
	b := browsertest.New(t)
	rdb, _ := testsvc.Redis(t)
	store := jobs.NewStore(rdb)
	e := mounted(t, store)
	cr, err := store.Create(context.Background(), jobs.NewJob{Task: "chat", Payload: json.RawMessage(`{}`), TTL: 60})
	require.NoError(t, err)

	const deltas, each = 600, 1000
	e.GET("/v1/jobs/:id/events", func(ec echo.Context) error {
		w := ec.Response()
		w.Header().Set("Content-Type", "text/event-stream")
		for i := 1; i <= deltas; i++ {
			text := fmt.Sprintf("%-*d|", each-1, i)
			data, _ := json.Marshal(map[string]any{"type": "delta", "step": "w", "data": map[string]string{"text": text}})
			if _, err := fmt.Fprintf(w, "event: delta\nid: 1-%d\ndata: %s\n\n", i, data); err != nil {
				return err
			}
		}
		_, err := fmt.Fprintf(w, "event: done\nid: 2-0\ndata: {\"type\":\"done\",\"data\":{}}\n\n")
		return err
	})
	e.GET("/v1/jobs/:id", func(ec echo.Context) error {
		return ec.JSON(http.StatusOK, map[string]any{"job_id": cr.ID, "status": "done", "result": map[string]string{"text": "whole"}})
	})
	srv := httptest.NewServer(e)
	t.Cleanup(srv.Close)

	b.Open(srv.URL + "/ui/jobs/" + cr.ID)
	b.WaitText("#stream-state", "ended", 30*time.Second)
	var rows int
	b.Eval(`document.querySelectorAll("#events tbody tr").length`, &rows)
	assert.Equal(t, 500, rows)
	assert.Contains(t, b.Text("#events-cut"), "101 earlier ones are not shown")
	var shown int
	b.Eval(`document.querySelector("#stream-text").lastChild.length`, &shown)
	assert.LessOrEqual(t, shown, 262144+262144/4)
	assert.GreaterOrEqual(t, shown, 262144)
	text := b.Text("#stream-text")
	assert.True(t, strings.HasSuffix(text, fmt.Sprintf("%-*d|", each-1, deltas)), "the latest text is shown")
	assert.Contains(t, b.Text("#stream-text-cut"), fmt.Sprintf("%d characters in all", deltas*each))
	assert.Empty(t, b.Errors())
}
