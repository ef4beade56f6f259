package executor_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/vesta-cx/euterpe/daemon"
	"github.com/vesta-cx/euterpe/edge/library/executor"
	"github.com/vesta-cx/euterpe/edge/library/store"
)

// rerun brings a job left running by a stopped executor back the way a
// restart does (its lease expires, recovery makes it retryable, the
// requeue makes it pending), runs it again and returns it.
func rerun(t *testing.T, e *env, clock *atomic.Int64, id int64) store.Job {
	t.Helper()
	ctx := context.Background()
	clock.Add((e.x.LeaseTTL + time.Second).Milliseconds())
	if n, err := e.p.RecoverStaleJobs(ctx); n != 1 || err != nil {
		t.Fatalf("recover: %d %v", n, err)
	}
	for range 2 { // the first pass sets retry_after, the second requeues
		if err := e.p.RequeueRetryable(ctx, e.x.Retry); err != nil {
			t.Fatal(err)
		}
		clock.Add(time.Minute.Milliseconds())
	}
	if did, err := e.x.RunJobOnce(ctx); !did || err != nil {
		t.Fatalf("re-run: did=%v err=%v", did, err)
	}
	j, err := e.st.GetJob(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	return j
}

// decisionsOf returns every decision job recorded for file, in order.
func decisionsOf(t *testing.T, e *env, job, file int64) []string {
	t.Helper()
	ds, err := e.st.Decisions(context.Background(), job)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, d := range ds {
		if d.FileID == file {
			out = append(out, d.Decision)
		}
	}
	return out
}

// TestDeleteInterruptedUnderLock cancels the job's context while it holds
// the delete lock (as a daemon stop or a lost lease does): before the last
// check nothing may be moved, and the re-run does the work; once past the
// check the file is moved and its decision must be recorded all the same,
// so the re-run neither forgets the trash copy nor refuses the file as
// missing.
func TestDeleteInterruptedUnderLock(t *testing.T) {
	cases := []struct {
		name string
		// atCheck cancels right before the last check, else right before the move.
		atCheck bool
	}{
		{name: "cancelled before the last check", atCheck: true},
		{name: "cancelled between the last check and the move"},
	}
	for _, permanent := range []bool{false, true} {
		for _, c := range cases {
			name := c.name + "/trash"
			want := executor.DecisionTrashed
			if permanent {
				name, want = c.name+"/permanent", executor.DecisionRemoved
			}
			t.Run(name, func(t *testing.T) {
				// no guards: the re-run goes through the policy's requeue,
				// which writes retry columns no executor path may
				e := newEnv(t, false)
				kept, del, fk, fd := dupPair(t, e)
				keptIno := inode(t, kept)
				clock := fixClock(e)
				ctx, cancel := context.WithCancel(context.Background())
				defer cancel()
				hook := func(p string) {
					if p == del {
						cancel()
					}
				}
				if c.atCheck {
					executor.SetDeleteHooks(e.x, hook, nil)
				} else {
					executor.SetDeleteHooks(e.x, nil, hook)
				}
				j := requestPair(t, e, fk, fd, permanent)
				if did, err := e.x.RunJobOnce(ctx); !did || !errors.Is(err, context.Canceled) {
					t.Fatalf("RunJobOnce did=%v err=%v, want the cancellation", did, err)
				}
				got := decisionsOf(t, e, j.ID, fd.ID)
				if c.atCheck {
					if len(got) != 0 || trashFiles(t, e) != 0 {
						t.Fatalf("interrupted before the check: decisions %v, %d trash files; want none", got, trashFiles(t, e))
					}
					if data, err := os.ReadFile(del); err != nil || string(data) != dupContent {
						t.Fatalf("file moved after the job was cancelled: %q %v", data, err)
					}
				} else {
					if len(got) != 1 || got[0] != want {
						t.Fatalf("moved before the cancellation took: decisions %v, want [%s]", got, want)
					}
					if !e.file(del).IsMissing {
						t.Fatal("row of the moved file not marked missing")
					}
				}

				executor.SetDeleteHooks(e.x, nil, nil)
				if j2 := rerun(t, e, clock, j.ID); j2.Status != store.StatusCompleted || j2.RetryCount != 1 {
					t.Fatalf("re-run: job %s (retry %d) %s, want completed on its first retry", j2.Status, j2.RetryCount, deref(j2.ErrorMessage))
				}
				if got := decisionsOf(t, e, j.ID, fd.ID); len(got) != 1 || got[0] != want {
					t.Fatalf("after the re-run: decisions %v, want exactly [%s]", got, want)
				}
				d := decisions(t, e, j.ID)[fd.ID]
				if _, err := os.Lstat(del); !errors.Is(err, os.ErrNotExist) || !e.file(del).IsMissing {
					t.Fatalf("after the re-run the duplicate is still in place (%v) or not marked missing", err)
				}
				if permanent {
					if d.TrashPath != nil || trashFiles(t, e) != 0 {
						t.Fatal("permanent delete left a trash copy")
					}
				} else if data, err := os.ReadFile(deref(d.TrashPath)); err != nil || string(data) != dupContent {
					t.Fatalf("trash copy at %q: %q %v", deref(d.TrashPath), data, err)
				}
				keptIntact(t, kept, keptIno, true)
			})
		}
	}
}

// failingCatalog fails RecordDecision for trashed and removed decisions
// with err: the first fails calls, or every call when fails is negative.
type failingCatalog struct {
	executor.Catalog
	fails int64
	calls atomic.Int64
	err   error
}

func (c *failingCatalog) RecordDecision(ctx context.Context, d store.Decision) error {
	if d.Decision == executor.DecisionTrashed || d.Decision == executor.DecisionRemoved {
		if n := c.calls.Add(1); c.fails < 0 || n <= c.fails {
			return c.err
		}
	}
	return c.Catalog.RecordDecision(ctx, d)
}

// TestDeleteRecordsDecisionAfterCatalogErrors: the file is moved or
// removed first and recorded after; a record that fails once is retried,
// and one that keeps failing stops the job, retryable, with a message
// saying where the file went (within the stored message cap); its re-run
// records the move.
func TestDeleteRecordsDecisionAfterCatalogErrors(t *testing.T) {
	// long enough that only the start of the message survives the cap
	dbErr := errors.New("database is locked" + strings.Repeat(" (SQLITE_BUSY)", 60))
	cases := []struct {
		name      string
		fails     int64 // -1: every attempt
		permanent bool
	}{
		{name: "trash, fails once", fails: 1},
		{name: "permanent, fails once", fails: 1, permanent: true},
		{name: "trash, always fails", fails: -1},
		{name: "permanent, always fails", fails: -1, permanent: true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			e := newEnv(t, true)
			kept, del, fk, fd := dupPair(t, e)
			keptIno := inode(t, kept)
			cat := &failingCatalog{Catalog: e.st, fails: c.fails, err: dbErr}
			e.x.Catalog = cat
			j := requestPair(t, e, fk, fd, c.permanent)
			got := e.runJob()
			keptIntact(t, kept, keptIno, true)
			if _, err := os.Lstat(del); !errors.Is(err, os.ErrNotExist) {
				t.Fatalf("duplicate still in place: %v", err)
			}
			trashPath := filepath.Join(e.x.Trash.Path(), strconv.FormatInt(j.ID, 10), strconv.FormatInt(fd.ID, 10), "f.bin")
			if !c.permanent {
				if data, err := os.ReadFile(trashPath); err != nil || string(data) != dupContent {
					t.Fatalf("trash copy: %q %v", data, err)
				}
			}
			if c.fails > 0 {
				d := decisions(t, e, j.ID)[fd.ID]
				if got.Status != store.StatusCompleted || cat.calls.Load() != c.fails+1 || !e.file(del).IsMissing {
					t.Fatalf("job %s after %d attempts, row missing=%v: want completed after one retry",
						got.Status, cat.calls.Load(), e.file(del).IsMissing)
				}
				if !c.permanent && deref(d.TrashPath) != trashPath {
					t.Fatalf("recorded trash path %q, want %q", deref(d.TrashPath), trashPath)
				}
				return
			}
			if n := cat.calls.Load(); n < 3 || n > 5 {
				t.Fatalf("%d attempts to record, want a few", n)
			}
			msg := deref(got.ErrorMessage)
			want := "file " + strconv.FormatInt(fd.ID, 10) + " moved to " + trashPath + " but the decision was not recorded: database is locked"
			if c.permanent {
				want = "file " + strconv.FormatInt(fd.ID, 10) + " removed but the decision was not recorded: database is locked"
			}
			if got.Status != store.StatusRetryable || deref(got.ErrorCode) != executor.CodeDeleteFailed {
				t.Fatalf("job %s %s, want retryable %s", got.Status, deref(got.ErrorCode), executor.CodeDeleteFailed)
			}
			if !strings.HasPrefix(msg, want) || len(msg) > daemon.MaxMessage {
				t.Fatalf("error message (%d bytes) %q, want it to start %q within %d bytes", len(msg), msg, want, daemon.MaxMessage)
			}
			if c.permanent {
				return // the re-run finds the path gone and nothing in the trash, as after a crash
			}
			// The database records again: the re-run finds the file in its
			// trash entry and records the move.
			e.x.Catalog = e.st
			if _, err := e.st.DB.Exec(`UPDATE jobs SET status = 'pending' WHERE id = ?`, j.ID); err != nil {
				t.Fatal(err)
			}
			if got := e.runJob(); got.Status != store.StatusCompleted {
				t.Fatalf("re-run: %s", got.Status)
			}
			if d := decisions(t, e, j.ID)[fd.ID]; d.Decision != executor.DecisionTrashed || deref(d.TrashPath) != trashPath {
				t.Fatalf("re-run decision %+v", d)
			}
		})
	}
}
