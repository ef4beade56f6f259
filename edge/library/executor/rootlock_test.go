package executor_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/vesta-cx/euterpe/daemon/testsvc"
	"github.com/vesta-cx/euterpe/edge/library/executor"
	"github.com/vesta-cx/euterpe/edge/library/pathsafe"
	"github.com/vesta-cx/euterpe/edge/library/store"
	"github.com/vesta-cx/euterpe/edge/library/trash"
)

// A delete waits for the lock on the library root that holds its files
// before its last check, as one in another process with a trash of its
// own would hold it, and acts once it is free.
func TestDeleteWaitsForTheRootLock(t *testing.T) {
	e := newEnv(t, true)
	kept, del, fk, fd := dupPair(t, e)
	keptIno := inode(t, kept)
	var checked atomic.Bool
	executor.SetDeleteHooks(e.x, func(string) { checked.Store(true) }, nil)
	requestPair(t, e, fk, fd, false)
	fdRoot, err := unix.Open(e.root, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	release, err := trash.FlockContext(context.Background(), fdRoot, "the test's hold on the root")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan store.Job, 1)
	go func() { done <- e.runJob() }()
	time.Sleep(300 * time.Millisecond)
	if checked.Load() {
		release()
		t.Fatal("the delete made its last check while the root was locked elsewhere")
	}
	release()
	select {
	case j := <-done:
		if j.Status != store.StatusCompleted {
			t.Fatalf("job %s", j.Status)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the delete did not go on once the root was free")
	}
	if _, err := os.Lstat(del); !os.IsNotExist(err) {
		t.Fatalf("the duplicate is still at its path: %v", err)
	}
	keptIntact(t, kept, keptIno, true)
}

// A delete locks only the roots that hold its files: another root that
// cannot be opened (a disk unplugged, its mount directory gone) does not
// stop it. (A root configured twice through a bind mount is locked once:
// TestDeleteRefusesBindMountedCopy runs that case.)
func TestDeleteUnaffectedByAnotherRootGone(t *testing.T) {
	e := newEnv(t, true)
	other := addRoot(t, e)
	kept, del, fk, fd := dupPair(t, e)
	keptIno := inode(t, kept)
	if err := os.Remove(other); err != nil {
		t.Fatal(err)
	}
	requestPair(t, e, fk, fd, false)
	if j := e.runJob(); j.Status != store.StatusCompleted {
		t.Fatalf("job %s: %v", j.Status, deref(j.ErrorMessage))
	}
	if _, err := os.Lstat(del); !os.IsNotExist(err) {
		t.Fatalf("the duplicate is still at its path: %v", err)
	}
	keptIntact(t, kept, keptIno, true)
}

// A library root on a filesystem without flock (ENOLCK, EOPNOTSUPP; EBADF
// on NFS, where flock is a byte-range lock that needs a descriptor open for
// writing, which a directory never is) is left unlocked: the delete goes
// on under the trash lock alone, and a warning says so, once however many
// deletes meet the root. Any other error taking the lock refuses the
// delete before its last check, naming the error, with the file where it
// was.
func TestDeleteOnARootWithoutFlock(t *testing.T) {
	tests := []struct {
		name    string
		err     error
		deleted bool
	}{
		{"ENOLCK", unix.ENOLCK, true},
		{"EOPNOTSUPP", unix.EOPNOTSUPP, true},
		{"EBADF, as on NFS", unix.EBADF, true},
		{"EIO", unix.EIO, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, true)
			logs := &testsvc.LogBuffer{}
			e.x.Log = slog.New(slog.NewJSONHandler(logs, nil))
			var locks atomic.Int32
			executor.SetRootFlock(e.x, func(_ context.Context, fd int, what string) (func(), error) {
				locks.Add(1)
				unix.Close(fd) // the lock function owns fd
				return nil, fmt.Errorf("%s: %w", what, tc.err)
			})
			var checked atomic.Bool
			var trashFree atomic.Int32 // last checks made while the trash lock was free
			executor.SetDeleteHooks(e.x, func(string) {
				checked.Store(true)
				if trashLockFree(t, e.x.Trash.Path()) {
					trashFree.Add(1)
				}
			}, nil)
			kept, del, fk, fd := dupPair(t, e)
			// A second group, so that a second delete meets the root too.
			kept2, del2 := e.write("k/g.bin", dupContent+" too"), e.write("d/g.bin", dupContent+" too")
			e.scanAndHash()
			fk2, fd2 := e.file(kept2), e.file(del2)
			keptIno := inode(t, kept)

			for i, pair := range []struct {
				kept, del string
				fk, fd    store.File
			}{{kept, del, fk, fd}, {kept2, del2, fk2, fd2}} {
				requestPair(t, e, pair.fk, pair.fd, false)
				j := e.runJob()
				if got := int(locks.Load()); got != i+1 {
					t.Fatalf("the root lock was tried %d times for %d deletes", got, i+1)
				}
				_, err := os.Lstat(pair.del)
				if tc.deleted {
					if j.Status != store.StatusCompleted || !os.IsNotExist(err) {
						t.Fatalf("delete %d: job %s, duplicate at its path: %v", i+1, j.Status, err)
					}
					continue
				}
				if j.Status != store.StatusFailed || checked.Load() || err != nil {
					t.Fatalf("delete %d: job %s, last check made %v, duplicate: %v", i+1, j.Status, checked.Load(), err)
				}
				d := decisions(t, e, j.ID)[pair.fd.ID]
				if d.Decision != executor.DecisionRefused || !strings.Contains(d.Reason, "input/output error") {
					t.Fatalf("delete %d: decision %+v", i+1, d)
				}
			}
			want := 0
			if tc.deleted {
				want = 1 // however many deletes meet the root
			}
			if warned := strings.Count(logs.String(), "a library root cannot be locked"); warned != want {
				t.Fatalf("warning logged %d times, want %d:\n%s", warned, want, logs.String())
			}
			if n := trashFree.Load(); n != 0 {
				t.Fatalf("%d deletes made their last check without the trash lock", n)
			}
			keptIntact(t, kept, keptIno, true)
		})
	}
}

// trashLockFree reports whether the trash lock of dir can be taken at once
// (it is given back at once); false while a delete holds it.
func trashLockFree(t *testing.T, dir string) bool {
	t.Helper()
	fd, err := unix.Open(filepath.Join(dir, trash.LockName), unix.O_RDWR|unix.O_CLOEXEC, 0)
	if errors.Is(err, unix.ENOENT) {
		return true // never taken
	}
	if err != nil {
		t.Fatalf("trash lock file: %v", err)
	}
	defer unix.Close(fd)
	switch err := unix.Flock(fd, unix.LOCK_EX|unix.LOCK_NB); {
	case err == nil:
		return true
	case errors.Is(err, unix.EWOULDBLOCK):
		return false
	default:
		t.Fatalf("flock the trash lock: %v", err)
		return false
	}
}

// A delete whose files lie under two roots locks both. When the second
// refuses its lock with an error other than "no flock here", the delete is
// refused before its last check and the first root's lock is given back:
// nothing stays locked for the next delete, here or in another process.
func TestDeleteReleasesRootLocksWhenALaterOneFails(t *testing.T) {
	e := newEnv(t, true)
	other := addRoot(t, e)
	kept, del, fk, fd := dupPairAt(t, e, filepath.Join(e.root, "k/f.bin"), filepath.Join(other, "f.bin"))
	keptIno := inode(t, kept)
	var locks atomic.Int32
	executor.SetRootFlock(e.x, func(ctx context.Context, fd int, what string) (func(), error) {
		if locks.Add(1) == 1 {
			return trash.FlockContext(ctx, fd, what)
		}
		unix.Close(fd)
		return nil, fmt.Errorf("%s: %w", what, unix.EIO)
	})
	var checked atomic.Bool
	executor.SetDeleteHooks(e.x, func(string) { checked.Store(true) }, nil)
	requestPair(t, e, fk, fd, false)

	j := e.runJob()
	if got := locks.Load(); got != 2 {
		t.Fatalf("%d root locks tried, want both roots", got)
	}
	if j.Status != store.StatusFailed || checked.Load() {
		t.Fatalf("job %s, last check made %v", j.Status, checked.Load())
	}
	if d := decisions(t, e, j.ID)[fd.ID]; d.Decision != executor.DecisionRefused || !strings.Contains(d.Reason, "input/output error") {
		t.Fatalf("decision %+v", d)
	}
	if _, err := os.Lstat(del); err != nil {
		t.Fatalf("the duplicate was touched: %v", err)
	}
	keptIntact(t, kept, keptIno, true)
	for _, root := range []string{e.root, other} {
		rfd, err := unix.Open(root, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
		if err != nil {
			t.Fatal(err)
		}
		err = unix.Flock(rfd, unix.LOCK_EX|unix.LOCK_NB)
		unix.Close(rfd)
		if err != nil {
			t.Fatalf("root %s is still locked after the refused delete: %v", root, err)
		}
	}
}

// addRoot gives e's executor a second library root, an empty directory of
// its own, and returns its path.
func addRoot(t *testing.T, e *env) string {
	t.Helper()
	other := filepath.Join(t.TempDir(), "disk1")
	if err := os.Mkdir(other, 0o755); err != nil {
		t.Fatal(err)
	}
	roots, err := pathsafe.NewRoots([]string{e.root, other})
	if err != nil {
		t.Fatal(err)
	}
	e.x.Roots = roots
	return other
}
