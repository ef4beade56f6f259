package executor_test

import (
	"context"
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
	other := filepath.Join(t.TempDir(), "disk1")
	if err := os.Mkdir(other, 0o755); err != nil {
		t.Fatal(err)
	}
	roots, err := pathsafe.NewRoots([]string{e.root, other})
	if err != nil {
		t.Fatal(err)
	}
	e.x.Roots = roots
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
			executor.SetDeleteHooks(e.x, func(string) { checked.Store(true) }, nil)
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
			keptIntact(t, kept, keptIno, true)
		})
	}
}
