package executor_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/vesta-cx/euterpe/daemon/testsvc"
	"github.com/vesta-cx/euterpe/edge/library/executor"
	"github.com/vesta-cx/euterpe/edge/library/pathsafe"
	"github.com/vesta-cx/euterpe/edge/library/store"
)

// crossFilesystem puts e's trash on another filesystem: a real one
// (/dev/shm) when real is set, else one faked by a rename answering EXDEV.
// It returns false when no real second filesystem is available.
func crossFilesystem(t *testing.T, e *env, real bool) bool {
	t.Helper()
	if !real {
		crossDevice(e.x)
		return true
	}
	d := otherFilesystemDir(t, e.root)
	if d == "" {
		return false
	}
	trash, err := pathsafe.NewDir(d)
	if err != nil {
		t.Fatal(err)
	}
	e.x.Trash = trash
	return true
}

func writeAt(path string, off int64, b []byte) error {
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	if err != nil {
		return err
	}
	if _, err := f.WriteAt(b, off); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// TestDeleteStagedCopyMatchesWhatWasChecked changes the file to delete
// while it is being copied to a trash on another filesystem: after its
// last check and before the copy (a writer that had it open), or after
// the copy was read and before the staged name is unlinked. The original
// is unlinked only when the copy holds the content the delete authorised
// and the file did not change meanwhile; otherwise the changed file is
// put back at its path, whole, no copy is left in the trash, and the
// deletion is refused.
func TestDeleteStagedCopyMatchesWhatWasChecked(t *testing.T) {
	cases := []struct {
		name string
		// beforeMove changes del after its last check; copied changes the
		// staged file once the copy is written. Each returns the content
		// the file holds afterwards.
		beforeMove func(t *testing.T, del string) string
		copied     func(t *testing.T, staged string) string
	}{
		{name: "rewritten in place before the copy", beforeMove: func(t *testing.T, del string) string {
			mustSwap(t, func() error { return writeAt(del, 0, []byte("DUPLICATE")) })
			return "DUPLICATE" + dupContent[9:]
		}},
		{name: "truncated before the copy", beforeMove: func(t *testing.T, del string) string {
			mustSwap(t, func() error { return os.Truncate(del, 3) })
			return dupContent[:3]
		}},
		{name: "rewritten in place after the copy", copied: func(t *testing.T, staged string) string {
			mustSwap(t, func() error { return writeAt(staged, 0, []byte("DUPLICATE")) })
			return "DUPLICATE" + dupContent[9:]
		}},
		{name: "grown after the copy", copied: func(t *testing.T, staged string) string {
			mustSwap(t, func() error { return writeAt(staged, int64(len(dupContent)), []byte(", and more")) })
			return dupContent + ", and more"
		}},
	}
	for _, real := range []bool{false, true} {
		for _, c := range cases {
			name := c.name + "/injected EXDEV"
			if real {
				name = c.name + "/real second filesystem"
			}
			t.Run(name, func(t *testing.T) {
				e := newEnv(t, true)
				kept, del, fk, fd := dupPair(t, e)
				keptIno, delIno := inode(t, kept), inode(t, del)
				if !crossFilesystem(t, e, real) {
					t.Skip("no second filesystem (/dev/shm is on the same device as the temp directory)")
				}
				var want string
				if c.beforeMove != nil {
					executor.SetDeleteHooks(e.x, nil, func(p string) {
						if p == del {
							want = c.beforeMove(t, del)
						}
					})
				}
				if c.copied != nil {
					executor.SetStagedStep(e.x, func(step, p string) {
						if step == "copied" {
							want = c.copied(t, p)
						}
					})
				}
				j := requestPair(t, e, fk, fd, false)
				e.runJob()
				if want == "" {
					t.Fatal("the change was never made")
				}
				d := decisions(t, e, j.ID)[fd.ID]
				if d.Decision != executor.DecisionRefused {
					t.Fatalf("decision %+v, want refused: the trash would hold another content than the file's", d)
				}
				if data, err := os.ReadFile(del); err != nil || string(data) != want || inode(t, del) != delIno {
					t.Fatalf("changed file not back in place: %q %v", data, err)
				}
				if staged, _ := filepath.Glob(filepath.Join(filepath.Dir(del), ".euterpe-delete-*")); len(staged) != 0 {
					t.Fatalf("staged files left: %v", staged)
				}
				if n := trashFiles(t, e); n != 0 {
					t.Fatalf("%d trash files left for a refused delete", n)
				}
				keptIntact(t, kept, keptIno, true)
			})
		}
	}
}

// TestDeleteStagedCopyKeepsModeOwnerAndTimes: a copy into a trash on
// another filesystem carries the file's permissions, owner and times, as
// a rename within one filesystem does. A private file (0600) must not
// become readable to others in the trash, and a restore from the trash
// gets the file back as it was.
func TestDeleteStagedCopyKeepsModeOwnerAndTimes(t *testing.T) {
	for _, real := range []bool{false, true} {
		for _, mode := range []os.FileMode{0o600, 0o444, 0o755} {
			t.Run(strconv.FormatBool(real)+"/"+mode.String(), func(t *testing.T) {
				e := newEnv(t, true)
				if !crossFilesystem(t, e, real) {
					t.Skip("no second filesystem (/dev/shm is on the same device as the temp directory)")
				}
				kept := e.write("k/f.bin", dupContent)
				del := e.write("d/f.bin", dupContent)
				mtime := time.Date(2011, 3, 4, 5, 6, 7, 890123456, time.UTC)
				atime := time.Date(2012, 1, 2, 3, 4, 5, 600000000, time.UTC)
				uid, gid := os.Getuid(), os.Getgid()
				if uid == 0 {
					uid, gid = 4321, 8765
				}
				mustSwap(t, func() error { return os.Chmod(del, mode) },
					func() error { return os.Chown(del, uid, gid) },
					func() error { return os.Chtimes(kept, atime, mtime) },
					func() error { return os.Chtimes(del, atime, mtime) })
				e.scanAndHash()
				fk, fd := e.file(kept), e.file(del)
				j := requestPair(t, e, fk, fd, false)
				if got := e.runJob(); got.Status != store.StatusCompleted {
					t.Fatalf("job %s: %s", got.Status, deref(got.ErrorMessage))
				}
				d := decisions(t, e, j.ID)[fd.ID]
				if d.Decision != executor.DecisionTrashed {
					t.Fatalf("decision %+v", d)
				}
				var st syscall.Stat_t
				if err := syscall.Lstat(*d.TrashPath, &st); err != nil {
					t.Fatal(err)
				}
				if got := os.FileMode(st.Mode & 0o777); got != mode {
					t.Errorf("trash copy mode %v, want %v", got, mode)
				}
				if int(st.Uid) != uid || int(st.Gid) != gid {
					t.Errorf("trash copy owner %d:%d, want %d:%d", st.Uid, st.Gid, uid, gid)
				}
				// (not the atime: the delete's own re-hash reads the file)
				if got := time.Unix(st.Mtim.Unix()); !got.Equal(mtime) {
					t.Errorf("trash copy mtime %v, want %v", got, mtime)
				}
			})
		}
	}
}

// TestDeleteRerunStoppedWhileFinishingStaged stops the re-run of a delete
// killed with its file staged and its copy in the trash complete, while
// that re-run checks the two (hashing a large file takes a while, and a
// daemon stop or a lost lease can come then). The stop must leave the
// state as it found it, not put the file back beside its complete copy:
// a run after that would find the trash name taken and refuse the file
// for good. The next run finishes the move, and gives the copy the
// file's metadata, which the killed run may not have got to.
func TestDeleteRerunStoppedWhileFinishingStaged(t *testing.T) {
	e := newEnv(t, false) // the re-run goes through the policy's requeue
	kept, del, fk, fd := dupPair(t, e)
	keptIno := inode(t, kept)
	clock := fixClock(e)
	crossFilesystem(t, e, false)
	j := requestPair(t, e, fk, fd, false)
	dst := filepath.Join(e.x.Trash.Path(), strconv.FormatInt(j.ID, 10), strconv.FormatInt(fd.ID, 10), filepath.Base(del))
	staged := stagedPath(del, j.ID, fd.ID)
	orig, err := os.Lstat(del)
	if err != nil {
		t.Fatal(err)
	}
	// The copy as a kill before copyInto gave it the file's metadata
	// leaves it: its maker's, 0600, written just now.
	mustSwap(t, func() error { return os.MkdirAll(filepath.Dir(dst), 0o750) },
		func() error { return os.Rename(del, staged) },
		func() error { return os.WriteFile(dst, []byte(dupContent), 0o600) })

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	executor.SetStagedStep(e.x, func(step, _ string) {
		if step == "recovering" {
			cancel()
		}
	})
	if did, err := e.x.RunJobOnce(ctx); !did || !errors.Is(err, context.Canceled) {
		t.Fatalf("RunJobOnce did=%v err=%v, want the cancellation", did, err)
	}
	if got := decisionsOf(t, e, j.ID, fd.ID); len(got) != 0 {
		t.Fatalf("stopped run recorded %v", got)
	}
	if _, err := os.Lstat(staged); err != nil {
		t.Fatalf("staged file not left for the next run: %v", err)
	}
	executor.SetStagedStep(e.x, nil)
	if j2 := rerun(t, e, clock, j.ID); j2.Status != store.StatusCompleted {
		t.Fatalf("re-run: job %s %s", j2.Status, deref(j2.ErrorMessage))
	}
	d := decisions(t, e, j.ID)[fd.ID]
	if d.Decision != executor.DecisionTrashed || deref(d.TrashPath) != dst {
		t.Fatalf("decision %+v, want trashed to %s", d, dst)
	}
	if data, err := os.ReadFile(dst); err != nil || string(data) != dupContent {
		t.Fatalf("trash copy %q %v", data, err)
	}
	if st, err := os.Lstat(dst); err != nil || st.Mode() != orig.Mode() || !st.ModTime().Equal(orig.ModTime()) {
		t.Fatalf("trash copy %v %v, want the file's mode %v and mtime %v", st.Mode(), st.ModTime(), orig.Mode(), orig.ModTime())
	}
	for _, p := range []string{del, staged} {
		if _, err := os.Lstat(p); !errors.Is(err, os.ErrNotExist) {
			t.Fatalf("%s still present: %v", p, err)
		}
	}
	keptIntact(t, kept, keptIno, true)
}

// TestDeleteStagedTrashFilesystemFull puts the trash on a tmpfs too small
// for the file to delete: the copy fails with ENOSPC part way, and the
// delete must remove what it wrote, put the file back (the same file, at
// its name) and refuse, naming the cause. It runs as root in a child test
// process inside a private mount namespace.
func TestDeleteStagedTrashFilesystemFull(t *testing.T) {
	testsvc.InMountNamespace(t, func(t *testing.T) {
		e := newEnv(t, true)
		content := strings.Repeat("a large duplicate ", 64<<10/18+1)
		kept := e.write("k/big.bin", content)
		del := e.write("d/big.bin", content)
		mtime := time.Date(2020, 1, 2, 3, 4, 5, 0, time.UTC)
		mustSwap(t, func() error { return os.Chtimes(kept, mtime, mtime) },
			func() error { return os.Chtimes(del, mtime, mtime) })
		e.scanAndHash()
		fk, fd := e.file(kept), e.file(del)
		keptIno, delIno := inode(t, kept), inode(t, del)
		small := filepath.Join(e.state, "small-trash")
		mustSwap(t, func() error { return os.Mkdir(small, 0o750) },
			func() error { return syscall.Mount("tmpfs", small, "tmpfs", 0, "size=16k") })
		t.Cleanup(func() { syscall.Unmount(small, syscall.MNT_DETACH) })
		trash, err := pathsafe.NewDir(small)
		if err != nil {
			t.Fatal(err)
		}
		e.x.Trash = trash
		j := requestPair(t, e, fk, fd, false)
		e.runJob()
		d := decisions(t, e, j.ID)[fd.ID]
		if d.Decision != executor.DecisionRefused || !strings.Contains(d.Reason, "no space left on device") {
			t.Fatalf("decision %+v, want refused for ENOSPC", d)
		}
		if data, err := os.ReadFile(del); err != nil || string(data) != content || inode(t, del) != delIno {
			t.Fatalf("file not back in place whole: %d bytes, %v", len(data), err)
		}
		if staged, _ := filepath.Glob(filepath.Join(filepath.Dir(del), ".euterpe-delete-*")); len(staged) != 0 {
			t.Fatalf("staged files left: %v", staged)
		}
		if n := trashFiles(t, e); n != 0 {
			t.Fatalf("%d partial copies left in the trash", n)
		}
		if data, err := os.ReadFile(kept); err != nil || string(data) != content || inode(t, kept) != keptIno {
			t.Fatalf("kept file changed: %d bytes, %v", len(data), err)
		}
	})
}

// TestDeleteStagedNameSwappedDuringCopy puts another entry at the staging
// name while the file is copied to a trash on another filesystem (a copy
// of a large file to a slow disk takes minutes): the kept file itself
// moved there, a new file, a directory. The staged name is unlinked only
// while it is still the file that was staged and copied; otherwise the
// delete is refused, the copy removed, and what was swapped in is put
// back at the file's name, never unlinked.
func TestDeleteStagedNameSwappedDuringCopy(t *testing.T) {
	for _, c := range []struct {
		name string
		// swap replaces the staged entry and returns the path that must
		// afterwards name what it put there.
		swap func(t *testing.T, staged, kept, del string) string
	}{
		{name: "the kept file moved over the staged name", swap: func(t *testing.T, staged, kept, _ string) string {
			mustSwap(t, func() error { return os.Rename(kept, staged) })
			return kept
		}},
		{name: "a new file of the user's", swap: func(t *testing.T, staged, _, del string) string {
			mustSwap(t, func() error { return os.Rename(staged, del+".moved") },
				func() error { return os.WriteFile(staged, []byte("the user's own file"), 0o644) })
			return ""
		}},
		{name: "a directory", swap: func(t *testing.T, staged, _, del string) string {
			mustSwap(t, func() error { return os.Rename(staged, del+".moved") },
				func() error { return os.Mkdir(staged, 0o755) })
			return ""
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			e := newEnv(t, true)
			kept, del, fk, fd := dupPair(t, e)
			crossFilesystem(t, e, false)
			var swapped os.FileInfo
			var from string
			executor.SetStagedStep(e.x, func(step, p string) {
				if step != "copied" {
					return
				}
				from = c.swap(t, p, kept, del)
				var err error
				if swapped, err = os.Lstat(p); err != nil {
					t.Fatal(err)
				}
			})
			j := requestPair(t, e, fk, fd, false)
			e.runJob()
			if swapped == nil {
				t.Fatal("the swap was never made")
			}
			if d := decisions(t, e, j.ID)[fd.ID]; d.Decision != executor.DecisionRefused {
				t.Fatalf("decision %+v, want refused", d)
			}
			back, err := os.Lstat(del)
			if err != nil || !os.SameFile(back, swapped) {
				t.Fatalf("the entry swapped in was not put back at %s: %v", del, err)
			}
			if from == kept {
				if data, err := os.ReadFile(del); err != nil || string(data) != dupContent {
					t.Fatalf("kept file: %q %v", data, err)
				}
			}
			if n := trashFiles(t, e); n != 0 {
				t.Fatalf("%d trash files left for a refused delete", n)
			}
		})
	}
}

// TestDeleteRerunStagedNameSwappedWhileChecked moves the kept file over
// the staging name while the re-run of a delete killed with its file
// staged and copied checks the two: the re-run unlinks the staged name
// only while it is still the file it hashed, so the kept file survives
// (put back at the deleted file's name) and the deletion is refused.
func TestDeleteRerunStagedNameSwappedWhileChecked(t *testing.T) {
	e := newEnv(t, true)
	kept, del, fk, fd := dupPair(t, e)
	keptIno := inode(t, kept)
	crossFilesystem(t, e, false)
	j := requestPair(t, e, fk, fd, false)
	dst := filepath.Join(e.x.Trash.Path(), strconv.FormatInt(j.ID, 10), strconv.FormatInt(fd.ID, 10), filepath.Base(del))
	staged := stagedPath(del, j.ID, fd.ID)
	mustSwap(t, func() error { return os.MkdirAll(filepath.Dir(dst), 0o750) },
		func() error { return os.Rename(del, staged) },
		func() error { return os.WriteFile(dst, []byte(dupContent), 0o600) })
	executor.SetStagedStep(e.x, func(step, p string) {
		if step == "recovering" {
			mustSwap(t, func() error { return os.Rename(kept, p) })
		}
	})
	e.runJob()
	if d := decisions(t, e, j.ID)[fd.ID]; d.Decision != executor.DecisionRefused {
		t.Fatalf("decision %+v, want refused", d)
	}
	keptIntact(t, del, keptIno, true)
	if data, err := os.ReadFile(dst); err != nil || string(data) != dupContent {
		t.Fatalf("trash copy %q %v", data, err)
	}
}
