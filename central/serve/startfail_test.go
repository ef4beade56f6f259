package serve_test

import (
	"context"
	"errors"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
	"github.com/vesta-cx/euterpe/central/runner"
	"github.com/vesta-cx/euterpe/central/serve"
	"github.com/vesta-cx/euterpe/daemon"
	"github.com/vesta-cx/euterpe/daemon/sqldb"
	"github.com/vesta-cx/euterpe/daemon/testsvc"
)

// closingRole records its Close in order; it is never run here.
type closingRole struct {
	name   string
	closed *[]string
	mu     *sync.Mutex
}

func (r closingRole) Name() string { return r.name }

func (r closingRole) Run(ctx context.Context) error { <-ctx.Done(); return nil }

func (r closingRole) Close() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	*r.closed = append(*r.closed, r.name)
	return nil
}

// openFDsUnder lists the file descriptors of this process open on a path
// under dir.
func openFDsUnder(t *testing.T, dir string) []string {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Skipf("no /proc/self/fd: %v", err)
	}
	var out []string
	for _, e := range ents {
		p, err := os.Readlink(filepath.Join("/proc/self/fd", e.Name()))
		if err == nil && strings.HasPrefix(p, dir) {
			out = append(out, p)
		}
	}
	return out
}

// TestFailedStartClosesBuiltRoles: when serve fails to start after roles
// were built (the listen address is taken, a later role fails to build),
// the roles built so far are closed, last built first, so a runner's
// scratch lock and the files it holds are released instead of staying
// with a process that never ran them.
func TestFailedStartClosesBuiltRoles(t *testing.T) {
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	t.Cleanup(func() { _ = taken.Close() })
	errBuild := errors.New("cannot build")

	cases := []struct {
		name    string
		addr    string
		failing bool // a role after the others fails to build
		want    error
	}{
		{"address taken", taken.Addr().String(), false, nil},
		{"later role fails to build", "127.0.0.1:0", true, errBuild},
	}
	for _, engine := range []sqldb.Engine{sqldb.Postgres, sqldb.SQLite} {
		for _, tc := range cases {
			t.Run(string(engine)+"/"+tc.name, func(t *testing.T) {
				scratch := t.TempDir()
				var mu sync.Mutex
				var closed []string
				a := serve.NewApp()
				a.Register(serve.Definition{Name: "first", DefaultOn: true, New: func(*serve.Deps) (serve.Role, error) {
					return closingRole{"first", &closed, &mu}, nil
				}})
				a.Register(runner.Definition())
				a.Register(serve.Definition{Name: "second", DefaultOn: true, New: func(*serve.Deps) (serve.Role, error) {
					return closingRole{"second", &closed, &mu}, nil
				}})
				a.Register(serve.Definition{Name: "last", DefaultOn: true, New: func(*serve.Deps) (serve.Role, error) {
					if tc.failing {
						return nil, errBuild
					}
					return closingRole{"last", &closed, &mu}, nil
				}})
				env := serveEnv(t, engine, map[string]string{
					"EUTERPE_CENTRAL_ADDR":    tc.addr,
					"EUTERPE_RUNNER_TEMP_DIR": scratch,
				})
				getenv := func(k string) string { return env[k] }
				cfg := daemon.NewConfig("euterpe-central serve", getenv)
				var s serve.Settings
				a.Bind(cfg, &s)
				require.NoError(t, cfg.Parse(nil))
				log, err := daemon.NewLogger(&testsvc.LogBuffer{}, "info")
				require.NoError(t, err)
				ctx := context.Background()
				d, closeDB, err := a.Open(ctx, s, log, getenv)
				require.NoError(t, err)
				defer closeDB()

				err = a.Serve(ctx, s, d)
				require.Error(t, err)
				if tc.want != nil {
					require.ErrorIs(t, err, tc.want)
				}
				want := []string{"second", "first"}
				if !tc.failing {
					want = []string{"last", "second", "first"}
				}
				mu.Lock()
				require.Equal(t, want, closed, "roles closed, last built first")
				mu.Unlock()
				locks, err := filepath.Glob(filepath.Join(scratch, "*.lock"))
				require.NoError(t, err)
				require.Empty(t, locks, "the runner's scratch lock stays after a failed start")
				require.Empty(t, openFDsUnder(t, scratch), "files under the scratch area stay open")
			})
		}
	}
}
