package console_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/labstack/echo/v4"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/vesta-cx/euterpe/daemon/console/browsertest"
	"github.com/vesta-cx/euterpe/daemon/testsvc"
	"github.com/vesta-cx/euterpe/edge/jobs"
)

// A job delivered again after its worker died mid-answer streams the whole
// text again after the dead attempt's deltas: the page shows the second
// attempt's text alone, not the first one's start glued to it.
func TestJobPageRedeliveryStartsTextOver(t *testing.T) {
	b := browsertest.New(t)
	rdb, _ := testsvc.Redis(t)
	store := jobs.NewStore(rdb)
	e := mounted(t, store)
	cr, err := store.Create(context.Background(), jobs.NewJob{Task: "chat", Payload: json.RawMessage(`{}`), TTL: 60})
	require.NoError(t, err)

	events := []struct {
		typ  string
		data map[string]any
	}{
		{"running", map[string]any{"worker": "w1", "delivery": 1}},
		{"delta", map[string]any{"text": "Hel"}},
		{"delta", map[string]any{"text": "lo, par"}},
		{"running", map[string]any{"worker": "w2", "delivery": 2}},
		{"delta", map[string]any{"text": "Hello, "}},
		{"delta", map[string]any{"text": "world"}},
		{"done", map[string]any{}},
	}
	e.GET("/v1/jobs/:id/events", func(ec echo.Context) error {
		w := ec.Response()
		w.Header().Set("Content-Type", "text/event-stream")
		for i, ev := range events {
			data, _ := json.Marshal(map[string]any{"type": ev.typ, "step": "w", "data": ev.data})
			if _, err := fmt.Fprintf(w, "event: %s\nid: 1-%d\ndata: %s\n\n", ev.typ, i, data); err != nil {
				return err
			}
		}
		return nil
	})
	e.GET("/v1/jobs/:id", func(ec echo.Context) error {
		return ec.JSON(http.StatusOK, map[string]any{"job_id": cr.ID, "status": "done", "result": map[string]string{"text": "Hello, world"}})
	})
	srv := httptest.NewServer(e)
	t.Cleanup(srv.Close)

	b.Open(srv.URL + "/ui/jobs/" + cr.ID)
	b.WaitText("#stream-state", "ended", 30*time.Second)
	var rows int
	b.Eval(`document.querySelectorAll("#events tbody tr").length`, &rows)
	assert.Equal(t, len(events), rows, "every event stays in the table")
	var shown string
	b.Eval(`document.querySelector("#stream-text").lastChild.data`, &shown)
	assert.Equal(t, "Hello, world", shown)
	assert.Empty(t, b.Text("#stream-text-cut"))
	assert.Empty(t, b.Errors())
}
