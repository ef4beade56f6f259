package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/labstack/echo/v4"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/vesta-cx/euterpe/daemon/testsvc"
)

// closingComponent records its Close in a shared log.
type closingComponent struct {
	name   string
	closed *[]string
}

func (*closingComponent) Mount(*echo.Echo)              {}
func (*closingComponent) Run(ctx context.Context) error { <-ctx.Done(); return nil }
func (c *closingComponent) Close() error {
	*c.closed = append(*c.closed, c.name)
	return nil
}

// When a plugin fails to build, every component already built is closed,
// last built first, and nothing else is: the failed one returned none and
// the ones after it were never built.
func TestBuildFailureClosesBuiltInReverse(t *testing.T) {
	errBroken := errors.New("broken")
	tests := []struct {
		name      string
		failAt    int // index of the failing plugin, -1 for none
		wantClose []string
	}{
		{"first fails", 0, []string{"first"}},
		{"middle fails", 2, []string{"a", "first"}}, // b holds nothing: no closer
		{"last fails", 3, []string{"c", "a", "first"}},
		{"none fails", -1, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var closed []string
			var ps []Plugin
			for i, name := range []string{"a", "b", "c", "d"} {
				ps = append(ps, Plugin{Name: name, Build: func(context.Context, Deps) (Component, error) {
					if i == tt.failAt {
						return nil, errBroken
					}
					if name == "b" {
						return noComponent{}, nil // holds nothing
					}
					return &closingComponent{name: name, closed: &closed}, nil
				}})
			}
			first := named{"first", &closingComponent{name: "first", closed: &closed}}
			comps, err := buildComponents(context.Background(), slog.New(slog.DiscardHandler), ps, Deps{}, first)
			if tt.failAt < 0 {
				require.NoError(t, err)
				assert.Len(t, comps, 5)
				assert.Empty(t, closed)
				return
			}
			require.ErrorIs(t, err, errBroken)
			assert.Contains(t, err.Error(), "build "+ps[tt.failAt].Name)
			assert.Equal(t, tt.wantClose, closed)
		})
	}
}

// openUnder lists this process's open file descriptors on files under dir.
func openUnder(t *testing.T, dir string) []string {
	t.Helper()
	fds, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Skipf("no /proc/self/fd: %v", err)
	}
	var out []string
	for _, fd := range fds {
		target, err := os.Readlink(filepath.Join("/proc/self/fd", fd.Name()))
		if err == nil && strings.HasPrefix(target, dir+string(os.PathSeparator)) {
			out = append(out, target)
		}
	}
	return out
}

// A daemon that fails to start after building its plugins (a later plugin's
// build fails, or the listen address is taken) leaves no database of the
// ones it built open: the library's and the sync spool's files are closed.
func TestStartFailureClosesBuiltPlugins(t *testing.T) {
	_, opt := testsvc.Redis(t)
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	t.Cleanup(func() { _ = taken.Close() })
	tests := []struct {
		name    string
		env     map[string]string
		wantErr string
	}{
		{"a later plugin fails to build",
			map[string]string{"EUTERPE_EDGE_ADDR": freeAddr(t), "EUTERPE_TASK_BACKENDS": "tool=exec:/nonexistent/euterpe-tool"},
			"build worker"},
		{"the listen address is taken",
			map[string]string{"EUTERPE_EDGE_ADDR": taken.Addr().String()},
			"EUTERPE_EDGE_ADDR: listen " + taken.Addr().String() + ": "},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			state := t.TempDir()
			env := map[string]string{
				"EUTERPE_REDIS_URL":    fmt.Sprintf("redis://%s/%d", opt.Addr, opt.DB),
				"EUTERPE_STATE_DIR":    state,
				"EUTERPE_SYNC_URL":     "https://central.example",
				"EUTERPE_SYNC_EDGE_ID": "jetson-1",
				"EUTERPE_SYNC_SECRET":  syncTestSecret,
			}
			for k, v := range tt.env {
				env[k] = v
			}
			cfg, s := newServeConfig(envMap(env))
			require.NoError(t, cfg.Parse(nil))
			err := runDaemon(context.Background(), slog.New(slog.DiscardHandler), s, envMap(env))
			require.Error(t, err)
			assert.Contains(t, err.Error(), tt.wantErr)
			// Both were built: their files exist.
			assert.FileExists(t, filepath.Join(state, "library.db"))
			entries, _ := os.ReadDir(state)
			require.GreaterOrEqual(t, len(entries), 2, "library and spool files in %s", state)
			assert.Empty(t, openUnder(t, state), "files left open")
		})
	}
}
