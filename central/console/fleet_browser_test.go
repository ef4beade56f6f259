package console_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	dconsole "github.com/vesta-cx/euterpe/daemon/console"
	"github.com/vesta-cx/euterpe/daemon/console/browsertest"
	"github.com/vesta-cx/euterpe/daemon/sqldb"
	"github.com/vesta-cx/euterpe/sync/ingest"
	"github.com/vesta-cx/euterpe/sync/wire"
)

// The live fleet tail shows an event's data clipped like every payload
// the consoles show: an edge may send 64 KiB of it per event, and the
// tail keeps 200 events.
func TestFleetTailClipsEventData(t *testing.T) {
	c := startCentral(t, sqldb.SQLite, nil)
	b := browsertest.New(t)
	ctx := context.Background()
	reg, err := ingest.NewRegistry(c.deps.DB, c.deps.Keys).Register(ctx, "edge-large")
	if err != nil {
		t.Fatal(err)
	}

	b.Open(c.base + "/ui/fleet")
	b.WaitFor("the sign-in form", `!!document.querySelector("#signin")`, wait)
	b.Run(chromedp.SetValue("#token", c.op.Token, chromedp.ByQuery), chromedp.Submit("#signin", chromedp.ByQuery))
	b.WaitText("#tail-state", "open", wait)

	data, _ := json.Marshal(map[string]string{"text": strings.Repeat("€", 20_000)})
	ms := time.Now().UnixMilli()
	e := wire.NewEvent(reg.EdgeID, "job-large", "1-0", "progress", "step", ms, data)
	e.Task = "chat"
	if _, err := ingest.NewStore(c.deps.DB).Ingest(ctx, wire.Batch{EdgeID: reg.EdgeID, SentAt: time.Now(), Events: []wire.Event{e}}); err != nil {
		t.Fatal(err)
	}
	b.WaitText("#tail", "truncated", wait)
	var shown string
	b.Eval(`document.querySelector("#tail tr td:last-child").textContent`, &shown)
	if n := len([]rune(shown)); n > dconsole.PageText+100 {
		t.Fatalf("the data shown is %d characters", n)
	}
	if !strings.HasPrefix(shown, `{"text":"€€€`) || !strings.Contains(shown, "20011 characters in all") {
		t.Fatalf("shown: %.80q … %q", shown, shown[len(shown)-60:])
	}
	if errs := b.Errors(); len(errs) > 0 {
		t.Fatalf("page errors: %s", strings.Join(errs, "\n"))
	}
}
