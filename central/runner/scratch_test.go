package runner_test

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/vesta-cx/euterpe/central/runner"
	"github.com/vesta-cx/euterpe/central/schema"
)

// TestScratchRemovedUnderRunner: something else removes a live runner's
// scratch directory (a temp cleaner ageing it, an operator), its lock file
// too, or the whole temp root (a tmpfs remounted). The next attempt puts
// back what is missing and the job succeeds on its first attempt; the lock
// file is back and held, so another runner's sweep leaves the directory
// alone (fails without: every attempt failed local_io "attempt dir", the
// job dead_letter).
func TestScratchRemovedUnderRunner(t *testing.T) {
	eachEngine(t, func(t *testing.T, e *env) {
		e.putWAV("in/src.wav", 1)
		cases := []struct {
			name   string
			remove func(dir string) error
		}{
			{"directory", os.RemoveAll},
			{"directory and lock file", func(dir string) error {
				if err := os.RemoveAll(dir); err != nil {
					return err
				}
				return os.Remove(dir + ".lock")
			}},
			{"temp root", func(string) error { return os.RemoveAll(e.tmp) }},
		}
		for _, tc := range cases {
			r := e.runner(nil)
			dir := runner.ScratchDir(r)
			if err := tc.remove(dir); err != nil {
				t.Fatal(err)
			}
			id := e.enqueue("in/src.wav", oneOpus, nil)
			v := e.drive(r, id, 60*time.Second)
			if v.Status != schema.StatusSucceeded || v.AttemptCount != 1 {
				t.Fatalf("%s removed: status %s attempts %d err %+v", tc.name, v.Status, v.AttemptCount, v.LastError)
			}
			e.runner(nil) // its start-up sweep
			if _, err := os.Stat(dir); err != nil {
				t.Fatalf("%s removed: the live runner's directory was swept: %v", tc.name, err)
			}
			if _, err := os.Stat(dir + ".lock"); err != nil {
				t.Fatalf("%s removed: lock file not put back: %v", tc.name, err)
			}
		}
		e.scratchEmpty()
	})
}

// TestSweepKeepsLiveOwnerWithoutLockFile: a live runner's lock file is
// removed from under it. Another runner's sweep cannot take a lock that
// is not there, and nothing proves the owner dead, so the directory stays
// and the runner goes on working; of a dead runner's directories without
// a lock file, the one unchanged for a day is swept and a recent one kept
// (fails without: the live runner's directory swept with the recent one).
func TestSweepKeepsLiveOwnerWithoutLockFile(t *testing.T) {
	eachEngine(t, func(t *testing.T, e *env) {
		a := e.runner(nil)
		live := runner.ScratchDir(a)
		busy := filepath.Join(live, "job-v1-123")
		if err := os.Mkdir(busy, 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.Remove(live + ".lock"); err != nil {
			t.Fatal(err)
		}
		dead := deadPID(t)
		old := leftover(t, e.tmp, dead, "0123456789ab")
		day := time.Now().Add(-25 * time.Hour)
		for _, p := range []string{filepath.Join(old, "job-v1-1", "source"), filepath.Join(old, "job-v1-1"), old} {
			if err := os.Chtimes(p, day, day); err != nil {
				t.Fatal(err)
			}
		}
		recent := leftover(t, e.tmp, dead, "ba9876543210")

		e.runner(nil) // its start-up sweep
		for _, p := range []string{busy, recent} {
			if _, err := os.Stat(p); err != nil {
				t.Fatalf("swept without a dead owner's lock: %v", err)
			}
		}
		if _, err := os.Stat(old); !os.IsNotExist(err) {
			t.Fatalf("a dead runner's directory unchanged for a day was kept: %v", err)
		}
		if err := os.Remove(busy); err != nil {
			t.Fatal(err)
		}
		if err := os.RemoveAll(recent); err != nil {
			t.Fatal(err)
		}
		e.putWAV("in/src.wav", 1)
		id := e.enqueue("in/src.wav", oneOpus, nil)
		if v := e.drive(a, id, 60*time.Second); v.Status != schema.StatusSucceeded || v.AttemptCount != 1 {
			t.Fatalf("status %s attempts %d err %+v", v.Status, v.AttemptCount, v.LastError)
		}
		e.scratchEmpty()
	})
}

// TestSweepKeepsOwnerWhoseLockFileWasReplaced: a sweep opens a live
// owner's lock file; a temp cleaner then removes the file, and the owner's
// next attempt puts a new one in place and closes the old, which lets the
// sweep lock the file it opened. That file is no longer the owner's lock:
// the sweep leaves the owner's directory and new lock file alone (fails
// without: it removed the live attempt's files and the new lock file).
func TestSweepKeepsOwnerWhoseLockFileWasReplaced(t *testing.T) {
	root := t.TempDir()
	live, err := runner.OpenScratch(root)
	if err != nil {
		t.Fatal(err)
	}
	defer live.Close()
	dir, cleanup, err := live.Attempt("job", 1)
	if err != nil {
		t.Fatal(err)
	}
	defer cleanup()
	source := filepath.Join(dir, "source")
	if err := os.WriteFile(source, []byte("RIFF"), 0o600); err != nil {
		t.Fatal(err)
	}
	sweeper, err := runner.OpenScratch(root)
	if err != nil {
		t.Fatal(err)
	}
	defer sweeper.Close()
	lockPath := live.Dir() + ".lock"
	runner.SetReapOpened(sweeper, func(owner string) {
		if owner != filepath.Base(live.Dir()) {
			return
		}
		if err := os.Remove(lockPath); err != nil {
			t.Fatal(err)
		}
		_, done, err := live.Attempt("job", 2)
		if err != nil {
			t.Fatal(err)
		}
		done()
	})
	if n, err := sweeper.Sweep(); n != 0 || err != nil {
		t.Fatalf("sweep removed %d owners (%v), want none", n, err)
	}
	if _, err := os.Stat(source); err != nil {
		t.Fatalf("the live attempt's file was swept: %v", err)
	}
	f, err := os.Open(lockPath)
	if err != nil {
		t.Fatalf("the live owner's lock file was swept: %v", err)
	}
	defer f.Close()
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); !errors.Is(err, syscall.EWOULDBLOCK) {
		t.Fatalf("the lock file at the path is not held by its owner (flock: %v)", err)
	}
}

// deadPID is the pid of a process that has ended.
func deadPID(t *testing.T) int {
	t.Helper()
	cmd := exec.Command("true")
	if err := cmd.Run(); err != nil {
		t.Fatal(err)
	}
	return cmd.Process.Pid
}

// leftover makes the directory of runner pid without a lock file, with an
// attempt's source file in it, as a runner that died leaves it.
func leftover(t *testing.T, root string, pid int, rnd string) string {
	t.Helper()
	dir := filepath.Join(root, fmt.Sprintf("runner-%d-%s", pid, rnd))
	if err := os.MkdirAll(filepath.Join(dir, "job-v1-1"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "job-v1-1", "source"), []byte("RIFF"), 0o600); err != nil {
		t.Fatal(err)
	}
	return dir
}
