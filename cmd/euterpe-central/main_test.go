package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/vesta-cx/euterpe/central/credentials"
	"github.com/vesta-cx/euterpe/central/inbox"
	"github.com/vesta-cx/euterpe/central/requesters"
	"github.com/vesta-cx/euterpe/central/serve"
	"github.com/vesta-cx/euterpe/daemon/sqldb"
	"github.com/vesta-cx/euterpe/daemon/sqldb/sqltest"
)

// childEnv makes the test binary act as euterpe-central (with the test
// executor role available), so crash tests kill real processes.
const childEnv = "EUTERPE_CENTRAL_TEST_CHILD"

func TestMain(m *testing.M) {
	if os.Getenv(childEnv) == "1" {
		os.Exit(run(context.Background(), os.Args[1:], os.Getenv, os.Stdout, os.Stderr, registerTestRoles))
	}
	os.Exit(m.Run())
}

type child struct {
	cmd    *exec.Cmd
	logs   *lockedBuffer
	addr   chan string
	exited chan struct{} // closed once Wait returned; cmd.ProcessState is then safe to read
}

func (c *child) done() bool {
	select {
	case <-c.exited:
		return true
	default:
		return false
	}
}

type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

var listening = regexp.MustCompile(`"msg":"listening","addr":"([^"]+)"`)

func startChild(t *testing.T, env []string, args ...string) *child {
	t.Helper()
	cmd := exec.Command(os.Args[0], args...)
	cmd.Env = append(os.Environ(), append([]string{childEnv + "=1", "EUTERPE_CENTRAL_ADDR=127.0.0.1:0"}, env...)...)
	c := &child{cmd: cmd, logs: &lockedBuffer{}, addr: make(chan string, 1), exited: make(chan struct{})}
	pr, pw := io.Pipe()
	cmd.Stderr = pw
	cmd.Stdout = c.logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		sc := bufio.NewScanner(pr)
		for sc.Scan() {
			line := sc.Text()
			_, _ = c.logs.Write([]byte(line + "\n"))
			if m := listening.FindStringSubmatch(line); m != nil {
				select {
				case c.addr <- m[1]:
				default:
				}
			}
		}
	}()
	go func() { _ = cmd.Wait(); _ = pw.Close(); close(c.exited) }()
	t.Cleanup(func() {
		if !c.done() {
			_ = c.cmd.Process.Kill()
			<-c.exited
		}
		if t.Failed() {
			t.Logf("child %v logs:\n%s", args, c.logs.String())
		}
	})
	return c
}

func waitFor(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(25 * time.Millisecond)
	}
}

func count(t *testing.T, db *sqldb.DB, q string, args ...any) int {
	t.Helper()
	var n int
	if err := db.QueryRow(db.Rebind(q), args...).Scan(&n); err != nil {
		t.Fatalf("%s: %v", q, err)
	}
	return n
}

type fixture struct {
	url, keyring string
	db           *sqldb.DB
	jobs         *inbox.Store
	apiKey       string
	requester    string
}

func newFixture(t *testing.T, e sqldb.Engine) *fixture {
	t.Helper()
	url := sqltest.URL(t, e)
	keyring := "k1:" + credentials.NewKey()
	db, err := sqldb.Open(context.Background(), url, "")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	app := serve.NewApp()
	register(app)
	if _, err := sqldb.Migrate(context.Background(), db, app.Migrations()...); err != nil {
		t.Fatal(err)
	}
	keys, _ := credentials.ParseKeyring(keyring, "")
	c, err := requesters.New(db, keys).Create(context.Background(), "crash-test")
	if err != nil {
		t.Fatal(err)
	}
	return &fixture{url: url, keyring: keyring, db: db, jobs: inbox.New(db, keys, inbox.DefaultPolicy()),
		apiKey: c.APIKey, requester: c.RequesterID}
}

// Several euterpe-central processes share one database; one is killed
// with SIGKILL while it holds a job mid-way. Its job is reclaimed after the
// lease expires (new claim_version, processing -> queued -> claimed) and
// every job finishes exactly once.
func TestSharedDatabaseSurvivesSIGKILL(t *testing.T) {
	for _, e := range sqltest.Engines {
		t.Run(string(e), func(t *testing.T) {
			f := newFixture(t, e)
			const jobs = 24
			for i := 0; i < jobs; i++ {
				j := inbox.NewJob{ID: inbox.NewJobID(), RequesterID: f.requester, Output: inbox.Output{Bucket: "b", Prefix: "p/"},
					Renditions: []inbox.Rendition{{Name: "a", Codec: "opus"}}, StatusWebhookURL: "https://example.com/h",
					Credentials: credentials.Storage{Output: credentials.S3{AccessKeyID: "a", SecretAccessKey: "s"}}}
				if err := f.jobs.Enqueue(context.Background(), j); err != nil {
					t.Fatal(err)
				}
			}
			env := func(pod string) []string {
				return []string{"EUTERPE_DATABASE_URL=" + f.url, "EUTERPE_KEYRING=" + f.keyring, "POD_NAME=" + pod,
					"EUTERPE_CENTRAL_ROLES=api,sweeper,test-executor", "EUTERPE_TEST_EXECUTOR_STEP=120ms",
					"EUTERPE_TEST_EXECUTOR_LEASE=900ms", "EUTERPE_SWEEP_INTERVAL=200ms", "EUTERPE_STATE_DIR=" + t.TempDir()}
			}
			victim := startChild(t, env("pod-victim"), "serve")
			// Let the victim take a job and get it into processing, then kill it.
			waitFor(t, 20*time.Second, "victim to be processing", func() bool {
				return count(t, f.db, `SELECT COUNT(*) FROM inbox_jobs WHERE worker_id = 'pod-victim' AND status = 'processing'`) > 0
			})
			var held string
			var heldVersion int64
			_ = f.db.QueryRow(`SELECT id, claim_version FROM inbox_jobs WHERE worker_id = 'pod-victim' AND status = 'processing'`).Scan(&held, &heldVersion)
			if err := victim.cmd.Process.Signal(syscall.SIGKILL); err != nil {
				t.Fatal(err)
			}
			survivors := []*child{startChild(t, env("pod-a"), "serve"), startChild(t, env("pod-b"), "serve")}
			waitFor(t, 60*time.Second, "all jobs to succeed", func() bool {
				return count(t, f.db, `SELECT COUNT(*) FROM inbox_jobs WHERE status = 'succeeded'`) == jobs
			})
			if n := count(t, f.db, `SELECT COUNT(*) FROM job_outbox_events WHERE payload LIKE '%"status":"succeeded"%'`); n != jobs {
				t.Fatalf("%d succeeded events for %d jobs", n, jobs)
			}
			var worker string
			var version int64
			var attempts int
			_ = f.db.QueryRow(f.db.Rebind(`SELECT worker_id, claim_version, attempt_count FROM inbox_jobs WHERE id = ?`), held).Scan(&worker, &version, &attempts)
			if worker == "pod-victim" || version <= heldVersion || attempts < 2 {
				t.Fatalf("killed job %s: worker %s version %d (was %d) attempts %d", held, worker, version, heldVersion, attempts)
			}
			rows, _ := f.db.Query(f.db.Rebind(`SELECT payload FROM job_outbox_events WHERE job_id = ? ORDER BY sequence`), held)
			var path []string
			for rows.Next() {
				var p string
				_ = rows.Scan(&p)
				var ev inbox.Event
				_ = json.Unmarshal([]byte(p), &ev)
				path = append(path, ev.PreviousStatus+">"+ev.Status)
			}
			rows.Close()
			if !strings.Contains(strings.Join(path, " "), "processing>queued queued>claimed") {
				t.Fatalf("reclaim did not follow the table: %v", path)
			}
			for _, c := range survivors {
				_ = c.cmd.Process.Signal(syscall.SIGTERM)
			}
			for _, c := range survivors {
				waitFor(t, 15*time.Second, "graceful exit", c.done)
				if code := c.cmd.ProcessState.ExitCode(); code != 0 {
					t.Fatalf("survivor exited %d", code)
				}
			}
		})
	}
}

// With the executor roles turned off, serve accepts jobs and leaves them
// queued, and says so.
func TestServeWithoutExecutorLeavesJobsQueued(t *testing.T) {
	f := newFixture(t, sqldb.SQLite)
	c := startChild(t, []string{"EUTERPE_DATABASE_URL=" + f.url, "EUTERPE_KEYRING=" + f.keyring, "EUTERPE_CENTRAL_ROLES=api,sweeper",
		"EUTERPE_SWEEP_INTERVAL=100ms", "EUTERPE_STATE_DIR=" + t.TempDir()}, "serve")
	var addr string
	select {
	case addr = <-c.addr:
	case <-time.After(20 * time.Second):
		t.Fatal("serve did not start")
	}
	body := `{"source":{"url":"https://m.example.com/a.wav?sig=x"},"output":{"bucket":"b","prefix":"p/","credentials":{"access_key_id":"a","secret_access_key":"s"}},"renditions":[{"name":"a","codec":"flac"}]}`
	req, _ := http.NewRequest("POST", "http://"+addr+"/transcode", strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+f.apiKey)
	req.Header.Set("Idempotency-Key", "one")
	res, err := http.DefaultClient.Do(req)
	if err != nil || res.StatusCode != 202 {
		t.Fatalf("enqueue: %v %v", err, res)
	}
	_ = res.Body.Close()
	time.Sleep(500 * time.Millisecond)
	if n := count(t, f.db, `SELECT COUNT(*) FROM inbox_jobs WHERE status = 'queued' AND claim_version = 0`); n != 1 {
		t.Fatalf("job left queued: %d", n)
	}
	if !strings.Contains(c.logs.String(), "no executor role is enabled") {
		t.Fatal("serve did not say that jobs stay queued")
	}
	_ = c.cmd.Process.Signal(syscall.SIGTERM)
	waitFor(t, 15*time.Second, "exit", c.done)
}

func TestPostgresNeedsKeyring(t *testing.T) {
	url := sqltest.URL(t, sqldb.Postgres)
	var out, errb bytes.Buffer
	getenv := func(k string) string {
		return map[string]string{"EUTERPE_DATABASE_URL": url, "EUTERPE_STATE_DIR": t.TempDir()}[k]
	}
	code := run(context.Background(), []string{"serve"}, getenv, &out, &errb)
	lines := strings.Split(strings.TrimSpace(errb.String()), "\n")
	if code != 2 || len(lines) != 1 || !strings.Contains(lines[0], "EUTERPE_KEYRING is required") {
		t.Fatalf("exit %d, stderr:\n%s", code, errb.String())
	}
}

// TestCrossSettingCheckedBeforeSideEffects: a relation between settings
// (EUTERPE_OUTBOX_LEASE_TTL must be at least twice EUTERPE_OUTBOX_TIMEOUT)
// stops serve with one line naming the setting before anything is written:
// no local KEK file, no database file, no migration.
func TestCrossSettingCheckedBeforeSideEffects(t *testing.T) {
	for _, engine := range sqltest.Engines {
		t.Run(string(engine), func(t *testing.T) {
			state := t.TempDir()
			env := map[string]string{"EUTERPE_STATE_DIR": state, "EUTERPE_OUTBOX_TIMEOUT": "1m"}
			if engine == sqldb.Postgres {
				env["EUTERPE_DATABASE_URL"] = sqltest.URL(t, engine)
				env["EUTERPE_KEYRING"] = "k1:" + credentials.NewKey()
			}
			var out, errb bytes.Buffer
			code := run(context.Background(), []string{"serve"}, func(k string) string { return env[k] }, &out, &errb)
			lines := strings.Split(strings.TrimSpace(errb.String()), "\n")
			if code != 2 || len(lines) != 1 || !strings.Contains(lines[0], "EUTERPE_OUTBOX_LEASE_TTL") {
				t.Fatalf("exit %d, stderr:\n%s", code, errb.String())
			}
			if entries, err := os.ReadDir(state); err != nil || len(entries) != 0 {
				t.Fatalf("state directory written before the settings were checked: %v %v", entries, err)
			}
			if engine == sqldb.Postgres {
				db, err := sqldb.Open(context.Background(), env["EUTERPE_DATABASE_URL"], "")
				if err != nil {
					t.Fatal(err)
				}
				defer db.Close()
				if n := count(t, db, `SELECT COUNT(*) FROM information_schema.tables WHERE table_name = 'euterpe_schema_versions'`); n != 0 {
					t.Fatal("database migrated before the settings were checked")
				}
			}
		})
	}
}

func TestRequesterCreateAndRewrap(t *testing.T) {
	dir := t.TempDir()
	k1, k2 := "k1:"+credentials.NewKey(), "k2:"+credentials.NewKey()
	env := map[string]string{"EUTERPE_DATABASE_URL": "sqlite:" + dir + "/c.db", "EUTERPE_KEYRING": k1, "EUTERPE_STATE_DIR": dir}
	getenv := func(k string) string { return env[k] }
	var out, errb bytes.Buffer
	if code := run(context.Background(), []string{"requester", "create", "--name", "acme"}, getenv, &out, &errb); code != 0 {
		t.Fatalf("create: %d %s", code, errb.String())
	}
	var created map[string]string
	if err := json.Unmarshal(out.Bytes(), &created); err != nil || created["requester_id"] == "" ||
		!strings.HasPrefix(created["api_key"], "eut_") || !strings.HasPrefix(created["webhook_secret"], "whsec_") {
		t.Fatalf("output %q: %v", out.String(), err)
	}
	if strings.Contains(errb.String(), created["api_key"]) || strings.Contains(errb.String(), created["webhook_secret"]) {
		t.Fatal("a secret reached the log")
	}
	env["EUTERPE_KEYRING"] = k2 + "," + k1
	out.Reset()
	if code := run(context.Background(), []string{"keys", "rewrap"}, getenv, &out, &errb); code != 0 {
		t.Fatalf("rewrap: %d %s", code, errb.String())
	}
	if !strings.Contains(out.String(), `"webhook_secrets":1`) {
		t.Fatalf("rewrap output %s", out.String())
	}
	// k1 can go now: the secret opens under k2 alone.
	db, err := sqldb.Open(context.Background(), env["EUTERPE_DATABASE_URL"], "")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	onlyK2, _ := credentials.ParseKeyring(k2, "")
	sec, err := requesters.New(db, onlyK2).WebhookSecrets(context.Background(), created["requester_id"])
	if err != nil || sec.Current.Value != created["webhook_secret"] {
		t.Fatalf("after rewrap: %v", err)
	}
	if code := run(context.Background(), []string{"requester", "create"}, getenv, &out, &errb); code != 2 {
		t.Fatalf("create without --name: %d", code)
	}
}

// An argument a command does not take stops it with one line naming the
// argument before anything is written: flag parsing ends at the first
// positional argument, so the flags after it would otherwise be dropped
// without a word.
func TestStrayArgumentRefused(t *testing.T) {
	cases := []struct {
		name string
		args []string
	}{
		{"serve", []string{"serve", "stray"}},
		{"serve, flags after it", []string{"serve", "stray", "--addr", "127.0.0.1:0"}},
		{"migrate", []string{"migrate", "stray"}},
		{"requester create", []string{"requester", "create", "--name", "acme", "stray"}},
		{"keys generate", []string{"keys", "generate", "stray"}},
		{"operator create", []string{"operator", "create", "stray", "--name", "ops"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			state := t.TempDir()
			env := map[string]string{"EUTERPE_STATE_DIR": state, "EUTERPE_CENTRAL_ADDR": "127.0.0.1:0"}
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			var out, errb bytes.Buffer
			code := run(ctx, tc.args, func(k string) string { return env[k] }, &out, &errb)
			lines := strings.Split(strings.TrimSpace(errb.String()), "\n")
			if code != 2 || len(lines) != 1 || !strings.Contains(lines[0], "stray") {
				t.Fatalf("exit %d, stderr:\n%s", code, errb.String())
			}
			if out.Len() != 0 {
				t.Fatalf("output %q", out.String())
			}
			if entries, err := os.ReadDir(state); err != nil || len(entries) != 0 {
				t.Fatalf("state directory written before the arguments were checked: %v %v", entries, err)
			}
		})
	}
}

// -h after a command lists the settings and exits 0, starting nothing.
func TestCommandHelpFlag(t *testing.T) {
	for _, args := range [][]string{{"serve", "-h"}, {"migrate", "--help"}} {
		t.Run(strings.Join(args, " "), func(t *testing.T) {
			state := t.TempDir()
			env := map[string]string{"EUTERPE_STATE_DIR": state}
			var out, errb bytes.Buffer
			code := run(context.Background(), args, func(k string) string { return env[k] }, &out, &errb)
			if code != 0 || !strings.Contains(out.String(), "EUTERPE_DATABASE_URL") {
				t.Fatalf("exit %d, stdout:\n%s\nstderr:\n%s", code, out.String(), errb.String())
			}
			if entries, err := os.ReadDir(state); err != nil || len(entries) != 0 {
				t.Fatalf("state directory written: %v %v", entries, err)
			}
		})
	}
}

// TestRelativeStateDirRefused: a relative EUTERPE_STATE_DIR would put the
// embedded database and the local KEK wherever the daemon happened to be
// started; it stops serve with one line naming the setting, writing nothing.
func TestRelativeStateDirRefused(t *testing.T) {
	cwd := t.TempDir()
	t.Chdir(cwd)
	env := map[string]string{"EUTERPE_STATE_DIR": "state"}
	var out, errb bytes.Buffer
	code := run(context.Background(), []string{"serve"}, func(k string) string { return env[k] }, &out, &errb)
	lines := strings.Split(strings.TrimSpace(errb.String()), "\n")
	if code != 2 || len(lines) != 1 || !strings.Contains(lines[0], "EUTERPE_STATE_DIR") || !strings.Contains(lines[0], "absolute") {
		t.Fatalf("exit %d, stderr:\n%s", code, errb.String())
	}
	if entries, err := os.ReadDir(cwd); err != nil || len(entries) != 0 {
		t.Fatalf("written before the settings were checked: %v %v", entries, err)
	}
}
