package console_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync/atomic"
	"testing"
	"testing/fstest"
	"time"

	"github.com/labstack/echo/v4"
	"github.com/stretchr/testify/require"

	"github.com/vesta-cx/euterpe/daemon"
	"github.com/vesta-cx/euterpe/daemon/console"
	"github.com/vesta-cx/euterpe/daemon/console/browsertest"
)

// The page script of the test: renders hostile text, follows /events and
// draws the history.
const testJS = `
document.addEventListener("DOMContentLoaded", function () {
  var E = window.euterpe, out = document.getElementById("out"), log = document.getElementById("log");
  out.appendChild(E.el("span", {id: "hostile", title: out.getAttribute("data-v")}, out.getAttribute("data-v")));
  window.seen = [];
  window.states = [];
  window.stream = E.sse("/events", {
    onEvent: function (ev) { if (ev.id) window.seen.push(ev.id + ":" + ev.type); log.appendChild(E.el("li", null, ev.type + " " + E.pretty(ev.data))); },
    onState: function (s) { window.states.push(s); }
  });
  window.deniedStates = [];
  E.sse("/events-denied", { onState: function (s) { window.deniedStates.push(s); } });
});`

// TestScriptInBrowser runs console.js in Chromium: data is shown as text,
// the event stream resumes after a cut without a gap or a duplicate and
// stops at the terminal event, charts draw, and the CSP holds (no page
// errors).
func TestScriptInBrowser(t *testing.T) {
	b := browsertest.New(t)
	e := daemon.NewEcho(nil)
	c := console.New(console.Options{
		Product: "euterpe-test",
		Nav:     []console.NavItem{{Title: "Home", Path: "/ui/"}},
		Assets:  fstest.MapFS{"test.js": {Data: []byte(testJS)}},
	})
	c.Mount(e)
	h := console.NewHistory(nil, time.Second, time.Minute)
	n := 0.0
	h.Gauge("backlog", "jobs", func(context.Context) (float64, error) { n++; return n, nil })
	_ = h
	page := c.MustPage("home", `{{define "content"}}<div id="out" data-v="{{.Data}}"></div><ol id="log"></ol>
<div class="chart" id="chart" data-history="/ui/history.json" data-series="backlog"></div>{{end}}
{{define "scripts"}}<script src="/ui/app/test.js"></script>{{end}}`)
	e.GET("/ui/", func(ec echo.Context) error {
		return page.Render(ec, http.StatusOK, console.View{Title: "Home", Active: "/ui/", Data: hostile})
	})
	e.GET("/ui/history.json", echo.WrapHandler(h))

	// /events serves entries 1..20, ten per connection (the second
	// connection must resume after the cut), the last one terminal.
	var conns, resumedFrom atomic.Int64
	e.GET("/events", func(ec echo.Context) error {
		w := ec.Response()
		w.Header().Set("Content-Type", "text/event-stream")
		w.WriteHeader(200)
		start := 1
		if v := ec.Request().Header.Get("Last-Event-ID"); v != "" {
			last, _ := strconv.Atoi(v)
			resumedFrom.Store(int64(last))
			start = last + 1
			// Resend the last one: the script must drop the duplicate.
			start--
		}
		conns.Add(1)
		fmt.Fprint(w, "event: hello\ndata: {}\n\n")
		for i := start; i <= 20 && i < start+10; i++ {
			typ := "progress"
			if i == 20 {
				typ = "done"
			}
			fmt.Fprintf(w, "id: %d\nevent: %s\ndata: {\"n\":%d}\n\n", i, typ, i)
			w.Flush()
			time.Sleep(20 * time.Millisecond)
		}
		return nil
	})
	// /events-denied serves one event, then the session ends: the
	// reconnect is refused 401, and the script stops asking.
	var denied atomic.Int64
	e.GET("/events-denied", func(ec echo.Context) error {
		if denied.Add(1) > 1 {
			return ec.String(http.StatusUnauthorized, "sign in")
		}
		w := ec.Response()
		w.Header().Set("Content-Type", "text/event-stream")
		w.WriteHeader(200)
		fmt.Fprint(w, "id: 1\nevent: progress\ndata: {}\n\n")
		return nil
	})
	srv := httptest.NewServer(e)
	defer srv.Close()
	_ = srvReady(t, srv.URL)
	h.Sample(t.Context(), time.Now())
	h.Sample(t.Context(), time.Now().Add(time.Second))

	b.Open(srv.URL + "/ui/")
	require.Equal(t, hostile, b.Text("#hostile"))
	var injected int
	b.Eval(`document.querySelectorAll("#out script, #out img").length`, &injected)
	require.Zero(t, injected)
	b.WaitFor("the terminal event", `window.states.indexOf("closed") >= 0`, 20*time.Second)
	var seen []string
	b.Eval(`window.seen`, &seen)
	want := []string{}
	for i := 1; i <= 20; i++ {
		typ := "progress"
		if i == 20 {
			typ = "done"
		}
		want = append(want, fmt.Sprintf("%d:%s", i, typ))
	}
	require.Equal(t, want, seen)
	// Each connection resent the entry it resumed after; none shows twice.
	require.EqualValues(t, 19, resumedFrom.Load())
	require.EqualValues(t, 3, conns.Load(), "no reconnect after the terminal event")
	b.WaitFor("the refused reconnect", `window.deniedStates.indexOf("signed-out") >= 0`, 20*time.Second)
	time.Sleep(1500 * time.Millisecond) // a retry would come after 500 ms
	require.EqualValues(t, 2, denied.Load(), "the stream was asked for again after a 401")
	b.WaitFor("the chart", `document.querySelector("#chart svg path.line")`, 20*time.Second)
	// The browser reports the refused reconnect itself; nothing else.
	require.Equal(t, []string{"console: Failed to load resource: the server responded with a status of 401 (Unauthorized)"}, b.Errors())
	b.Screenshot("console-foundation")
}

func srvReady(t *testing.T, url string) bool {
	r, err := http.Get(url + "/ui/assets/console.css")
	require.NoError(t, err)
	r.Body.Close()
	return r.StatusCode == 200
}
