package pipeline

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/vesta-cx/euterpe/daemon/procgroup/proctest"
	"github.com/vesta-cx/euterpe/daemon/sqldb"
)

const childEnv = "EUTERPE_PIPELINE_TEST_CHILD"

func TestMain(m *testing.M) {
	if os.Getenv(childEnv) == "1" {
		os.Exit(runChild())
	}
	if path := os.Getenv(stageChildEnv); path != "" {
		// A worker running an exec stage, killed by the test mid-stage.
		_, _ = Exec{Path: path, Timeout: time.Hour}.Run(context.Background(), msg)
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// runChild is a pipeline worker process whose job type never finishes;
// the crash test kills it with SIGKILL mid-job.
func runChild() int {
	ctx := context.Background()
	db, err := sqldb.Open(ctx, os.Getenv("EUTERPE_PIPELINE_TEST_DB"), "")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	types := NewRegistry()
	_ = types.Register(JobType{Name: "noop", Runner: Pipeline{StageFunc{StageName: "fetch", Fn: func(ctx context.Context, m JobMessage, in any) (any, error) {
		<-ctx.Done() // mid-job, heartbeating, until killed
		return nil, ctx.Err()
	}}}})
	vis, _ := time.ParseDuration(os.Getenv("EUTERPE_PIPELINE_TEST_VISIBILITY"))
	w := NewWorker(NewStore(db, nil), types, WorkerConfig{ID: os.Getenv("EUTERPE_PIPELINE_TEST_WORKER"), Visibility: vis, Concurrency: 1, Poll: 20 * time.Millisecond})
	_ = w.Run(ctx)
	return 0
}

// §7 "Worker crash": a worker SIGKILLed mid-job leaves its message to
// reappear after the visibility timeout with attempt + 1; after five lost
// attempts the job is dead-lettered.
func TestWorkerSIGKILLReappearsThenDLQ(t *testing.T) {
	eachEngine(t, func(t *testing.T, db *sqldb.DB) {
		ctx := context.Background()
		f := newFixture(t, db, nil)
		c := f.submit(t, "noop", "AAPL", "2026-01-02")
		const vis = 1500 * time.Millisecond
		for attempt := 1; attempt <= 5; attempt++ {
			worker := fmt.Sprintf("child-%d", attempt)
			cmd := exec.Command(os.Args[0], "-test.run=^$")
			cmd.Env = append(os.Environ(), childEnv+"=1", "EUTERPE_PIPELINE_TEST_DB="+dbURL(t, db),
				"EUTERPE_PIPELINE_TEST_VISIBILITY="+vis.String(), "EUTERPE_PIPELINE_TEST_WORKER="+worker)
			cmd.Stderr = os.Stderr
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			waitFor(t, 30*time.Second, worker+" to run the job", func() bool {
				var w *string
				var n int
				_ = db.QueryRowContext(ctx, db.Rebind("SELECT worker_id, attempt_count FROM pipeline_jobs WHERE job_id = ?"), c.JobID).Scan(&w, &n)
				if w != nil && *w == worker && n == attempt {
					return true
				}
				return false
			})
			// Heartbeats keep it invisible past the timeout while alive.
			time.Sleep(vis + vis/2)
			if r := f.get(t, c.JobID); r.Status != StatusRunning || r.Attempts != attempt {
				t.Fatalf("attempt %d: a live worker lost its job: %+v", attempt, r)
			}
			_ = cmd.Process.Signal(syscall.SIGKILL)
			_ = cmd.Wait()
			killedAt := time.Now()
			// Not visible before the timeout…
			if jobs, err := f.store.Claim(ctx, "early", 1, time.Minute); err != nil || len(jobs) != 0 {
				t.Fatalf("attempt %d: reappeared at once (%v)", attempt, err)
			}
			// …and back once it passed.
			waitFor(t, 10*time.Second, "the lease to expire", func() bool {
				n, err := f.store.Reclaim(ctx, 1)
				return err == nil && n == 1
			})
			if time.Since(killedAt) < vis/3 {
				t.Fatalf("attempt %d: reclaimed %v after the kill", attempt, time.Since(killedAt))
			}
			r := f.get(t, c.JobID)
			if r.LastError == nil || r.LastError.ErrorCode != CodeVisibilityTimeout || r.LastError.Attempt != attempt {
				t.Fatalf("attempt %d: %+v", attempt, r.LastError)
			}
			want := StatusQueued
			if attempt == 5 {
				want = StatusDeadLetter
			}
			if r.Status != want {
				t.Fatalf("attempt %d: status %s, want %s", attempt, r.Status, want)
			}
		}
		dlq, _ := f.store.List(ctx, Filter{Status: StatusDeadLetter})
		if len(dlq.Jobs) != 1 || dlq.Jobs[0].Attempts != 5 {
			t.Fatalf("dlq %+v", dlq)
		}
	})
}

const stageChildEnv = "EUTERPE_PIPELINE_TEST_STAGE"

// A worker SIGKILLed mid-stage takes its exec stage's program with it:
// the kernel kills it (PR_SET_PDEATHSIG), where before it ran on as an
// orphan until it answered into a closed pipe.
func TestWorkerSIGKILLKillsItsExecStage(t *testing.T) {
	pidFile := filepath.Join(t.TempDir(), "pid")
	stage := script(t, "echo $$ > "+pidFile+".tmp; mv "+pidFile+".tmp "+pidFile+"; exec sleep 600")
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), stageChildEnv+"="+stage)
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	pid := proctest.ReadPid(t, pidFile)
	_ = cmd.Process.Signal(syscall.SIGKILL)
	_ = cmd.Wait()
	proctest.RequireGone(t, "the killed worker's exec stage", pid, 5*time.Second)
}
