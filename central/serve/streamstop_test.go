package serve_test

import (
	"bufio"
	"context"
	"net/http"
	"regexp"
	"testing"
	"time"

	"github.com/labstack/echo/v4"
	"github.com/vesta-cx/euterpe/central/serve"
	"github.com/vesta-cx/euterpe/daemon"
	"github.com/vesta-cx/euterpe/daemon/sqldb"
	"github.com/vesta-cx/euterpe/daemon/testsvc"
)

// streamRole mounts an event stream that stays open until its request's
// context ends, as the fleet's event tail does.
type streamRole struct{}

func (streamRole) Name() string                  { return "streams" }
func (streamRole) Run(ctx context.Context) error { <-ctx.Done(); return nil }
func (streamRole) MountRoutes(e *echo.Echo) {
	e.GET("/test/stream", func(c echo.Context) error {
		c.Response().Header().Set(echo.HeaderContentType, "text/event-stream")
		c.Response().WriteHeader(http.StatusOK)
		_, _ = c.Response().Write([]byte(": connected\n\n"))
		c.Response().Flush()
		<-c.Request().Context().Done()
		return nil
	})
}

var listeningAt = regexp.MustCompile(`"msg":"listening","addr":"([^"]+)"`)

// A client with an event stream open does not hold the stop for the
// whole EUTERPE_SHUTDOWN_GRACE: the stream ends when the stop begins.
func TestOpenStreamDoesNotHoldTheStop(t *testing.T) {
	const grace = 20 * time.Second
	app := serve.NewApp()
	app.Register(serve.Definition{Name: "streams", New: func(*serve.Deps) (serve.Role, error) { return streamRole{}, nil }})
	env := serveEnv(t, sqldb.SQLite, map[string]string{"EUTERPE_CENTRAL_ROLES": "api,streams", "EUTERPE_SHUTDOWN_GRACE": grace.String()})
	getenv := func(k string) string { return env[k] }
	cfg := daemon.NewConfig("euterpe-central serve", getenv)
	var s serve.Settings
	app.Bind(cfg, &s)
	if err := cfg.Parse(nil); err != nil {
		t.Fatal(err)
	}
	logs := &testsvc.LogBuffer{}
	log, err := daemon.NewLogger(logs, "info")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	d, closeDB, err := app.Open(ctx, s, log, getenv)
	if err != nil {
		t.Fatal(err)
	}
	defer closeDB()
	done := make(chan error, 1)
	go func() { done <- app.Serve(ctx, s, d) }()
	var base string
	deadline := time.Now().Add(20 * time.Second)
	for base == "" {
		if m := listeningAt.FindStringSubmatch(logs.String()); m != nil {
			base = "http://" + m[1]
		} else if time.Now().After(deadline) {
			t.Fatalf("serve did not listen:\n%s", logs)
		}
		time.Sleep(10 * time.Millisecond)
	}
	res, err := http.Get(base + "/test/stream")
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	if line, err := bufio.NewReader(res.Body).ReadString('\n'); err != nil || line != ": connected\n" {
		t.Fatalf("stream: %q, %v", line, err)
	}

	began := time.Now()
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("serve: %v", err)
		}
	case <-time.After(grace):
		t.Fatal("serve still running after the grace")
	}
	if took := time.Since(began); took > 5*time.Second {
		t.Fatalf("the stop took %s with a stream open (grace %s)", took, grace)
	}
}
