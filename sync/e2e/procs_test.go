package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"
	"github.com/vesta-cx/euterpe/central/credentials"
	"github.com/vesta-cx/euterpe/daemon/sqldb"
	"github.com/vesta-cx/euterpe/daemon/sqldb/sqltest"
	"github.com/vesta-cx/euterpe/daemon/testsvc"
)

// bins holds the programs built once by TestMain.
var bins = map[string]string{}

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "euterpe-e2e-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	// One go build for the three programs: it compiles and links them side
	// by side, where three builds in turn waited for each other.
	progs := []string{"euterpe-edge", "euterpe-central", "euterpectl"}
	args := []string{"build", "-trimpath", "-o", dir + string(filepath.Separator)}
	for _, p := range progs {
		args = append(args, "github.com/vesta-cx/euterpe/cmd/"+p)
		bins[p] = filepath.Join(dir, p)
	}
	cmd := exec.Command("go", args...)
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "build %v: %v\n%s", progs, err, out)
		_ = os.RemoveAll(dir)
		os.Exit(1)
	}
	code := m.Run()
	_ = os.RemoveAll(dir)
	os.Exit(code)
}

// baseEnv is the test's environment without any EUTERPE_ setting, so the
// programs see only what a test gives them.
func baseEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		if k, _, _ := strings.Cut(kv, "="); !strings.HasPrefix(k, "EUTERPE_") {
			env = append(env, kv)
		}
	}
	return env
}

func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := l.Addr().String()
	require.NoError(t, l.Close())
	return addr
}

// proc is one running program; the test's cleanup kills it if the test
// did not stop it.
type proc struct {
	name   string
	cmd    *exec.Cmd
	logs   *testsvc.LogBuffer
	exited chan struct{}
}

func startProc(t *testing.T, name string, env []string, args ...string) *proc {
	t.Helper()
	p := &proc{name: name, cmd: exec.Command(bins[name], args...), logs: &testsvc.LogBuffer{}, exited: make(chan struct{})}
	p.cmd.Env = append(baseEnv(), env...)
	p.cmd.Stdout, p.cmd.Stderr = p.logs, p.logs
	require.NoError(t, p.cmd.Start())
	go func() { _ = p.cmd.Wait(); close(p.exited) }()
	t.Cleanup(func() {
		p.kill()
		if t.Failed() {
			t.Logf("%s %v logs:\n%s", name, args, tail(p.logs.String(), 8000))
		}
	})
	return p
}

func tail(s string, n int) string {
	if len(s) > n {
		return "…" + s[len(s)-n:]
	}
	return s
}

// kill sends SIGKILL and waits for the process to be gone.
func (p *proc) kill() {
	select {
	case <-p.exited:
		return
	default:
	}
	_ = p.cmd.Process.Signal(syscall.SIGKILL)
	<-p.exited
}

// stop asks for a graceful exit and waits for it (SIGKILL after 20 s).
func (p *proc) stop(t *testing.T) {
	t.Helper()
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.exited:
	case <-time.After(20 * time.Second):
		t.Errorf("%s did not stop within 20 s", p.name)
		p.kill()
	}
}

// waitHTTP waits until GET url answers 200, failing if the process exits.
func (p *proc) waitHTTP(t *testing.T, url string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		select {
		case <-p.exited:
			t.Fatalf("%s exited:\n%s", p.name, tail(p.logs.String(), 4000))
		default:
		}
		if resp, err := http.Get(url); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return
			}
		}
		time.Sleep(25 * time.Millisecond)
	}
	t.Fatalf("%s did not answer %s", p.name, url)
}

// central is one euterpe-central deployment: a database, a registered
// edge, an operator token, and the serve process (restartable on the same
// address, as the edge's EUTERPE_SYNC_URL names it).
type central struct {
	t      *testing.T
	env    []string
	addr   string
	URL    string
	db     *sqldb.DB
	EdgeID string
	secret string
	Token  string
	proc   *proc
}

func newCentral(t *testing.T, e sqldb.Engine) *central {
	t.Helper()
	dbURL := sqltest.URL(t, e)
	c := &central{t: t, addr: freeAddr(t)}
	c.URL = "http://" + c.addr
	c.env = []string{"EUTERPE_DATABASE_URL=" + dbURL, "EUTERPE_KEYRING=k1:" + credentials.NewKey(),
		"EUTERPE_STATE_DIR=" + t.TempDir(), "EUTERPE_CENTRAL_ADDR=" + c.addr, "EUTERPE_CENTRAL_ROLES=api,sync",
		"EUTERPE_SYNC_RATE=0", "EUTERPE_LOG_LEVEL=info"}
	var reg struct {
		EdgeID     string `json:"edge_id"`
		SyncSecret string `json:"sync_secret"`
	}
	c.cli(&reg, "edge", "register", "--name", "e2e-edge")
	var op struct {
		Token string `json:"token"`
	}
	c.cli(&op, "operator", "create", "--name", "e2e")
	require.NotEmpty(t, reg.SyncSecret)
	require.NotEmpty(t, op.Token)
	c.EdgeID, c.secret, c.Token = reg.EdgeID, reg.SyncSecret, op.Token
	db, err := sqldb.Open(context.Background(), dbURL, "")
	require.NoError(t, err)
	t.Cleanup(func() { _ = db.Close() })
	c.db = db
	return c
}

// cli runs a euterpe-central command and decodes its JSON output.
func (c *central) cli(out any, args ...string) {
	c.t.Helper()
	cmd := exec.Command(bins["euterpe-central"], args...)
	cmd.Env = append(baseEnv(), c.env...)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	b, err := cmd.Output()
	require.NoError(c.t, err, "euterpe-central %v: %s", args, stderr.String())
	require.NoError(c.t, json.Unmarshal(b, out), "%s", b)
}

func (c *central) start() {
	c.t.Helper()
	c.proc = startProc(c.t, "euterpe-central", c.env, "serve")
	c.proc.waitHTTP(c.t, c.URL+"/ready")
}

// secretFile writes the edge's sync secret as an operator would (0600).
func (c *central) secretFile() string {
	p := filepath.Join(c.t.TempDir(), "sync.secret")
	require.NoError(c.t, os.WriteFile(p, []byte(c.secret+"\n"), 0o600))
	return p
}

// count runs a COUNT-like query on central's database.
func (c *central) count(q string, args ...any) int {
	c.t.Helper()
	var n int
	require.NoError(c.t, c.db.QueryRow(c.db.Rebind(q), args...).Scan(&n), q)
	return n
}

// noSecretLogged checks neither process logged the sync secret.
func (c *central) noSecretLogged(ps ...*proc) {
	c.t.Helper()
	for _, p := range ps {
		require.NotContains(c.t, p.logs.String(), c.secret, "%s logged the sync secret", p.name)
	}
}

// edge is one euterpe-edge on its own leased Redis database and state
// directory, syncing to a central; restartable on both.
type edge struct {
	t     *testing.T
	env   []string
	addr  string
	URL   string
	state string
	rdb   *redis.Client
	proc  *proc
}

func newEdge(t *testing.T, c *central, extra ...string) *edge {
	t.Helper()
	rdb, opt := testsvc.Redis(t)
	e := &edge{t: t, addr: freeAddr(t), state: t.TempDir(), rdb: rdb}
	e.URL = "http://" + e.addr
	e.env = append([]string{"EUTERPE_REDIS_URL=" + fmt.Sprintf("redis://%s/%d", opt.Addr, opt.DB),
		"EUTERPE_EDGE_ADDR=" + e.addr, "EUTERPE_STATE_DIR=" + e.state, "EUTERPE_LOG_LEVEL=info",
		"EUTERPE_WORKERS=16", "EUTERPE_SYNC_URL=" + c.URL, "EUTERPE_SYNC_EDGE_ID=" + c.EdgeID,
		"EUTERPE_SYNC_SECRET_FILE=" + c.secretFile(), "EUTERPE_SYNC_BACKOFF_MAX=1s", "EUTERPE_SYNC_HEARTBEAT=1s"}, extra...)
	return e
}

func (e *edge) start() {
	e.t.Helper()
	e.proc = startProc(e.t, "euterpe-edge", e.env, "serve")
	e.proc.waitHTTP(e.t, e.URL+"/healthz")
}
