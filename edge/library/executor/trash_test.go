package executor_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"

	"github.com/vesta-cx/euterpe/edge/library/executor"
	"github.com/vesta-cx/euterpe/edge/library/pathsafe"
	"github.com/vesta-cx/euterpe/edge/library/policy"
	"github.com/vesta-cx/euterpe/edge/library/store"
)

// otherFilesystemDir returns a fresh directory on a filesystem other than
// that of dir, or "" when none is available.
func otherFilesystemDir(t *testing.T, dir string) string {
	t.Helper()
	var a, b syscall.Stat_t
	if syscall.Stat(dir, &a) != nil || syscall.Stat("/dev/shm", &b) != nil || a.Dev == b.Dev {
		return ""
	}
	d, err := os.MkdirTemp("/dev/shm", "euterpe-trash-")
	if err != nil {
		return ""
	}
	t.Cleanup(func() { os.RemoveAll(d) })
	return d
}

func TestDeleteTrashAcrossFilesystems(t *testing.T) {
	cases := []struct {
		name string
		// rename replaces the trash rename.
		rename func(oldpath, newpath string) error
		// otherFS puts the trash on another real filesystem.
		otherFS bool
		// occupy creates the trash destination before the job runs.
		occupy  bool
		trashed bool
	}{
		{name: "EXDEV falls back to copy and remove", rename: exdev, trashed: true},
		{name: "trash on another real filesystem", otherFS: true, trashed: true},
		{name: "other rename errors refuse the deletion", rename: func(o, n string) error {
			return &os.LinkError{Op: "rename", Old: o, New: n, Err: syscall.EPERM}
		}},
		{name: "EXDEV copy never overwrites an existing trash file", rename: exdev, occupy: true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			e := newEnv(t, true)
			ctx := context.Background()
			if c.otherFS {
				d := otherFilesystemDir(t, e.root)
				if d == "" {
					t.Skip("no second filesystem (/dev/shm is on the same device as the temp directory)")
				}
				trash, err := pathsafe.NewDir(d)
				if err != nil {
					t.Fatal(err)
				}
				e.x.Trash = trash
				// the real rename, observed: it must fail with EXDEV here
				c.rename = func(o, n string) error {
					err := os.Rename(o, n)
					if !errors.Is(err, syscall.EXDEV) {
						t.Errorf("rename across filesystems: %v, want EXDEV", err)
					}
					return err
				}
			}
			var renames int
			if c.rename != nil {
				executor.SetRename(e.x, func(o, n string) error { renames++; return c.rename(o, n) })
			}
			a := e.write("a.bin", "duplicate bytes")
			b := e.write("dir/b.bin", "duplicate bytes")
			e.scanAndHash()
			fa, fb := e.file(a), e.file(b)
			j, err := e.p.RequestDelete(ctx, groupOf(t, fa), policy.DeleteRequest{KeepFileIDs: []int64{fa.ID}, DeleteFileIDs: []int64{fb.ID}})
			if err != nil {
				t.Fatal(err)
			}
			dst := filepath.Join(e.x.Trash.Path(), strconv.FormatInt(j.ID, 10), strconv.FormatInt(fb.ID, 10), "b.bin")
			if c.occupy {
				os.MkdirAll(filepath.Dir(dst), 0o755)
				os.WriteFile(dst, []byte("earlier"), 0o644)
			}
			got := e.runJob()
			if c.rename != nil && renames != 1 {
				t.Fatalf("rename called %d times", renames)
			}
			d := decisions(t, e, j.ID)[fb.ID]
			if !c.trashed {
				if got.Status != store.StatusFailed || deref(got.ErrorCode) != executor.CodeDeleteRefused || d.Decision != executor.DecisionRefused {
					t.Fatalf("job %s %s, decision %+v", got.Status, deref(got.ErrorCode), d)
				}
				if data, err := os.ReadFile(b); err != nil || string(data) != "duplicate bytes" {
					t.Fatalf("original changed: %q %v", data, err)
				}
				if e.file(b).IsMissing {
					t.Fatal("refused file marked missing")
				}
				if c.occupy {
					if data, _ := os.ReadFile(dst); string(data) != "earlier" {
						t.Fatalf("existing trash file overwritten: %q", data)
					}
				} else if _, err := os.Stat(dst); !errors.Is(err, os.ErrNotExist) {
					t.Fatalf("trash file left behind: %v", err)
				}
				return
			}
			if got.Status != store.StatusCompleted || d.Decision != executor.DecisionTrashed || d.TrashPath == nil || *d.TrashPath != dst {
				t.Fatalf("job %s, decision %+v, want trashed to %s", got.Status, d, dst)
			}
			if _, err := os.Lstat(b); !errors.Is(err, os.ErrNotExist) {
				t.Fatalf("original still present: %v", err)
			}
			if data, err := os.ReadFile(dst); err != nil || string(data) != "duplicate bytes" {
				t.Fatalf("trash copy %q %v", data, err)
			}
			if data, _ := os.ReadFile(a); string(data) != "duplicate bytes" {
				t.Fatal("kept copy touched")
			}
			if !e.file(b).IsMissing {
				t.Fatal("trashed file not marked missing")
			}
		})
	}
}
