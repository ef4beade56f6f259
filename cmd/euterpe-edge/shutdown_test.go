package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/labstack/echo/v4"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/vesta-cx/euterpe/daemon/testsvc"
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
