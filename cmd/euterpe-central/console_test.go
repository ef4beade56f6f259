package main

import (
	"context"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/vesta-cx/euterpe/central/operators"
	"github.com/vesta-cx/euterpe/daemon/sqldb"
)

// The program serves the console: sign in with an operator token and the
// pages of every enabled role are there.
func TestServeHasConsole(t *testing.T) {
	for _, e := range []sqldb.Engine{sqldb.Postgres, sqldb.SQLite} {
		t.Run(string(e), func(t *testing.T) {
			f := newFixture(t, e)
			op, err := operators.New(f.db).Create(context.Background(), "alice")
			if err != nil {
				t.Fatal(err)
			}
			c := startChild(t, []string{"EUTERPE_DATABASE_URL=" + f.url, "EUTERPE_KEYRING=" + f.keyring,
				"EUTERPE_CENTRAL_ROLES=api,sweeper,dispatcher,sync,pipeline,console", "EUTERPE_STATE_DIR=" + t.TempDir()}, "serve")
			var addr string
			select {
			case addr = <-c.addr:
			case <-time.After(30 * time.Second):
				t.Fatal("serve did not start")
			}
			base := "http://" + addr
			jar, _ := cookiejar.New(nil)
			cl := &http.Client{Jar: jar, Timeout: 30 * time.Second}
			get := func(path string) (int, string) {
				res, err := cl.Get(base + path)
				if err != nil {
					t.Fatal(err)
				}
				defer res.Body.Close()
				b, _ := io.ReadAll(res.Body)
				return res.StatusCode, string(b)
			}
			status, page := get("/ui/fleet") // redirected to the form
			m := regexp.MustCompile(`name="csrf" value="([^"]+)"`).FindStringSubmatch(page)
			if status != http.StatusOK || m == nil || !strings.Contains(page, `id="signin"`) {
				t.Fatalf("sign-in form: %d\n%s", status, page)
			}
			res, err := cl.PostForm(base+"/ui/signin", url.Values{"csrf": {m[1]}, "token": {op.Token}, "next": {"/ui/fleet"}})
			if err != nil {
				t.Fatal(err)
			}
			b, _ := io.ReadAll(res.Body)
			res.Body.Close()
			if res.StatusCode != http.StatusOK || !strings.Contains(string(b), "Live fleet tail") {
				t.Fatalf("after sign-in: %d\n%s", res.StatusCode, b)
			}
			for _, p := range []string{"/ui/", "/ui/transcode", "/ui/transcode/dead", "/ui/pipeline", "/ui/pipeline/dlq", "/ui/history.json", "/ui/assets/console.js", "/ui/app/fleet.js"} {
				if status, _ := get(p); status != http.StatusOK {
					t.Errorf("%s: %d", p, status)
				}
			}
			_ = c.cmd.Process.Signal(syscall.SIGTERM)
			waitFor(t, 20*time.Second, "exit", c.done)
		})
	}
}
