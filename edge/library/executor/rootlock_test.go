package executor_test

import (
	"context"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"

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
