package runner_test

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/vesta-cx/euterpe/central/credentials"
	"github.com/vesta-cx/euterpe/central/inbox"
	"github.com/vesta-cx/euterpe/central/requesters"
	"github.com/vesta-cx/euterpe/central/runner"
	"github.com/vesta-cx/euterpe/central/schema"
	"github.com/vesta-cx/euterpe/daemon/sqldb"
	"github.com/vesta-cx/euterpe/daemon/sqldb/sqltest"
	"github.com/vesta-cx/euterpe/daemon/testsvc"
)

// The crash test re-executes this test binary as a runner process.
const (
	childEnv     = "EUTERPE_RUNNER_TEST_CHILD"
	childDBEnv   = "EUTERPE_RUNNER_TEST_DB"
	childKeysEnv = "EUTERPE_RUNNER_TEST_KEYRING"
	childTmpEnv  = "EUTERPE_RUNNER_TEST_TMP"
)

func TestMain(m *testing.M) {
	if os.Getenv(childEnv) == "1" {
		if err := runChild(); err != nil {
			fmt.Fprintln(os.Stderr, "child runner:", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// runChild is a runner process: it works until it is killed.
func runChild() error {
	ctx := context.Background()
	db, err := sqldb.Open(ctx, os.Getenv(childDBEnv), "")
	if err != nil {
		return err
	}
	keys, err := credentials.ParseKeyring(os.Getenv(childKeysEnv), "")
	if err != nil {
		return err
	}
	s := runner.DefaultSettings()
	s.LeaseTTL, s.PollInterval, s.TempDir = time.Second, 20*time.Millisecond, os.Getenv(childTmpEnv)
	log := slog.New(slog.NewJSONHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	r, err := runner.New(runner.Options{Jobs: inbox.New(db, keys, testPolicy()), Secrets: requesters.New(db, keys),
		Settings: s, WorkerID: fmt.Sprintf("child-%d", os.Getpid()), Logger: log})
	if err != nil {
		return err
	}
	return r.Run(ctx)
}

// TestRunnerKilledMidTranscode: a runner process is SIGKILLed while ffmpeg
// runs; its ffmpeg dies with it, another runner takes the job over once the
// lease expires and finishes it, the dead runner's scratch files are swept,
// and the outputs are uploaded and recorded once.
func TestRunnerKilledMidTranscode(t *testing.T) {
	testsvc.Program(t, "ffmpeg")
	spec := "crash:" + credentials.NewKey()
	for _, engine := range sqltest.Engines {
		t.Run(string(engine), func(t *testing.T) {
			url := sqltest.URL(t, engine)
			db, err := sqldb.Open(context.Background(), url, "")
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = db.Close() })
			if _, err := sqldb.Migrate(context.Background(), db, schema.Migrations()); err != nil {
				t.Fatal(err)
			}
			keys, err := credentials.ParseKeyring(spec, "")
			if err != nil {
				t.Fatal(err)
			}
			e := newEnvKeys(t, db, keys)
			e.putWAV("in/long.wav", 240)
			id := e.enqueue("in/long.wav", []inbox.Rendition{{Name: "hi", Codec: "flac", SampleRateHz: 96000}}, nil)

			var stderr bytes.Buffer
			child := exec.Command(os.Args[0], "-test.run=^$")
			child.Env = append(os.Environ(), childEnv+"=1", childDBEnv+"="+url, childKeysEnv+"="+spec, childTmpEnv+"="+e.tmp)
			child.Stderr = &stderr
			if err := child.Start(); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = child.Process.Kill(); _ = child.Wait() })
			waitStatus(t, e, id, schema.StatusProcessing, 30*time.Second)
			deadline := time.Now().Add(30 * time.Second)
			for countFiles(e.tmp) == 0 || len(processesUsing(e.tmp)) == 0 { // ffmpeg is writing its output
				if time.Now().After(deadline) {
					t.Fatalf("no ffmpeg writing in the child's scratch (%d files); log:\n%s", countFiles(e.tmp), stderr.String())
				}
				time.Sleep(20 * time.Millisecond)
			}
			if err := child.Process.Signal(syscall.SIGKILL); err != nil {
				t.Fatal(err)
			}
			_ = child.Wait()
			waitFor(t, 5*time.Second, "the dead runner's ffmpeg to end", func() bool { return len(processesUsing(e.tmp)) == 0 })

			// A second runner starts: it sweeps the dead one's files, then
			// reclaims the job once its lease has expired and finishes it.
			b := e.runner(nil)
			if n := countFiles(e.tmp); n != 1 { // b's own lock file
				t.Fatalf("%d files left after the start-up sweep", n)
			}
			v := e.drive(b, id, 60*time.Second)
			if v.Status != schema.StatusSucceeded || v.AttemptCount != 2 {
				t.Fatalf("status %s attempts %d err %+v", v.Status, v.AttemptCount, v.LastError)
			}
			outs := e.outputs(v)
			if len(outs) != 1 || count(e.events(id), "succeeded") != 1 {
				t.Fatalf("outputs %v events %v", outs, e.events(id))
			}
			objs := 0
			for o := range e.s3.Client.ListObjects(context.Background(), e.s3.Name, minio.ListObjectsOptions{Prefix: "out/" + id + "/", Recursive: true}) {
				if o.Err != nil {
					t.Fatal(o.Err)
				}
				objs++
			}
			if objs != 1 {
				t.Fatalf("%d objects under the output prefix", objs)
			}
			e.scratchEmpty()
		})
	}
}

func countFiles(root string) int {
	n := 0
	_ = filepath.Walk(root, func(_ string, info os.FileInfo, err error) error {
		if err == nil && !info.IsDir() {
			n++
		}
		return nil
	})
	return n
}

// processesUsing lists pids whose command line mentions dir.
func processesUsing(dir string) []string {
	var out []string
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err == nil && strings.Contains(string(b), dir) {
			out = append(out, e.Name())
		}
	}
	return out
}
