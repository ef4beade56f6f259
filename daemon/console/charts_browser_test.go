package console_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"
	"testing/fstest"
	"time"

	"github.com/labstack/echo/v4"
	"github.com/stretchr/testify/require"

	"github.com/vesta-cx/euterpe/daemon"
	"github.com/vesta-cx/euterpe/daemon/console"
	"github.com/vesta-cx/euterpe/daemon/console/browsertest"
)

// chartsJS makes the page's requests fail as a daemon that went away
// does (fetch rejects): those of /ui/gone.json always, all of them once
// window.offline is set.
const chartsJS = `
(function () {
  var real = window.fetch;
  window.fetch = function (url) {
    if (window.offline || String(url).indexOf("/ui/gone.json") >= 0) return Promise.reject(new TypeError("Failed to fetch"));
    return real.apply(this, arguments);
  };
})();`

// A chart whose history does not come says so quietly and raises no
// script error: one never drawn shows a note, one drawn stays, dimmed,
// and is drawn again once the history answers.
func TestChartsWithoutAnswer(t *testing.T) {
	b := browsertest.New(t)
	e := daemon.NewEcho(nil)
	c := console.New(console.Options{
		Product: "euterpe-test",
		Nav:     []console.NavItem{{Title: "Home", Path: "/ui/"}},
		Assets:  fstest.MapFS{"charts.js": {Data: []byte(chartsJS)}},
	})
	c.Mount(e)
	h := console.NewHistory(nil, time.Second, time.Minute)
	n := 0.0
	h.Gauge("backlog", "jobs", func(context.Context) (float64, error) { n++; return n, nil })
	page := c.MustPage("home", `{{define "content"}}
<div class="chart" id="drawn" data-history="/ui/history.json" data-series="backlog" data-refresh="1"></div>
<div class="chart" id="never" data-history="/ui/gone.json" data-series="backlog" data-refresh="1"></div>{{end}}
{{define "scripts"}}<script src="/ui/app/charts.js"></script>{{end}}`)
	e.GET("/ui/", func(ec echo.Context) error {
		return page.Render(ec, http.StatusOK, console.View{Title: "Home", Active: "/ui/"})
	})
	e.GET("/ui/history.json", echo.WrapHandler(h))
	srv := httptest.NewServer(e)
	defer srv.Close()
	h.Sample(t.Context(), time.Now())
	h.Sample(t.Context(), time.Now().Add(time.Second))

	b.Open(srv.URL + "/ui/")
	b.WaitFor("the chart", `document.querySelector("#drawn svg path.line")`, 20*time.Second)
	b.WaitFor("the note", `document.querySelector("#never").getAttribute("data-chart-state") === "unavailable"`, 20*time.Second)
	require.Contains(t, b.Text("#never"), "history unavailable")

	b.Eval(`window.offline = true`, nil)
	b.WaitFor("the dimmed chart", `document.querySelector("#drawn").classList.contains("stale")`, 20*time.Second)
	var kept bool
	b.Eval(`!!document.querySelector("#drawn svg path.line")`, &kept)
	require.True(t, kept, "the chart drawn is kept")

	b.Eval(`window.offline = false`, nil)
	b.WaitFor("the chart again", `!document.querySelector("#drawn").classList.contains("stale") && !document.querySelector("#drawn").hasAttribute("data-chart-state")`, 20*time.Second)
	require.Empty(t, b.Errors())
}
