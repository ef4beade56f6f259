package executor_test

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/vesta-cx/euterpe/edge/library/executor"
)

// TestDeleteRerunNamesWhatItLeftInTheTrash leaves in trash/<job>/<file>/
// what a run killed (SIGKILL, power loss) after its move and before its
// record or its check leaves there, in the cases where the re-run cannot
// claim it as the file's move: the re-run refuses the file, leaves the
// trash file in place, and its refusal names the trash file, which the
// retention would otherwise empty with no decision saying it was there.
func TestDeleteRerunNamesWhatItLeftInTheTrash(t *testing.T) {
	cases := []struct {
		name string
		// crash lays out the filesystem as the killed run left it (dst:
		// the trash file; staged: the staging name) and returns the bytes
		// the trash file must still hold.
		crash func(t *testing.T, del, dst, staged string) string
		exdev bool
	}{
		{
			// A new version saved over the file in the instant between the
			// last check and the move: the move took the new version, the
			// kill came before the check that puts it back.
			name: "new version swapped in and moved, killed before the check",
			crash: func(t *testing.T, del, dst, _ string) string {
				mustSwap(t, func() error { return os.WriteFile(dst, []byte("the user's new version"), 0o644) },
					func() error { return os.Remove(del) })
				return "the user's new version"
			},
		},
		{
			name: "moved, then a new file written at its path",
			crash: func(t *testing.T, del, dst, _ string) string {
				mustSwap(t, func() error { return os.Rename(del, dst) },
					func() error { return os.WriteFile(del, []byte("written after the crash"), 0o644) })
				return dupContent
			},
		},
		{
			name:  "staged and copied, then a new file written at its path",
			exdev: true,
			crash: func(t *testing.T, del, dst, staged string) string {
				mustSwap(t, func() error { return os.Rename(del, staged) },
					func() error { return os.WriteFile(dst, []byte(dupContent), 0o640) },
					func() error { return os.WriteFile(del, []byte("written after the crash"), 0o644) })
				return dupContent
			},
		},
		{
			// A power cut after the copy's size was on disk, not its data.
			name:  "copy left garbage of the same size, file still in place",
			exdev: true,
			crash: func(t *testing.T, _, dst, _ string) string {
				garbage := strings.Repeat("\x00", len(dupContent))
				mustSwap(t, func() error { return os.WriteFile(dst, []byte(garbage), 0o640) })
				return garbage
			},
		},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			e := newEnv(t, true)
			kept, del, fk, fd := dupPair(t, e)
			keptIno := inode(t, kept)
			if c.exdev {
				crossDevice(e.x)
			}
			j := requestPair(t, e, fk, fd, false)
			dst := filepath.Join(e.x.Trash.Path(), strconv.FormatInt(j.ID, 10), strconv.FormatInt(fd.ID, 10), filepath.Base(del))
			staged := stagedPath(del, j.ID, fd.ID)
			if err := os.MkdirAll(filepath.Dir(dst), 0o750); err != nil {
				t.Fatal(err)
			}
			want := c.crash(t, del, dst, staged)
			e.runJob()
			d := decisions(t, e, j.ID)[fd.ID]
			if d.Decision != executor.DecisionRefused {
				t.Fatalf("decision %+v, want refused", d)
			}
			if !strings.Contains(d.Reason, dst) {
				t.Fatalf("refusal %q does not say the trash holds %s", d.Reason, dst)
			}
			if data, err := os.ReadFile(dst); err != nil || string(data) != want {
				t.Fatalf("trash file: %q %v, want %q", data, err, want)
			}
			keptIntact(t, kept, keptIno, true)
		})
	}
}

// TestDeleteLeavesHandMadeStagedNameAlone puts something of the user's at
// the staging name of the job's file before its first run, while the file
// is still at its path: whatever it is, it is neither moved, changed,
// followed nor removed, and the kept file stays as it was.
func TestDeleteLeavesHandMadeStagedNameAlone(t *testing.T) {
	for _, c := range []struct {
		name  string
		plant func(t *testing.T, staged, kept string)
		exdev bool
	}{
		{name: "a file of its own", plant: func(t *testing.T, staged, _ string) {
			mustSwap(t, func() error { return os.WriteFile(staged, []byte("the user's notes"), 0o644) })
		}},
		{name: "a copy of the group's content", exdev: true, plant: func(t *testing.T, staged, _ string) {
			mustSwap(t, func() error { return os.WriteFile(staged, []byte(dupContent), 0o644) })
		}},
		{name: "a hard link of the kept file", exdev: true, plant: func(t *testing.T, staged, kept string) {
			mustSwap(t, func() error { return os.Link(kept, staged) })
		}},
		{name: "a symlink to the kept file", plant: func(t *testing.T, staged, kept string) {
			mustSwap(t, func() error { return os.Symlink(kept, staged) })
		}},
		{name: "a fifo", exdev: true, plant: func(t *testing.T, staged, _ string) {
			mustSwap(t, func() error { return syscall.Mkfifo(staged, 0o644) })
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			e := newEnv(t, true)
			kept, del, fk, fd := dupPair(t, e)
			if c.exdev {
				crossDevice(e.x)
			}
			j := requestPair(t, e, fk, fd, false)
			staged := stagedPath(del, j.ID, fd.ID)
			c.plant(t, staged, kept)
			before, err := os.Lstat(staged)
			if err != nil {
				t.Fatal(err)
			}
			keptIno := inode(t, kept)
			e.runJob()
			after, err := os.Lstat(staged)
			if err != nil || !os.SameFile(before, after) || after.Size() != before.Size() || after.ModTime() != before.ModTime() {
				t.Fatalf("staging name touched: %v %v", after, err)
			}
			keptIntact(t, kept, keptIno, true)
			d := decisions(t, e, j.ID)[fd.ID]
			if d.Decision == executor.DecisionRefused {
				if data, err := os.ReadFile(del); err != nil || string(data) != dupContent {
					t.Fatalf("refused file not in place: %q %v", data, err)
				}
			}
		})
	}
}
