package executor_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/vesta-cx/euterpe/edge/library/executor"
	"github.com/vesta-cx/euterpe/edge/library/pathsafe"
	"github.com/vesta-cx/euterpe/edge/library/policy"
	"github.com/vesta-cx/euterpe/edge/library/store"
)

// scanChildEnv selects the scanning-process role of the test binary: its
// value is the library.db to scan into, scanChildRootEnv the root.
const (
	scanChildEnv     = "EUTERPE_TEST_SCAN_CHILD_DB"
	scanChildRootEnv = "EUTERPE_TEST_SCAN_CHILD_ROOT"
)

// runScanChild claims the pending scan and holds it mid-walk, below the
// root, with its session open and its lease renewed, until it is killed.
func runScanChild(t *testing.T, db, root string) {
	ctx := context.Background()
	st, err := store.Open(ctx, db)
	if err != nil {
		t.Fatal(err)
	}
	roots, err := pathsafe.NewRoots([]string{root})
	if err != nil {
		t.Fatal(err)
	}
	x := &executor.Executor{Store: st, Roots: roots, Log: slog.New(slog.NewTextHandler(io.Discard, nil)),
		WorkerID: "doomed", LeaseTTL: 3 * time.Second}
	executor.SetScanDir(x, func(p string) error {
		if p != root {
			time.Sleep(time.Hour)
		}
		return nil
	})
	did, err := x.RunJobOnce(ctx)
	t.Fatalf("the scan ended before it was killed: claimed=%v err=%v", did, err)
}

// TestScanSessionClosedAfterSIGKILL: a process killed mid-scan leaves its
// job and its scan session running. After a restart the session must not
// stay running for ever: the policy tick that recovers the expired job
// closes it (failed, with a finish time), and when the job runs again
// before any tick has, its new session closes the old one.
func TestScanSessionClosedAfterSIGKILL(t *testing.T) {
	if db := os.Getenv(scanChildEnv); db != "" {
		runScanChild(t, db, os.Getenv(scanChildRootEnv))
		return
	}
	cases := []struct {
		name string
		// restart brings the killed job back to pending the way a
		// restarted daemon does, and checks the session on the way.
		restart func(t *testing.T, e *env, clock *atomic.Int64, job, sid int64)
		want    func(job, session int64) string // the killed session's message, given the new session
	}{
		{"policy tick after restart", func(t *testing.T, e *env, clock *atomic.Int64, job, sid int64) {
			sched := &policy.Scheduler{Policy: e.p, Backoff: e.x.Retry}
			tick := func() {
				if err := sched.Tick(context.Background()); err != nil {
					t.Fatal(err)
				}
			}
			tick() // recovers the job, closes its session, schedules the retry
			if s := sessionStatus(t, e, sid); s.status != store.StatusFailed || s.finished == nil || *s.finished != clock.Load() {
				t.Fatalf("after the first tick: session %s finished %v, want failed at %d", s.status, derefI(s.finished), clock.Load())
			}
			clock.Add(time.Minute.Milliseconds())
			tick() // requeues it
		}, func(job, _ int64) string { return fmt.Sprintf("interrupted: job %d is no longer running", job) }},
		{"job runs again", func(t *testing.T, e *env, clock *atomic.Int64, job, sid int64) {
			ctx := context.Background()
			if n, err := e.x.RecoverStaleJobs(ctx); err != nil || n != 1 {
				t.Fatalf("claim-path recovery: %d %v", n, err)
			}
			for i := 0; i < 2; i++ { // schedule the retry, then requeue
				if err := e.p.RequeueRetryable(ctx, e.x.Retry); err != nil {
					t.Fatal(err)
				}
				clock.Add(time.Minute.Milliseconds())
			}
			if s := sessionStatus(t, e, sid); s.status != store.StatusRunning {
				t.Fatalf("session %s before the job ran again", s.status)
			}
		}, func(job, session int64) string {
			return fmt.Sprintf("interrupted: job %d ran again as scan session %d", job, session)
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			// The policy's requeue writes retry columns no executor path
			// may: the guards go in once the job is pending again.
			e := newEnv(t, false)
			e.write("music/a.flac", "a")
			e.write("music/b.flac", "b")
			j, err := e.p.EnqueueScan(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			child := exec.Command(os.Args[0], "-test.run=^TestScanSessionClosedAfterSIGKILL$", "-test.count=1")
			child.Env = append(os.Environ(), scanChildEnv+"="+e.st.Path, scanChildRootEnv+"="+e.root)
			child.Stderr = os.Stderr
			if err := child.Start(); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = child.Process.Kill(); _ = child.Wait() })
			sid := waitRunningSession(t, e, 60*time.Second)
			if err := child.Process.Signal(syscall.SIGKILL); err != nil {
				t.Fatal(err)
			}
			_ = child.Wait()
			if job := e.job(j.ID); job.Status != store.StatusRunning {
				t.Fatalf("killed job %s, want running", job.Status)
			}
			// The daemon comes back after the child's lease (real time) has
			// run out, on a clock the test moves.
			now := &atomic.Int64{}
			now.Store(time.Now().Add(time.Hour).UnixMilli())
			e.st.Now = func() time.Time { return time.UnixMilli(now.Load()) }
			c.restart(t, e, now, j.ID, sid)
			installGuards(t, e.st)
			if job := e.runJob(); job.ID != j.ID || job.Status != store.StatusCompleted {
				t.Fatalf("re-run job %d %s: %s", job.ID, job.Status, deref(job.ErrorMessage))
			}
			last := e.lastSession()
			if last.id == sid || last.status != store.StatusSucceeded || last.seen != 2 {
				t.Fatalf("re-run session %d %s seen=%d", last.id, last.status, last.seen)
			}
			s := sessionStatus(t, e, sid)
			want := c.want(j.ID, last.id)
			if s.status != store.StatusFailed || s.finished == nil || deref(s.msg) != want {
				t.Fatalf("killed session %s finished %v %q, want failed %q", s.status, derefI(s.finished), deref(s.msg), want)
			}
			var running int
			e.st.DB.QueryRow(`SELECT COUNT(*) FROM scan_sessions WHERE status = 'running' OR finished_at IS NULL`).Scan(&running)
			if running != 0 {
				t.Fatalf("%d sessions still running", running)
			}
		})
	}
}

func (e *env) job(id int64) store.Job {
	e.t.Helper()
	j, err := e.st.GetJob(context.Background(), id)
	if err != nil {
		e.t.Fatal(err)
	}
	return j
}

func sessionStatus(t *testing.T, e *env, id int64) (s struct {
	status   string
	finished *int64
	msg      *string
}) {
	t.Helper()
	if err := e.st.DB.QueryRow(`SELECT status, finished_at, error_message FROM scan_sessions WHERE id = ?`, id).
		Scan(&s.status, &s.finished, &s.msg); err != nil {
		t.Fatal(err)
	}
	return s
}

// waitRunningSession waits for the child's scan to open its session.
func waitRunningSession(t *testing.T, e *env, d time.Duration) int64 {
	t.Helper()
	deadline := time.Now().Add(d)
	for time.Now().Before(deadline) {
		var id int64
		if err := e.st.DB.QueryRow(`SELECT id FROM scan_sessions WHERE status = 'running'`).Scan(&id); err == nil {
			return id
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("no scan session running after %v; state dir %s", d, filepath.Dir(e.st.Path))
	return 0
}
