package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/labstack/echo/v4"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/vesta-cx/euterpe/daemon"
	"github.com/vesta-cx/euterpe/daemon/testsvc"
	"github.com/vesta-cx/euterpe/edge/library"
)

// stuckComponent ignores cancellation until released, like a backend call
// that does not honour its context.
type stuckComponent struct {
	running chan struct{}
	release chan struct{}
}

func (*stuckComponent) Mount(*echo.Echo) {}

func (s *stuckComponent) Run(context.Context) error {
	close(s.running)
	<-s.release
	return errors.New("stopped late")
}

// afterReturnLog holds back the "shutting down" record until runDaemon has
// returned (or hold has passed), and records whether anything was logged
// after the return. Unlike slog's own handlers it serializes nothing, so
// the held record blocks no other.
type afterReturnLog struct {
	returned chan struct{}
	hold     time.Duration
	late     atomic.Bool
	mu       sync.Mutex
	msgs     []string
}

func (h *afterReturnLog) Enabled(context.Context, slog.Level) bool { return true }
func (h *afterReturnLog) WithAttrs([]slog.Attr) slog.Handler       { return h }
func (h *afterReturnLog) WithGroup(string) slog.Handler            { return h }

func (h *afterReturnLog) Handle(_ context.Context, r slog.Record) error {
	if r.Message == "shutting down" {
		select {
		case <-h.returned:
		case <-time.After(h.hold):
		}
	}
	select {
	case <-h.returned:
		h.late.Store(true)
	default:
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	h.msgs = append(h.msgs, r.Message)
	return nil
}

// A component that does not stop within the grace is named in runDaemon's
// error, so the process exits instead of pretending a clean stop, and
// nothing runDaemon started writes to the log after it returned.
func TestRunDaemonComponentStuckPastGrace(t *testing.T) {
	_, opt := testsvc.Redis(t)
	stuck := &stuckComponent{running: make(chan struct{}), release: make(chan struct{})}
	saved := plugins
	plugins = append(append([]Plugin(nil), plugins...), Plugin{
		Name:  "stuck",
		Build: func(context.Context, Deps) (Component, error) { return stuck, nil },
	})
	t.Cleanup(func() { plugins = saved })
	t.Cleanup(func() { close(stuck.release) })

	env := map[string]string{
		"EUTERPE_REDIS_URL":      fmt.Sprintf("redis://%s/%d", opt.Addr, opt.DB),
		"EUTERPE_EDGE_ADDR":      freeAddr(t),
		"EUTERPE_STATE_DIR":      t.TempDir(),
		"EUTERPE_SHUTDOWN_GRACE": "1s",
		"EUTERPE_WORKER_DRAIN":   "0",
	}
	cfg, s := newServeConfig(envMap(env))
	require.NoError(t, cfg.Parse(nil))
	h := &afterReturnLog{returned: make(chan struct{}), hold: 500 * time.Millisecond}
	log := slog.New(h)

	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		err := runDaemon(ctx, log, s, envMap(env))
		close(h.returned)
		done <- err
	}()
	select {
	case <-stuck.running:
	case <-time.After(10 * time.Second):
		t.Fatal("the component never ran")
	}
	cancel()
	select {
	case err := <-done:
		if assert.Error(t, err, "a component still running after the grace is not a clean stop") {
			assert.Contains(t, err.Error(), "stuck")
		}
	case <-time.After(10 * time.Second):
		t.Fatal("runDaemon did not return")
	}
	// Give a goroutine left behind the time to log.
	time.Sleep(100 * time.Millisecond)
	assert.False(t, h.late.Load(), "logged after runDaemon returned")
	h.mu.Lock()
	defer h.mu.Unlock()
	assert.Contains(t, h.msgs, "shutting down")
}

// gateComponent holds one request marked X-Test-Gate before its handler
// runs, until released, so a test can stop the daemon with it in flight.
// It keeps the library it was built after, to watch its database.
type gateComponent struct {
	entered chan struct{}
	release chan struct{}
	lib     *library.Library
}

func (g *gateComponent) Mount(e *echo.Echo) {
	e.Use(func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c echo.Context) error {
			if c.Request().Header.Get("X-Test-Gate") != "" {
				close(g.entered)
				<-g.release
			}
			return next(c)
		}
	})
}

func (*gateComponent) Run(ctx context.Context) error { <-ctx.Done(); return nil }

// A library request in flight when the stop begins gets its normal answer:
// the library's database stays open while HTTP drains, although the
// library's own loops have stopped, and is closed once runDaemon is done.
func TestLibraryRequestInFlightAtStopIsAnswered(t *testing.T) {
	_, opt := testsvc.Redis(t)
	gate := &gateComponent{entered: make(chan struct{}), release: make(chan struct{})}
	saved := plugins
	plugins = append(append([]Plugin(nil), plugins...), Plugin{
		Name: "gate",
		Build: func(_ context.Context, d Deps) (Component, error) {
			gate.lib = d.Parts.library()
			return gate, nil
		},
	})
	t.Cleanup(func() { plugins = saved })
	released := false
	t.Cleanup(func() {
		if !released {
			close(gate.release)
		}
	})

	addr := freeAddr(t)
	env := map[string]string{
		"EUTERPE_REDIS_URL":     redisURLOf(opt),
		"EUTERPE_EDGE_ADDR":     addr,
		"EUTERPE_STATE_DIR":     t.TempDir(),
		"EUTERPE_LIBRARY_ROOTS": t.TempDir(),
	}
	cfg, s := newServeConfig(envMap(env))
	require.NoError(t, cfg.Parse(nil))
	logs := &testsvc.LogBuffer{}
	log, err := daemon.NewLogger(logs, "debug")
	require.NoError(t, err)

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- runDaemon(ctx, log, s, envMap(env)) }()
	base := "http://" + addr
	require.Eventually(t, func() bool {
		code, _ := getPage(base + "/healthz")
		return code == http.StatusOK
	}, 10*time.Second, 20*time.Millisecond, "%s", logs)
	require.NotNil(t, gate.lib, "the library is open")

	type answer struct {
		code int
		body string
	}
	answered := make(chan answer, 1)
	go func() {
		req, _ := http.NewRequest(http.MethodGet, base+"/api/v1/jobs", nil)
		req.Header.Set("X-Test-Gate", "1")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			answered <- answer{0, err.Error()}
			return
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		answered <- answer{resp.StatusCode, string(b)}
	}()
	select {
	case <-gate.entered:
	case <-time.After(10 * time.Second):
		t.Fatal("the request never reached the daemon")
	}
	cancel()
	// The library's loops stop within milliseconds of the stop; a database
	// closed with them would show here.
	closed := func() bool { return gate.lib.Store.Ping(context.Background()) != nil }
	assert.Never(t, closed, 2*time.Second, 20*time.Millisecond, "the database was closed with a request in flight")
	released = true
	close(gate.release)

	select {
	case a := <-answered:
		assert.Equal(t, http.StatusOK, a.code, a.body)
		assert.Contains(t, a.body, `"items"`)
	case <-time.After(10 * time.Second):
		t.Fatal("no answer")
	}
	select {
	case err := <-done:
		assert.NoError(t, err)
	case <-time.After(15 * time.Second):
		t.Fatal("runDaemon did not return")
	}
	assert.True(t, closed(), "the database is closed once the daemon stopped")
	assert.NotContains(t, logs.String(), "request failed")
}
