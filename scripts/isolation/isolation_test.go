package isolation

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/vesta-cx/euterpe/daemon/testsvc"
)

// childEnv, when set, makes this test binary the part running inside the
// network namespace; its value is the scratch directory the parent prepared.
const childEnv = "EUTERPE_ISOLATION_CHILD"

// helperEnv selects TestHelperOnNamedServer's child role.
const helperEnv = "EUTERPE_ISOLATION_HELPER"

const (
	prodRedis   = "redis://127.0.0.1:6379/0"
	prodEdge    = "http://127.0.0.1:8070"
	prodCentral = "http://127.0.0.1:8090"
	prodWorker  = "jetson-prod"
)

// With a production-like edge on Redis 127.0.0.1:6379 database 0 (its group
// `workers`, one job running and one queued), a central on :8090 and other
// data in database 3, `make run` (EUTERPE_RUN_ONCE=1) and the Redis test
// helpers leave the queued job, its stream entry and the group untouched,
// and the demo moves to other ports.
func TestMakeRunLeavesProductionAlone(t *testing.T) {
	if dir := os.Getenv(childEnv); dir != "" {
		insideNamespace(t, dir)
		return
	}
	if testing.Short() && os.Getenv("CI") != "true" {
		t.Skip("builds the programs and runs the whole demo (about a minute)")
	}
	if os.Getuid() != 0 {
		// A user namespace would do too, where the kernel allows it; this
		// machine and CI run tests as root.
		testsvc.Unavailable(t, "a network namespace (unshare -n needs root)", os.ErrPermission)
	}
	for _, p := range []string{"unshare", "ip", "make", "curl", "flock", "ss", "redis-server", "redis-cli", "ffmpeg"} {
		testsvc.Program(t, p)
	}
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	versitygw, err := exec.LookPath("versitygw")
	if err != nil {
		versitygw = filepath.Join(root, ".run", "bin", "versitygw")
		if _, err := os.Stat(versitygw); err != nil {
			testsvc.Unavailable(t, "versitygw (scripts/services.sh up s3 builds it)", err)
		}
	}

	// A fresh clone: the Makefile, the scripts and freshly built programs,
	// with a .run/ of its own (versitygw linked in to spare a build).
	scratch := t.TempDir()
	clone := filepath.Join(scratch, "repo")
	must(t, os.MkdirAll(filepath.Join(clone, "scripts"), 0o755))
	must(t, os.MkdirAll(filepath.Join(clone, ".run", "bin"), 0o755))
	copyFile(t, filepath.Join(root, "Makefile"), filepath.Join(clone, "Makefile"))
	scripts, _ := filepath.Glob(filepath.Join(root, "scripts", "*.sh"))
	for _, s := range scripts {
		copyFile(t, s, filepath.Join(clone, "scripts", filepath.Base(s)))
	}
	must(t, os.Symlink(versitygw, filepath.Join(clone, ".run", "bin", "versitygw")))
	// A demo that stopped half-way before: the edge registered, the
	// operator not; this run registers again instead of failing without
	// a token.
	must(t, os.MkdirAll(filepath.Join(clone, ".run", "demo"), 0o755))
	must(t, os.WriteFile(filepath.Join(clone, ".run", "demo", "edge-id"), []byte("a-previous-edge"), 0o644))
	must(t, os.WriteFile(filepath.Join(clone, ".run", "demo", "sync.secret"), []byte("a-previous-secret"), 0o600))
	// The build has its own budget: a cold CGO_ENABLED=0 build shares no
	// cache with the race-enabled test builds and takes minutes on a busy
	// two-core machine.
	buildCtx, cancelBuild := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancelBuild()
	build := exec.CommandContext(buildCtx, "go", "build", "-trimpath", "-o", filepath.Join(clone, "bin")+"/",
		"./cmd/euterpe-edge", "./cmd/euterpe-central", "./cmd/euterpectl")
	build.Dir = root
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build: %v\n%s", err, out)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()

	cmd := exec.CommandContext(ctx, "unshare", "-n", "--", "sh", "-c", `ip link set lo up && exec "$0" "$@"`,
		os.Args[0], "-test.run=^TestMakeRunLeavesProductionAlone$", "-test.v", "-test.count=1", "-test.timeout=7m")
	cmd.Env = append(cleanEnv(), childEnv+"="+scratch)
	out, err := cmd.CombinedOutput()
	t.Logf("inside the namespace:\n%s", out)
	if err != nil {
		t.Fatalf("inside the namespace: %v", err)
	}
	if !strings.Contains(string(out), "--- PASS: TestMakeRunLeavesProductionAlone") {
		t.Fatal("the namespace's test did not pass")
	}
}

// cleanEnv is the environment without the variables naming servers, as on
// a machine where the user named none.
func cleanEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		if strings.HasPrefix(k, "EUTERPE_") {
			continue
		}
		env = append(env, kv)
	}
	return env
}

// insideNamespace runs in a network namespace of its own: the loopback
// ports are all free, so production takes the real defaults.
func insideNamespace(t *testing.T, scratch string) {
	clone := filepath.Join(scratch, "repo")
	bin := filepath.Join(clone, "bin")
	ctx, cancel := context.WithTimeout(context.Background(), 6*time.Minute)
	defer cancel()
	for _, port := range []string{"6379", "8070", "8090"} {
		if c, err := net.Dial("tcp", "127.0.0.1:"+port); err == nil {
			c.Close()
			t.Fatalf("port %s is taken inside the namespace", port)
		}
	}

	// Production: Redis on 6379, the edge on 8070 with one worker whose
	// tool blocks, central on 8090.
	prod := filepath.Join(scratch, "prod")
	must(t, os.MkdirAll(filepath.Join(prod, "redis"), 0o755))
	startDaemon(ctx, t, filepath.Join(prod, "redis.log"), nil, "redis-server", "--bind", "127.0.0.1", "--port", "6379",
		"--save", "", "--appendonly", "no", "--dir", filepath.Join(prod, "redis"))
	opt, _ := redis.ParseURL(prodRedis)
	rdb := redis.NewClient(opt)
	defer rdb.Close()
	waitFor(t, "production redis", func() bool { return rdb.Ping(ctx).Err() == nil })

	tool := filepath.Join(prod, "busy-tool.sh")
	must(t, os.WriteFile(tool, []byte("#!/bin/sh\n# busy until the edge that started it is gone\ncat >/dev/null\nwhile kill -0 $PPID 2>/dev/null; do sleep 0.5; done\n"), 0o755))
	startDaemon(ctx, t, filepath.Join(prod, "edge.log"), []string{
		"EUTERPE_EDGE_ADDR=127.0.0.1:8070", "EUTERPE_REDIS_URL=" + prodRedis,
		"EUTERPE_STATE_DIR=" + filepath.Join(prod, "edge-state"), "POD_NAME=" + prodWorker,
		"EUTERPE_WORKERS=1", "EUTERPE_BACKEND_TIMEOUT=10m", "EUTERPE_TASK_BACKENDS=tool=exec:" + tool,
	}, filepath.Join(bin, "euterpe-edge"), "serve")
	waitFor(t, "production edge", func() bool { return ready(prodEdge) })
	startDaemon(ctx, t, filepath.Join(prod, "central.log"), []string{
		"EUTERPE_CENTRAL_ADDR=127.0.0.1:8090", "EUTERPE_STATE_DIR=" + filepath.Join(prod, "central-state"),
		"EUTERPE_RUNNER_TEMP_DIR=" + filepath.Join(prod, "central-tmp"),
	}, filepath.Join(bin, "euterpe-central"), "serve")
	waitFor(t, "production central", func() bool { return ready(prodCentral) })

	running := submit(t, prodEdge)
	waitFor(t, "the first job running", func() bool {
		return rdb.XPending(ctx, "jobs:stream", "workers").Val().Count == 1
	})
	queued := submit(t, prodEdge)
	time.Sleep(500 * time.Millisecond)
	if n := rdb.XLen(ctx, "jobs:stream").Val(); n != 2 {
		t.Fatalf("jobs:stream has %d entries, want 2", n)
	}
	if st := rdb.HGet(ctx, "job:"+queued, "status").Val(); st != "queued" {
		t.Fatalf("second job %s, want queued", st)
	}
	// Whatever else lives on the server: another application's database.
	other := redis.NewClient(&redis.Options{Addr: opt.Addr, DB: 3})
	defer other.Close()
	must(t, other.Set(ctx, "other:app", "keep me", 0).Err())

	before := snapshot(t, rdb, other, running, queued)
	t.Cleanup(func() { // the clone's private services live in this namespace
		down := exec.Command(filepath.Join(clone, "scripts", "services.sh"), "down")
		down.Env = cleanEnv()
		if out, err := down.CombinedOutput(); err != nil {
			t.Errorf("services.sh down: %v\n%s", err, out)
		}
	})

	// make run, exactly as the Makefile runs it (the programs are built).
	runCtx, cancelRun := context.WithTimeout(ctx, 3*time.Minute)
	defer cancelRun()
	run := exec.CommandContext(runCtx, "make", "-o", "build", "run")
	run.Dir = clone
	run.Env = append(cleanEnv(), "EUTERPE_RUN_ONCE=1", "EUTERPE_PORTS_LOCK="+filepath.Join(scratch, "ports.lock"))
	out, err := run.CombinedOutput()
	t.Logf("make run:\n%s", out)
	if err != nil {
		t.Fatalf("make run: %v", err)
	}
	for _, want := range []string{"port 8070 is taken: euterpe-edge listens on", "port 8090 is taken: euterpe-central listens on", "status: succeeded"} {
		if !strings.Contains(string(out), want) {
			t.Errorf("make run output lacks %q", want)
		}
	}
	if after := snapshot(t, rdb, other, running, queued); !reflect.DeepEqual(before, after) {
		t.Fatalf("make run changed production:\nbefore %+v\nafter  %+v", before, after)
	}

	// The Redis helpers, on the clone's private server from .run/env: they
	// run, and production stays as it was.
	env := readEnv(t, filepath.Join(clone, ".run", "env"))
	if env["EUTERPE_TEST_REDIS_URL"] == "" || strings.Contains(env["EUTERPE_TEST_REDIS_URL"], ":6379/") {
		t.Fatalf("services.sh gave tests %q, want a private Redis", env["EUTERPE_TEST_REDIS_URL"])
	}
	t.Setenv("EUTERPE_TEST_REDIS_URL", env["EUTERPE_TEST_REDIS_URL"])
	t.Setenv("EUTERPE_TEST_REDIS6_URL", "")
	for i := range 3 {
		t.Run(fmt.Sprint("helper", i), func(t *testing.T) {
			c, _ := testsvc.Redis(t)
			c.XAdd(ctx, &redis.XAddArgs{Stream: "jobs:stream", Values: []string{"job_id", "test"}})
			c.XGroupCreate(ctx, "jobs:stream", "workers", "0")
		})
	}
	// Named explicitly, the production server is refused: database 3 holds
	// another application's key.
	helper := exec.CommandContext(ctx, os.Args[0], "-test.run=^TestHelperOnNamedServer$", "-test.v", "-test.count=1")
	helper.Env = append(cleanEnv(), helperEnv+"=1", "EUTERPE_TEST_REDIS_URL="+prodRedis)
	hout, _ := helper.CombinedOutput()
	if !strings.Contains(string(hout), "--- FAIL: TestHelperOnNamedServer") || !strings.Contains(string(hout), "refusing to use redis") {
		t.Fatalf("the helper on the named production server did not refuse:\n%s", hout)
	}
	if after := snapshot(t, rdb, other, running, queued); !reflect.DeepEqual(before, after) {
		t.Fatalf("the Redis helpers changed production:\nbefore %+v\nafter  %+v", before, after)
	}
	// Once databases 1..15 hold nothing else, the named server is used:
	// tests come and go in those databases, database 0 keeps the job.
	must(t, other.Del(ctx, "other:app").Err())
	before = snapshot(t, rdb, other, running, queued)
	helper = exec.CommandContext(ctx, os.Args[0], "-test.run=^TestHelperOnNamedServer$", "-test.v", "-test.count=1")
	helper.Env = append(cleanEnv(), helperEnv+"=1", "EUTERPE_TEST_REDIS_URL="+prodRedis)
	if hout, err := helper.CombinedOutput(); err != nil || !strings.Contains(string(hout), "--- PASS: TestHelperOnNamedServer") {
		t.Fatalf("the helper on the named production server, now clean: %v\n%s", err, hout)
	}
	if after := snapshot(t, rdb, other, running, queued); !reflect.DeepEqual(before, after) {
		t.Fatalf("the Redis helpers changed production:\nbefore %+v\nafter  %+v", before, after)
	}
	if left := rdb.Keys(ctx, "euterpe:testdb:*").Val(); len(left) != 0 {
		t.Fatalf("test locks or markers left in production's database 0: %v", left)
	}
	if !ready(prodEdge) || !ready(prodCentral) {
		t.Fatal("production daemons no longer ready")
	}
}

// TestHelperOnNamedServer only runs as a child of the test above: it asks
// the Redis helper for a database on the server EUTERPE_TEST_REDIS_URL names.
func TestHelperOnNamedServer(t *testing.T) {
	if os.Getenv(helperEnv) == "" {
		t.Skip("runs only as a child of TestMakeRunLeavesProductionAlone")
	}
	c, _ := testsvc.Redis(t)
	if err := c.Set(context.Background(), "written", "by a test", 0).Err(); err != nil {
		t.Fatal(err)
	}
}

// state is what must not change on the production server.
type state struct {
	Queued, RunningStatus map[string]string
	Stream                []redis.XMessage
	Groups                []group
	Consumers             []consumer
	Pending               []redis.XPendingExt
	Other                 string
	Sizes                 []int64 // keys in databases 1..15
}

type group struct {
	Name, LastDeliveredID string
	Consumers, Pending    int64
}

type consumer struct {
	Name    string
	Pending int64
}

func snapshot(t *testing.T, rdb, other *redis.Client, running, queued string) state {
	t.Helper()
	ctx := context.Background()
	s := state{
		Queued:        rdb.HGetAll(ctx, "job:"+queued).Val(),
		RunningStatus: map[string]string{"status": rdb.HGet(ctx, "job:"+running, "status").Val()},
		Stream:        rdb.XRange(ctx, "jobs:stream", "-", "+").Val(),
		Pending:       rdb.XPendingExt(ctx, &redis.XPendingExtArgs{Stream: "jobs:stream", Group: "workers", Start: "-", End: "+", Count: 100}).Val(),
		Other:         other.Get(ctx, "other:app").Val(),
	}
	for i := range s.Pending {
		s.Pending[i].Idle = 0 // time passes
	}
	for _, g := range rdb.XInfoGroups(ctx, "jobs:stream").Val() {
		s.Groups = append(s.Groups, group{g.Name, g.LastDeliveredID, g.Consumers, g.Pending})
	}
	for _, c := range rdb.XInfoConsumers(ctx, "jobs:stream", "workers").Val() {
		s.Consumers = append(s.Consumers, consumer{c.Name, c.Pending})
	}
	for n := 1; n <= 15; n++ {
		c := redis.NewClient(&redis.Options{Addr: rdb.Options().Addr, DB: n})
		s.Sizes = append(s.Sizes, c.DBSize(ctx).Val())
		c.Close()
	}
	if len(s.Stream) != 2 || len(s.Groups) != 1 || len(s.Consumers) != 1 || s.Consumers[0].Name != prodWorker ||
		s.Queued["status"] != "queued" || s.RunningStatus["status"] != "running" {
		t.Fatalf("production not as set up: %+v", s)
	}
	return s
}

// startDaemon starts a long-running program, stopped when the test ends.
func startDaemon(ctx context.Context, t *testing.T, log string, env []string, name string, args ...string) {
	t.Helper()
	f, err := os.Create(log)
	must(t, err)
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Env = append(cleanEnv(), env...)
	cmd.Stdout, cmd.Stderr = f, f
	must(t, cmd.Start())
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		f.Close()
		if t.Failed() {
			b, _ := os.ReadFile(log)
			t.Logf("%s:\n%s", filepath.Base(log), tail(b, 3000))
		}
	})
}

func tail(b []byte, n int) []byte {
	if len(b) > n {
		return b[len(b)-n:]
	}
	return b
}

func ready(base string) bool {
	r, err := http.Get(base + "/ready")
	if err != nil {
		return false
	}
	r.Body.Close()
	return r.StatusCode == http.StatusOK
}

func submit(t *testing.T, base string) string {
	t.Helper()
	r, err := http.Post(base+"/v1/jobs", "application/json", bytes.NewBufferString(`{"task":"tool","payload":{"from":"production"}}`))
	must(t, err)
	defer r.Body.Close()
	b, _ := io.ReadAll(r.Body)
	var v struct {
		JobID string `json:"job_id"`
	}
	if r.StatusCode != http.StatusAccepted || json.Unmarshal(b, &v) != nil || v.JobID == "" {
		t.Fatalf("POST /v1/jobs: %d %s", r.StatusCode, b)
	}
	return v.JobID
}

func waitFor(t *testing.T, what string, ok func() bool) {
	t.Helper()
	for deadline := time.Now().Add(60 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		if ok() {
			return
		}
	}
	t.Fatalf("%s: not ready after 60s", what)
}

// readEnv reads .run/env (lines `export NAME=VALUE`, shell-quoted).
func readEnv(t *testing.T, path string) map[string]string {
	t.Helper()
	b, err := os.ReadFile(path)
	must(t, err)
	env := map[string]string{}
	for _, line := range strings.Split(string(b), "\n") {
		k, v, ok := strings.Cut(strings.TrimPrefix(line, "export "), "=")
		if ok {
			env[k] = strings.ReplaceAll(v, `\`, "")
		}
	}
	return env
}

func copyFile(t *testing.T, from, to string) {
	t.Helper()
	b, err := os.ReadFile(from)
	must(t, err)
	must(t, os.WriteFile(to, b, 0o755))
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
