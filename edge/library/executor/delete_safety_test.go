package executor_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/vesta-cx/euterpe/daemon/testsvc"
	"github.com/vesta-cx/euterpe/edge/library/executor"
	"github.com/vesta-cx/euterpe/edge/library/pathsafe"
	"github.com/vesta-cx/euterpe/edge/library/policy"
	"github.com/vesta-cx/euterpe/edge/library/store"
	"github.com/vesta-cx/euterpe/edge/library/trash"
)

const dupContent = "duplicate bytes, copied with cp -p"

// dupPair writes root/k/f.bin (to keep) and root/d/f.bin (to delete) with
// the same bytes and the same mtime, as `cp -p` leaves them, scans and
// hashes them, and returns their paths and rows.
func dupPair(t *testing.T, e *env) (kept, del string, fk, fd store.File) {
	t.Helper()
	return dupPairAt(t, e, filepath.Join(e.root, "k/f.bin"), filepath.Join(e.root, "d/f.bin"))
}

// dupPairAt is dupPair with the files at kept and del, paths under any of
// the executor's roots.
func dupPairAt(t *testing.T, e *env, kept, del string) (string, string, store.File, store.File) {
	t.Helper()
	for _, p := range []string{kept, del} {
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(dupContent), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	st, err := os.Stat(kept)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Chtimes(del, st.ModTime(), st.ModTime()); err != nil {
		t.Fatal(err)
	}
	e.scanAndHash()
	fk, fd := e.file(kept), e.file(del)
	if *fk.ContentHash != *fd.ContentHash {
		t.Fatal("pair not in one group")
	}
	return kept, del, fk, fd
}

func inode(t *testing.T, p string) uint64 {
	t.Helper()
	var st syscall.Stat_t
	if err := syscall.Lstat(p, &st); err != nil {
		t.Fatalf("lstat %s: %v", p, err)
	}
	return st.Ino
}

// mustSwap runs a filesystem change and fails the test if it does not apply.
func mustSwap(t *testing.T, steps ...func() error) {
	t.Helper()
	for _, s := range steps {
		if err := s(); err != nil {
			t.Fatal(err)
		}
	}
}

// keptIntact checks the kept path still holds the same bytes and, unless
// the case replaced the kept path itself, is still the very same regular
// file (same inode) it was before the delete.
func keptIntact(t *testing.T, kept string, ino uint64, sameInode bool) {
	t.Helper()
	data, err := os.ReadFile(kept)
	if err != nil || string(data) != dupContent {
		t.Fatalf("kept file %s: %q %v", kept, data, err)
	}
	if !sameInode {
		return
	}
	st, err := os.Lstat(kept)
	if err != nil || !st.Mode().IsRegular() {
		t.Fatalf("kept file %s is no longer a regular file: %v %v", kept, st, err)
	}
	if got := inode(t, kept); got != ino {
		t.Fatalf("kept file %s is inode %d, was %d", kept, got, ino)
	}
}

// TestDeleteAdversarialFilesystem changes the filesystem between the scan
// and the delete, or at the last moments of the delete, in every way that
// could make a delete remove the kept copy; each case runs with the trash
// and with permanent removal. The kept file must come out byte-identical.
func TestDeleteAdversarialFilesystem(t *testing.T) {
	type paths struct{ root, kept, del string }
	cases := []struct {
		name string
		// before runs after the scan and hash, before the job.
		before func(p paths) error
		// atCheck and atMove run inside the delete (see SetDeleteHooks).
		atCheck, atMove func(p paths) error
		// deleted: the delete goes through (the file removed is the verified duplicate).
		deleted bool
		// keptReplaced: the case replaced the kept path itself; keptMoved:
		// it renamed the kept file to this suffix.
		keptReplaced bool
		keptMoved    string
		reason       string
	}{
		{name: "plain duplicate", deleted: true},
		{
			name:   "delete path replaced by a symlink to the kept file",
			before: func(p paths) error { return relink(p.del, p.kept) },
			reason: "symlink",
		},
		{
			name:         "kept path replaced by a symlink to the file to delete",
			before:       func(p paths) error { return relink(p.kept, p.del) },
			keptReplaced: true,
			reason:       "no kept copy",
		},
		{
			name: "delete path is a hard link of the kept file",
			before: func(p paths) error {
				if err := os.Remove(p.del); err != nil {
					return err
				}
				return os.Link(p.kept, p.del)
			},
			reason: "same file as kept",
		},
		{
			name: "parent directory of the delete path replaced by a symlink to the kept directory",
			before: func(p paths) error {
				if err := os.RemoveAll(filepath.Dir(p.del)); err != nil {
					return err
				}
				return os.Symlink(filepath.Dir(p.kept), filepath.Dir(p.del))
			},
			reason: "resolves",
		},
		{
			name: "path outside the roots",
			before: func(p paths) error {
				out := filepath.Join(filepath.Dir(p.root), "outside", "f.bin")
				if err := os.WriteFile(out, []byte(dupContent), 0o644); err != nil {
					return err
				}
				return relink(p.del, out)
			},
			reason: "symlink",
		},
		{
			name:    "symlink to the kept file swapped in right before the last check",
			atCheck: func(p paths) error { return relink(p.del, p.kept) },
			reason:  "symlink",
		},
		{
			name: "hard link of the kept file swapped in right before the last check",
			atCheck: func(p paths) error {
				if err := os.Remove(p.del); err != nil {
					return err
				}
				return os.Link(p.kept, p.del)
			},
			reason: "swapped",
		},
		{
			name: "hard link of the kept file swapped in between the last check and the move",
			atMove: func(p paths) error {
				if err := os.Rename(p.del, p.del+".orig"); err != nil {
					return err
				}
				return os.Link(p.kept, p.del)
			},
			reason: "swapped between the check and the move",
		},
		{
			name: "kept file moved away right before the last check",
			atCheck: func(p paths) error {
				return os.Rename(p.kept, p.kept+".moved")
			},
			keptReplaced: true,
			keptMoved:    ".moved",
			reason:       "no kept copy is still in place",
		},
		{
			// The move acts on the directory opened when the file was pinned,
			// never on the path: the verified duplicate itself is removed,
			// and the kept file (now also reachable at the old path) is not.
			name: "parent directory swapped for a symlink to the kept directory between the last check and the move",
			atMove: func(p paths) error {
				d := filepath.Dir(p.del)
				if err := os.Rename(d, d+".old"); err != nil {
					return err
				}
				return os.Symlink(filepath.Dir(p.kept), d)
			},
			deleted: true,
		},
	}
	for _, exdev := range []bool{false, true} {
		for _, noReplace := range []bool{true, false} {
			for _, permanent := range []bool{false, true} {
				for _, c := range cases {
					name := c.name + "/trash"
					if permanent {
						name = c.name + "/permanent"
					}
					if !noReplace {
						name += "/without RENAME_NOREPLACE"
					}
					if exdev {
						name += "/trash on another filesystem"
					}
					t.Run(name, func(t *testing.T) {
						if !noReplace {
							executor.WithoutRenameNoReplace(t)
						}
						e := newEnv(t, true)
						if exdev {
							// the staged move: renamed aside in its own directory, copied, unlinked
							crossDevice(e.x)
						}
						kept, del, fk, fd := dupPair(t, e)
						p := paths{root: e.root, kept: kept, del: del}
						keptIno, delIno := inode(t, kept), inode(t, del)
						if c.before != nil {
							mustSwap(t, func() error { return c.before(p) })
						}
						hook := func(f func(paths) error) func(string) {
							if f == nil {
								return nil
							}
							return func(path string) {
								if path == del {
									mustSwap(t, func() error { return f(p) })
								}
							}
						}
						executor.SetDeleteHooks(e.x, hook(c.atCheck), hook(c.atMove))
						j := requestPair(t, e, fk, fd, permanent)
						got := e.runJob()
						d := decisions(t, e, j.ID)[fd.ID]
						if c.keptReplaced {
							// The original kept inode may be at another name now; whatever
							// the kept path names still reads the same bytes, and the
							// file to delete is still there.
							keptIntact(t, kept+c.keptMoved, 0, false)
							if data, err := os.ReadFile(del); err != nil || string(data) != dupContent {
								t.Fatalf("file to delete lost while no kept copy was verified: %q %v", data, err)
							}
						} else {
							keptIntact(t, kept, keptIno, true)
						}
						if staged, _ := filepath.Glob(filepath.Join(filepath.Dir(del)+"*", ".euterpe-delete-*")); len(staged) != 0 {
							t.Fatalf("staged files left: %v", staged)
						}
						if !c.deleted {
							if got.Status != store.StatusFailed || d.Decision != executor.DecisionRefused {
								t.Fatalf("job %s, decision %+v: want refused", got.Status, d)
							}
							if !strings.Contains(d.Reason, c.reason) {
								t.Fatalf("reason %q, want it to mention %q", d.Reason, c.reason)
							}
							if n := trashFiles(t, e); n != 0 {
								t.Fatalf("%d files in the trash after a refused delete", n)
							}
							return
						}
						want := executor.DecisionTrashed
						if permanent {
							want = executor.DecisionRemoved
						}
						if got.Status != store.StatusCompleted || d.Decision != want {
							t.Fatalf("job %s, decision %+v: want %s", got.Status, d, want)
						}
						if permanent {
							if d.TrashPath != nil || trashFiles(t, e) != 0 {
								t.Fatal("permanent delete left a trash copy")
							}
							return
						}
						if got := inode(t, *d.TrashPath); got != delIno && !exdev {
							t.Fatalf("trash holds inode %d, want the verified duplicate %d", got, delIno)
						}
						if data, _ := os.ReadFile(*d.TrashPath); string(data) != dupContent {
							t.Fatalf("trash copy %q", data)
						}
					})
				}
			}
		}
	}
}

// relink replaces path with a symlink to target (ln -sf target path).
func relink(path, target string) error {
	if err := os.Remove(path); err != nil {
		return err
	}
	return os.Symlink(target, path)
}

// trashFiles counts regular files under the trash (the lock file aside).
func trashFiles(t *testing.T, e *env) int {
	t.Helper()
	n := 0
	err := filepath.WalkDir(e.x.Trash.Path(), func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.Type().IsRegular() && d.Name() != ".delete.lock" {
			n++
		}
		return nil
	})
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		t.Fatal(err)
	}
	return n
}

// TestDeleteConcurrentRequestsKeepLastCopy runs two delete jobs of one
// group at once on two executors: one keeps a and deletes b, the other
// keeps b and deletes a. Both verify their files before either acts (a
// barrier holds them there), so each sees the other's victim as its kept
// copy; the delete lock and the kept-copy re-check let only one act. One
// copy always remains, byte-identical, also when the second executor (a
// second process on the library) has a trash directory of its own: the
// lock on the library root keeps them apart then.
func TestDeleteConcurrentRequestsKeepLastCopy(t *testing.T) {
	for _, c := range []struct {
		permanent, ownTrash bool
	}{{false, false}, {true, false}, {false, true}, {true, true}} {
		permanent := c.permanent
		for round := 0; round < 5; round++ {
			e := newEnv(t, true)
			a, b, fa, fb := dupPair(t, e)
			inoA, inoB := inode(t, a), inode(t, b)
			// ownTrash: the second executor is a process with a trash
			// directory of its own on the same library.
			tr := e.x.Trash
			if c.ownTrash {
				var err error
				if tr, err = pathsafe.NewDir(filepath.Join(t.TempDir(), "trash2")); err != nil {
					t.Fatal(err)
				}
			}
			x2 := &executor.Executor{Store: e.st, Roots: e.x.Roots, Thumbs: e.x.Thumbs, Trash: tr, Log: e.x.Log,
				WorkerID: "second-worker", LeaseTTL: e.x.LeaseTTL, Poll: e.x.Poll, Retry: e.x.Retry}
			var barrier sync.WaitGroup
			barrier.Add(2)
			wait := func(string) {
				barrier.Done()
				done := make(chan struct{})
				go func() { barrier.Wait(); close(done) }()
				select {
				case <-done:
				case <-time.After(5 * time.Second):
					t.Error("the two deletes did not both reach the act")
				}
			}
			executor.SetAfterVerify(e.x, wait)
			executor.SetAfterVerify(x2, wait)
			k := groupOf(t, fa)
			ctx := context.Background()
			j1, err := e.p.RequestDelete(ctx, k, policy.DeleteRequest{KeepFileIDs: []int64{fa.ID}, DeleteFileIDs: []int64{fb.ID}, Permanent: permanent})
			if err != nil {
				t.Fatal(err)
			}
			j2, err := e.p.RequestDelete(ctx, k, policy.DeleteRequest{KeepFileIDs: []int64{fb.ID}, DeleteFileIDs: []int64{fa.ID}, Permanent: permanent})
			if err != nil {
				t.Fatal(err)
			}
			var wg sync.WaitGroup
			for _, x := range []*executor.Executor{e.x, x2} {
				wg.Add(1)
				go func() {
					defer wg.Done()
					if did, err := x.RunJobOnce(ctx); !did || err != nil {
						t.Errorf("RunJobOnce did=%v err=%v", did, err)
					}
				}()
			}
			wg.Wait()
			var left []string
			for _, p := range []struct {
				path string
				ino  uint64
			}{{a, inoA}, {b, inoB}} {
				if _, err := os.Lstat(p.path); err == nil {
					keptIntact(t, p.path, p.ino, true)
					left = append(left, p.path)
				}
			}
			if len(left) != 1 {
				t.Fatalf("%+v round %d: %d copies left (%v), want exactly 1", c, round, len(left), left)
			}
			won := 0
			for _, id := range []int64{j1.ID, j2.ID} {
				j, _ := e.st.GetJob(ctx, id)
				if j.Status == store.StatusCompleted {
					won++
				}
			}
			if won != 1 {
				t.Fatalf("%d delete jobs completed, want 1", won)
			}
		}
	}
}

// TestDeleteRefusesBindMountedCopy bind-mounts one copy's directory (or
// the file itself) over the other's, in both directions: the paths are
// then symlink-free and look like two files, but name one inode, and the
// delete must be refused by the device and inode comparison. Mounting
// needs root; the cases run in a child test process inside a private mount
// namespace (unshare --mount), so no mount is visible outside it.
func TestDeleteRefusesBindMountedCopy(t *testing.T) {
	testsvc.InMountNamespace(t, bindMountCases)
}

func bindMountCases(t *testing.T) {
	// A root configured twice, as itself and through a bind mount: a
	// delete that keeps a file named through one and deletes one named
	// through the other locks that directory once, not twice (two flocks
	// of one directory conflict even in one process: it would wait for
	// itself for ever).
	t.Run("a root mounted twice is locked once", func(t *testing.T) {
		e := newEnv(t, true)
		alias := filepath.Join(t.TempDir(), "alias")
		if err := os.Mkdir(alias, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := syscall.Mount(e.root, alias, "", syscall.MS_BIND, ""); err != nil {
			t.Fatalf("bind mount: %v", err)
		}
		t.Cleanup(func() { syscall.Unmount(alias, syscall.MNT_DETACH) })
		roots, err := pathsafe.NewRoots([]string{e.root, alias})
		if err != nil {
			t.Fatal(err)
		}
		e.x.Roots = roots
		kept, del, _, fd := dupPair(t, e)
		aliasKept := filepath.Join(alias, strings.TrimPrefix(kept, e.root))
		fk := e.file(aliasKept)
		j := requestPair(t, e, fk, fd, false)
		done := make(chan store.Job, 1)
		go func() { done <- e.runJob() }()
		select {
		case got := <-done:
			if d := decisions(t, e, j.ID)[fd.ID]; got.Status != store.StatusCompleted || d.Decision != executor.DecisionTrashed {
				t.Fatalf("job %s, decision %+v", got.Status, d)
			}
		case <-time.After(20 * time.Second):
			t.Fatal("the delete waited for a lock it held itself")
		}
		if _, err := os.Lstat(del); !errors.Is(err, os.ErrNotExist) {
			t.Fatalf("the duplicate is still at its path: %v", err)
		}
		keptIntact(t, kept, 0, false)
	})
	cases := []struct {
		name string
		// mount returns the bind mount's source and target.
		mount func(kept, del string) (string, string)
	}{
		{"kept directory mounted over the delete directory", func(k, d string) (string, string) { return filepath.Dir(k), filepath.Dir(d) }},
		{"delete directory mounted over the kept directory", func(k, d string) (string, string) { return filepath.Dir(d), filepath.Dir(k) }},
		{"kept file mounted over the file to delete", func(k, d string) (string, string) { return k, d }},
	}
	for _, permanent := range []bool{false, true} {
		for _, c := range cases {
			mode := "/trash"
			if permanent {
				mode = "/permanent"
			}
			t.Run(c.name+mode, func(t *testing.T) {
				e := newEnv(t, true)
				kept, del, fk, fd := dupPair(t, e)
				src, dst := c.mount(kept, del)
				if err := syscall.Mount(src, dst, "", syscall.MS_BIND, ""); err != nil {
					t.Fatalf("bind mount: %v", err)
				}
				t.Cleanup(func() { syscall.Unmount(dst, syscall.MNT_DETACH) })
				if inode(t, kept) != inode(t, del) {
					t.Fatal("bind mount did not make both paths one file")
				}
				j := requestPair(t, e, fk, fd, permanent)
				got := e.runJob()
				d := decisions(t, e, j.ID)[fd.ID]
				if got.Status != store.StatusFailed || d.Decision != executor.DecisionRefused || !strings.Contains(d.Reason, "same file as kept") {
					t.Fatalf("job %s, decision %+v: want refused as the same file", got.Status, d)
				}
				keptIntact(t, kept, inode(t, kept), true)
				if err := syscall.Unmount(dst, 0); err != nil {
					t.Fatal(err)
				}
				// Both real copies are still there once the mount is gone.
				keptIntact(t, kept, 0, false)
				keptIntact(t, del, 0, false)
			})
		}
	}
}

// TestTrashRetentionEmptiesDeletedFiles: a trashed duplicate stays in the
// trash within the retention after the cleaner first sees it and is
// removed after it; the kept file and the rest of the library are
// untouched.
func TestTrashRetentionEmptiesDeletedFiles(t *testing.T) {
	e := newEnv(t, true)
	kept, del, fk, fd := dupPair(t, e)
	keptIno := inode(t, kept)
	other := e.write("other.txt", "unrelated")
	j, err := e.p.RequestDelete(context.Background(), groupOf(t, fk), policy.DeleteRequest{KeepFileIDs: []int64{fk.ID}, DeleteFileIDs: []int64{fd.ID}})
	if err != nil {
		t.Fatal(err)
	}
	if got := e.runJob(); got.Status != store.StatusCompleted {
		t.Fatalf("delete job %s", got.Status)
	}
	trashed := *decisions(t, e, j.ID)[fd.ID].TrashPath
	if _, err := os.Lstat(del); !errors.Is(err, os.ErrNotExist) {
		t.Fatal("duplicate not moved")
	}
	// The cleaner ages an entry from its first sweep on a synchronized
	// clock, the first step here.
	start := time.Now()
	cl := &trash.Cleaner{Dir: e.x.Trash.Path(), Retention: 30 * 24 * time.Hour, Synced: func() bool { return true }}
	for _, c := range []struct {
		after time.Duration
		gone  bool
	}{{0, false}, {29 * 24 * time.Hour, false}, {31 * 24 * time.Hour, true}} {
		cl.Now = func() time.Time { return start.Add(c.after) }
		if _, err := cl.Sweep(context.Background()); err != nil {
			t.Fatal(err)
		}
		if _, err := os.Lstat(trashed); errors.Is(err, os.ErrNotExist) != c.gone {
			t.Fatalf("after %s: trashed file gone=%v, want %v", c.after, !c.gone, c.gone)
		}
	}
	keptIntact(t, kept, keptIno, true)
	if data, _ := os.ReadFile(other); string(data) != "unrelated" {
		t.Fatal("library file touched")
	}
	if _, err := os.Stat(e.x.Trash.Path()); err != nil {
		t.Fatal("trash directory itself removed")
	}
}

// TestDeleteStagedAcrossFilesystems: with the trash on another filesystem
// (EXDEV), the file is first renamed aside inside its own directory and
// checked there. Permanent deletes unlink it from there; a swap caught
// there is renamed back; nothing is left behind under the staging name.
func TestDeleteStagedAcrossFilesystems(t *testing.T) {
	for _, c := range []struct {
		name      string
		permanent bool
		swap      bool
		want      string
	}{
		{name: "trash copy", want: executor.DecisionTrashed},
		{name: "permanent", permanent: true, want: executor.DecisionRemoved},
		{name: "hard link of the kept file swapped in before the move", swap: true, want: executor.DecisionRefused},
		{name: "permanent, hard link of the kept file swapped in before the move", permanent: true, swap: true, want: executor.DecisionRefused},
	} {
		t.Run(c.name, func(t *testing.T) {
			e := newEnv(t, true)
			kept, del, fk, fd := dupPair(t, e)
			keptIno := inode(t, kept)
			executor.SetRename(e.x, exdev)
			if c.swap {
				executor.SetDeleteHooks(e.x, nil, func(p string) {
					mustSwap(t, func() error { return os.Rename(del, del+".orig") }, func() error { return os.Link(kept, del) })
				})
			}
			j := requestPair(t, e, fk, fd, c.permanent)
			e.runJob()
			d := decisions(t, e, j.ID)[fd.ID]
			if d.Decision != c.want {
				t.Fatalf("decision %+v, want %s", d, c.want)
			}
			keptIntact(t, kept, keptIno, true)
			staged, _ := filepath.Glob(filepath.Join(filepath.Dir(del), ".euterpe-delete-*"))
			if len(staged) != 0 {
				t.Fatalf("staged files left: %v", staged)
			}
			switch {
			case c.swap:
				if inode(t, del) != keptIno {
					t.Fatal("the swapped-in name was not put back")
				}
				if trashFiles(t, e) != 0 {
					t.Fatal("trash written for a refused delete")
				}
			case c.permanent:
				if _, err := os.Lstat(del); !errors.Is(err, os.ErrNotExist) || trashFiles(t, e) != 0 {
					t.Fatalf("permanent delete: original %v, %d trash files", err, trashFiles(t, e))
				}
			default:
				if data, _ := os.ReadFile(*d.TrashPath); string(data) != dupContent {
					t.Fatalf("trash copy %q", data)
				}
			}
		})
	}
}
