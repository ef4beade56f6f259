package runner_test

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/minio/minio-go/v7"
	"github.com/vesta-cx/euterpe/central/credentials"
	"github.com/vesta-cx/euterpe/central/inbox"
	"github.com/vesta-cx/euterpe/central/requesters"
	"github.com/vesta-cx/euterpe/central/runner"
	"github.com/vesta-cx/euterpe/central/schema"
	"github.com/vesta-cx/euterpe/central/storage/storagetest"
	"github.com/vesta-cx/euterpe/central/transcode/transcodetest"
	"github.com/vesta-cx/euterpe/daemon/lease"
	"github.com/vesta-cx/euterpe/daemon/sqldb"
	"github.com/vesta-cx/euterpe/daemon/sqldb/sqltest"
	"github.com/vesta-cx/euterpe/daemon/testsvc"
)

// env is one test's world: a migrated database of one engine, the real
// stores on it, a fresh bucket on the real S3 server behind a fault proxy.
type env struct {
	t         testing.TB
	db        *sqldb.DB
	keys      *credentials.Keyring
	inbox     *inbox.Store
	req       *requesters.Store
	requester requesters.Created
	s3        testsvc.S3Bucket
	proxy     *storagetest.Proxy
	tmp       string // runner temp root
	api       string // base URL of the real HTTP API, once started
}

func testPolicy() inbox.Policy {
	return inbox.Policy{
		MaxAttempts:        5,
		MaxRefreshAttempts: 2,
		Backoff:            lease.Backoff{Base: 10 * time.Millisecond, Cap: 40 * time.Millisecond},
		RateLimited:        lease.Backoff{Base: 400 * time.Millisecond, Cap: 800 * time.Millisecond},
	}
}

func testKeys(t testing.TB) *credentials.Keyring {
	k, err := credentials.ParseKeyring("test:"+credentials.NewKey(), "")
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// eachEngine runs body on Postgres and SQLite.
func eachEngine(t *testing.T, body func(t *testing.T, e *env)) {
	testsvc.Program(t, "ffmpeg")
	sqltest.Each(t, []sqldb.Migrations{schema.Migrations()}, func(t *testing.T, db *sqldb.DB) {
		body(t, newEnv(t, db))
	})
}

func newEnv(t testing.TB, db *sqldb.DB) *env {
	return newEnvKeys(t, db, testKeys(t))
}

func newEnvKeys(t testing.TB, db *sqldb.DB, keys *credentials.Keyring) *env {
	e := &env{t: t, db: db, keys: keys, s3: testsvc.S3(t), tmp: t.TempDir()}
	e.inbox = inbox.New(db, e.keys, testPolicy())
	e.req = requesters.New(db, e.keys)
	var err error
	if e.requester, err = e.req.Create(context.Background(), "test requester"); err != nil {
		t.Fatal(err)
	}
	e.proxy = storagetest.New(t, e.s3.Endpoint)
	return e
}

func (e *env) settings() runner.Settings {
	s := runner.DefaultSettings()
	s.LeaseTTL = 1500 * time.Millisecond
	s.PollInterval = 20 * time.Millisecond
	s.TempDir = e.tmp
	s.RefreshWait = 2 * time.Second
	return s
}

func (e *env) runner(mod func(*runner.Settings)) *runner.Runner {
	return e.runnerMetrics(mod, nil)
}

// runnerMetrics is runner with its series recorded in m.
func (e *env) runnerMetrics(mod func(*runner.Settings), m *runner.Metrics) *runner.Runner {
	return e.runnerOptions(mod, func(o *runner.Options) { o.Metrics = m })
}

// runnerOptions is runner with its Options adjusted by opt.
func (e *env) runnerOptions(mod func(*runner.Settings), opt func(*runner.Options)) *runner.Runner {
	s := e.settings()
	if mod != nil {
		mod(&s)
	}
	o := runner.Options{
		Jobs: e.inbox, Secrets: e.req, Settings: s,
		WorkerID: "test-" + uuid.NewString()[:8],
	}
	if opt != nil {
		opt(&o)
	}
	r, err := runner.New(o)
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() { _ = r.Close() })
	return r
}

// putWAV uploads a generated sine WAV as key and returns its size.
func (e *env) putWAV(key string, seconds float64) int64 {
	path := filepath.Join(e.t.TempDir(), "src.wav")
	transcodetest.WAV(e.t, path, seconds, 48000, 2)
	return e.putFile(key, path)
}

func (e *env) putFile(key, path string) int64 {
	info, err := e.s3.Client.FPutObject(context.Background(), e.s3.Name, key, path, minio.PutObjectOptions{})
	if err != nil {
		e.t.Fatal(err)
	}
	return info.Size
}

func (e *env) rootCreds() *credentials.S3 {
	return &credentials.S3{AccessKeyID: e.s3.AccessKey, SecretAccessKey: e.s3.SecretKey}
}

// enqueue adds a job reading key through the proxy and writing under
// out/<job id>/; mod adjusts it before insertion.
func (e *env) enqueue(key string, rends []inbox.Rendition, mod func(*inbox.NewJob)) string {
	id := uuid.NewString()
	j := inbox.NewJob{
		ID: id, RequesterID: e.requester.RequesterID,
		Source:      inbox.Source{Bucket: e.s3.Name, Key: key, Endpoint: e.proxy.URL, Region: e.s3.Region},
		Output:      inbox.Output{Bucket: e.s3.Name, Prefix: "out/" + id + "/", Endpoint: e.proxy.URL, Region: e.s3.Region},
		Renditions:  rends,
		Credentials: credentials.Storage{Source: e.rootCreds(), Output: *e.rootCreds()},
	}
	if mod != nil {
		mod(&j)
	}
	if err := e.inbox.Enqueue(context.Background(), j); err != nil {
		e.t.Fatal(err)
	}
	return id
}

// drive steps r until job id reaches a terminal status or the deadline.
func (e *env) drive(r *runner.Runner, id string, within time.Duration) *inbox.View {
	e.t.Helper()
	ctx := context.Background()
	deadline := time.Now().Add(within)
	for time.Now().Before(deadline) {
		v := e.view(id)
		// The store moves a retried attempt straight back to queued, so a
		// job seen in a terminal status stays there.
		if inbox.Transitions.IsTerminal(v.Status) {
			return v
		}
		if ok, err := r.RunOnce(ctx); err != nil {
			e.t.Fatal(err)
		} else if !ok {
			time.Sleep(20 * time.Millisecond)
		}
	}
	v := e.view(id)
	e.t.Fatalf("job %s still %s after %v (last error %+v)", id, v.Status, within, v.LastError)
	return nil
}

func (e *env) view(id string) *inbox.View {
	e.t.Helper()
	v, err := e.inbox.Get(context.Background(), id)
	if err != nil {
		e.t.Fatal(err)
	}
	return v
}

func (e *env) outputs(v *inbox.View) []inbox.OutputFile {
	e.t.Helper()
	var out []inbox.OutputFile
	if err := json.Unmarshal(v.Outputs, &out); err != nil {
		e.t.Fatalf("outputs %s: %v", v.Outputs, err)
	}
	return out
}

// checkStored downloads each output and fails the test unless the stored
// object's SHA-256 is the checksum recorded for it (an older attempt's
// object would differ).
func (e *env) checkStored(outs []inbox.OutputFile) {
	e.t.Helper()
	for _, o := range outs {
		local := filepath.Join(e.t.TempDir(), "got")
		if err := e.s3.Client.FGetObject(context.Background(), o.Bucket, o.Key, local, minio.GetObjectOptions{}); err != nil {
			e.t.Fatal(err)
		}
		if got := fileSHA256(e.t, local); got != o.Checksum {
			e.t.Fatalf("%s: stored object %s, recorded checksum %s", o.Key, got, o.Checksum)
		}
	}
}

// events lists the statuses of a job's outbox events in sequence order.
func (e *env) events(id string) []string {
	e.t.Helper()
	rows, err := e.db.QueryContext(context.Background(), e.db.Rebind(`SELECT payload FROM job_outbox_events WHERE job_id = ? ORDER BY sequence`), id)
	if err != nil {
		e.t.Fatal(err)
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var p string
		if err := rows.Scan(&p); err != nil {
			e.t.Fatal(err)
		}
		var ev struct {
			Status   string `json:"status"`
			Progress *int   `json:"progress"`
		}
		_ = json.Unmarshal([]byte(p), &ev)
		s := ev.Status
		if ev.Progress != nil {
			s += "%"
		}
		out = append(out, s)
	}
	return out
}

// scratchEmpty fails unless the temp root holds nothing but live runners'
// empty slots.
func (e *env) scratchEmpty() {
	e.t.Helper()
	_ = filepath.Walk(e.tmp, func(p string, info os.FileInfo, err error) error {
		if err == nil && !info.IsDir() && !strings.HasSuffix(p, ".lock") {
			e.t.Errorf("temp file left behind: %s", p)
		}
		return nil
	})
}

// ffprobe returns "codec,sample_rate,channels" of a local file.
func ffprobe(t *testing.T, path string) string {
	out, err := exec.Command(testsvc.Program(t, "ffprobe"), "-v", "error", "-select_streams", "a:0",
		"-show_entries", "stream=codec_name,sample_rate,channels", "-of", "csv=p=0", path).Output()
	if err != nil {
		t.Fatalf("ffprobe %s: %v", path, err)
	}
	return strings.TrimSpace(string(out))
}

// runUntilDone runs a runner's loop (Run) until job id is terminal.
func (e *env) runUntilDone(id string, within time.Duration) *inbox.View {
	e.t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	r := e.runner(nil)
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			e.t.Errorf("Run: %v", err)
		}
	}()
	deadline := time.Now().Add(within)
	for time.Now().Before(deadline) {
		if v := e.view(id); inbox.Transitions.IsTerminal(v.Status) {
			return v
		}
		time.Sleep(20 * time.Millisecond)
	}
	e.t.Fatalf("job %s not finished after %v", id, within)
	return nil
}
