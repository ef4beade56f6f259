package gateway

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/labstack/echo/v4"
	"github.com/vesta-cx/euterpe/daemon/testsvc"
	"github.com/vesta-cx/euterpe/edge/jobs"
)

// A catch-up target between two entries, with a full page after the
// client's cursor whose first entry is already past the target, ends the
// catch-up instead of fetching the same page forever.
func TestPumpCatchUpBetweenEntriesMakesProgress(t *testing.T) {
	testsvc.EachRedis(t, testPumpCatchUpBetweenEntriesMakesProgress)
}

func testPumpCatchUpBetweenEntriesMakesProgress(t *testing.T) {
	rdb, opt := testsvc.Redis(t)
	store := jobs.NewStore(rdb)
	g := New(slog.New(slog.NewTextHandler(io.Discard, nil)), DefaultSettings(), store, opt)
	ctx := context.Background()
	c, err := store.Create(ctx, jobs.NewJob{Task: "chat", Payload: json.RawMessage(`{}`), TTL: 60})
	if err != nil {
		t.Fatal(err)
	}
	gap := jobs.MustStreamID(c.EventID)
	time.Sleep(3 * time.Millisecond)
	for i := range catchUpPage + 10 {
		if _, err := store.AppendEvent(ctx, c.ID, "progress", "t", json.RawMessage(`{}`)); err != nil {
			t.Fatal(i, err)
		}
	}
	evs, err := store.Events(ctx, c.ID, c.EventID, 1)
	if err != nil || len(evs) != 1 || jobs.MustStreamID(evs[0].ID).MS == gap.MS {
		t.Fatalf("need a millisecond gap after the first event: %v %v", evs, err)
	}
	cursor := gap.Next()                                 // between the two entries
	sub := &Sub{Job: c.ID, CatchUpTo: gap.Next().Next()} // also between them
	ch := make(chan *Entry, 1)
	ch <- &Entry{Event: evs[0]}
	close(ch)
	sub.C = ch

	rec := httptest.NewRecorder()
	w := &sseWriter{w: echo.NewResponse(rec, echo.New())}
	pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	var grace <-chan time.Time
	if err := g.pump(pctx, sub, &cursor, w, nil, &grace); err != nil {
		t.Fatalf("pump: %v (catch-up made no progress)", err)
	}
	if got := strings.Count(rec.Body.String(), "\nevent: progress"); got != 1 || !strings.HasPrefix(rec.Body.String(), "id: "+evs[0].ID) {
		t.Fatalf("frames:\n%.300s", rec.Body.String())
	}
	if cursor.String() != evs[0].ID {
		t.Fatalf("cursor %s, want %s", cursor, evs[0].ID)
	}
}
