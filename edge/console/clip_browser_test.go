package console_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/labstack/echo/v4"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/vesta-cx/euterpe/daemon/console/browsertest"
	"github.com/vesta-cx/euterpe/daemon/testsvc"
	"github.com/vesta-cx/euterpe/edge/console"
	"github.com/vesta-cx/euterpe/edge/jobs"
)

// The job page fills in the result and error from GET /v1/jobs/{id} once
// the job ends, and shows each event's data: what the script sets is
// clipped like what the server renders, however large the API's answer.
func TestJobPageClipsWhatItFetches(t *testing.T) {
	b := browsertest.New(t)
	rdb, _ := testsvc.Redis(t)
	store := jobs.NewStore(rdb)
	ctx := context.Background()
	e := mounted(t, store)
	cr, err := store.Create(ctx, jobs.NewJob{Task: "chat", Payload: json.RawMessage(`{}`), TTL: 60})
	require.NoError(t, err)

	big := strings.Repeat("€😀", 200_000)
	e.GET("/v1/jobs/:id/events", func(ec echo.Context) error {
		data, _ := json.Marshal(map[string]any{"type": "done", "step": "w", "data": map[string]string{"text": big}})
		ec.Response().Header().Set("Content-Type", "text/event-stream")
		_, err := fmt.Fprintf(ec.Response(), "event: done\nid: 1-1\ndata: %s\n\n", data)
		return err
	})
	e.GET("/v1/jobs/:id", func(ec echo.Context) error {
		return ec.JSON(http.StatusOK, map[string]any{"job_id": cr.ID, "status": "done",
			"result": map[string]string{"text": big}, "error": slices.Repeat([]string{big}, 50)})
	})
	srv := httptest.NewServer(e)
	t.Cleanup(srv.Close)

	b.Open(srv.URL + "/ui/jobs/" + cr.ID)
	b.WaitFor("the result", `document.querySelector("#result").textContent.length > 0`, 30*time.Second)
	b.WaitFor("the event", `document.querySelector("#events tbody tr pre")`, 10*time.Second)
	for _, sel := range []string{"#result", "#error", "#events tbody tr pre"} {
		text := b.Text(sel)
		assert.Less(t, len([]rune(text)), console.PageText+200, sel)
		assert.True(t, strings.Contains(text, "truncated"), "%s has no truncation mark", sel)
		assert.NotContains(t, text, "\uFFFD", "%s: a character cut in half", sel)
	}
	assert.Empty(t, b.Errors())
}
