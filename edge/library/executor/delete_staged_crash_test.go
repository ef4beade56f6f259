package executor_test

import (
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/vesta-cx/euterpe/edge/library/executor"
	"github.com/vesta-cx/euterpe/edge/library/store"
)

// TestDeleteRerunAfterCrashWhileStaged leaves the filesystem as a delete
// to a trash on another filesystem leaves it when killed (SIGKILL, power
// loss) at each step of its move: the file renamed to
// .euterpe-delete-<job>-<file> in its own directory, and in the trash
// nothing yet, part of the copy, or all of it. The re-run must end with
// exactly one copy of the file, in the trash (or none, permanent), no
// staged name left, and the kept file untouched; where it cannot put the
// file back, the staged name stays and the decision says where.
func TestDeleteRerunAfterCrashWhileStaged(t *testing.T) {
	cases := []struct {
		name      string
		permanent bool
		// trashCopy is what the trash entry holds at the crash: nil for
		// nothing (the entry directory only), else these bytes.
		trashCopy func() []byte
		// before changes the library after the crash (del: the path
		// deleted, kept: the kept path, staged: the staged path).
		before func(t *testing.T, del, kept, staged string)
		want   string
		// left: the staged name remains (and is named in the reason).
		left bool
	}{
		{name: "staged, nothing copied", want: executor.DecisionTrashed},
		{name: "staged, nothing copied, permanent", permanent: true, want: executor.DecisionRemoved},
		{name: "staged, copy cut short", trashCopy: func() []byte { return []byte(dupContent[:7]) }, want: executor.DecisionTrashed},
		{name: "staged, copy cut short, empty", trashCopy: func() []byte { return nil }, want: executor.DecisionTrashed},
		{name: "staged, copy complete", trashCopy: func() []byte { return []byte(dupContent) }, want: executor.DecisionTrashed},
		{name: "staged, trash holds other content", trashCopy: func() []byte { return []byte("other content, same len!!!!!!!!!!!") }, want: executor.DecisionRefused},
		{name: "staged, name taken by a new file", want: executor.DecisionRefused, left: true,
			before: func(t *testing.T, del, _, _ string) {
				if err := os.WriteFile(del, []byte("new file the user made"), 0o644); err != nil {
					t.Fatal(err)
				}
			}},
		// A put back on a filesystem without RENAME_NOREPLACE links the
		// staged file to its name, then removes the staged name.
		{name: "put back linked, staged name not yet removed", want: executor.DecisionTrashed,
			before: func(t *testing.T, del, _, staged string) {
				mustSwap(t, func() error { return os.Link(staged, del) })
			}},
		{name: "copy complete, then the staged name made a hard link of the kept file", want: executor.DecisionRefused,
			trashCopy: func() []byte { return []byte(dupContent) },
			before: func(t *testing.T, _, kept, staged string) {
				mustSwap(t, func() error { return os.Remove(staged) }, func() error { return os.Link(kept, staged) })
			}},
		{name: "staged a hard link of the kept file swapped in", want: executor.DecisionRefused,
			before: func(t *testing.T, _, kept, staged string) {
				mustSwap(t, func() error { return os.Remove(staged) }, func() error { return os.Link(kept, staged) })
			}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			e := newEnv(t, true)
			kept, del, fk, fd := dupPair(t, e)
			keptIno := inode(t, kept)
			crossDevice(e.x)
			j := requestPair(t, e, fk, fd, c.permanent)
			dst := filepath.Join(e.x.Trash.Path(), strconv.FormatInt(j.ID, 10), strconv.FormatInt(fd.ID, 10), filepath.Base(del))
			staged := stagedPath(del, j.ID, fd.ID)
			if err := os.MkdirAll(filepath.Dir(dst), 0o750); err != nil {
				t.Fatal(err)
			}
			if err := os.Rename(del, staged); err != nil {
				t.Fatal(err)
			}
			if c.trashCopy != nil {
				if err := os.WriteFile(dst, c.trashCopy(), 0o640); err != nil {
					t.Fatal(err)
				}
			}
			if c.before != nil {
				c.before(t, del, kept, staged)
			}
			got := e.runJob()
			d := decisions(t, e, j.ID)[fd.ID]
			if d.Decision != c.want {
				t.Fatalf("decision %+v, want %s", d, c.want)
			}
			if done := got.Status == store.StatusCompleted; done != (c.want != executor.DecisionRefused) {
				t.Fatalf("job %s after decision %s", got.Status, c.want)
			}
			keptIntact(t, kept, keptIno, true)
			_, err := os.Lstat(staged)
			if c.left {
				if err != nil || !strings.Contains(d.Reason, staged) {
					t.Fatalf("staged name: %v, reason %q: want it left and named", err, d.Reason)
				}
				if data, _ := os.ReadFile(del); string(data) != "new file the user made" {
					t.Fatalf("the user's new file was replaced: %q", data)
				}
				return
			}
			if !errors.Is(err, os.ErrNotExist) {
				t.Fatalf("staged name left behind: %v", err)
			}
			switch c.want {
			case executor.DecisionTrashed:
				if d.TrashPath == nil || *d.TrashPath != dst {
					t.Fatalf("trash path %v, want %s", d.TrashPath, dst)
				}
				if data, err := os.ReadFile(dst); err != nil || string(data) != dupContent {
					t.Fatalf("trash copy %q %v", data, err)
				}
				if _, err := os.Lstat(del); !errors.Is(err, os.ErrNotExist) {
					t.Fatalf("original still present: %v", err)
				}
			case executor.DecisionRemoved:
				if _, err := os.Lstat(del); !errors.Is(err, os.ErrNotExist) || trashFiles(t, e) != 0 {
					t.Fatalf("permanent delete: original %v, %d trash files", err, trashFiles(t, e))
				}
			case executor.DecisionRefused:
				// The file is back at its path, whole.
				if data, err := os.ReadFile(del); err != nil || string(data) != dupContent {
					t.Fatalf("refused file not back in place: %q %v", data, err)
				}
				if c.trashCopy != nil {
					if data, _ := os.ReadFile(dst); string(data) != string(c.trashCopy()) {
						t.Fatalf("trash file that is not a copy of the file touched: %q", data)
					}
				}
			}
			if got := e.file(del); got.IsMissing != (c.want != executor.DecisionRefused) {
				t.Fatalf("file missing=%v after %s", got.IsMissing, c.want)
			}
		})
	}
}

// TestDeleteTrashEntryNeverFollowsSymlink plants trash/<job> as a symlink
// to a directory outside the trash before the delete runs: the delete is
// refused, and nothing is created where the link points.
func TestDeleteTrashEntryNeverFollowsSymlink(t *testing.T) {
	for _, permanent := range []bool{false, true} {
		t.Run("permanent="+strconv.FormatBool(permanent), func(t *testing.T) {
			e := newEnv(t, true)
			kept, del, fk, fd := dupPair(t, e)
			keptIno := inode(t, kept)
			j := requestPair(t, e, fk, fd, permanent)
			if err := os.Symlink(e.outside, filepath.Join(e.x.Trash.Path(), strconv.FormatInt(j.ID, 10))); err != nil {
				t.Fatal(err)
			}
			e.runJob()
			if d := decisions(t, e, j.ID)[fd.ID]; d.Decision != executor.DecisionRefused {
				t.Fatalf("decision %+v, want refused", d)
			}
			if ents, _ := os.ReadDir(e.outside); len(ents) != 0 {
				t.Fatalf("created outside the trash through a symlink: %v", ents)
			}
			if data, err := os.ReadFile(del); err != nil || string(data) != dupContent {
				t.Fatalf("refused file: %q %v", data, err)
			}
			keptIntact(t, kept, keptIno, true)
		})
	}
}
