package executor_test

import (
	"os"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"

	"github.com/vesta-cx/euterpe/daemon/testsvc"
	"github.com/vesta-cx/euterpe/edge/library/executor"
)

// TestDeleteTrashEntryNeverCrossesMount mounts a directory from outside
// the trash (a bind mount: the same filesystem, so no device number tells
// it apart) at the job's or the file's trash entry before the delete, or
// before the re-run of a delete killed while its file was staged. The
// delete must neither create nor remove anything in the mounted
// directory: it is no more the trash than a symlink's target is. It runs
// as root in a child test process inside a private mount namespace.
func TestDeleteTrashEntryNeverCrossesMount(t *testing.T) {
	testsvc.InMountNamespace(t, trashMountCases)
}

func trashMountCases(t *testing.T) {
	for _, c := range []struct {
		name string
		// file: mount over trash/<job>/<file> rather than trash/<job>.
		file, exdev, permanent bool
		// staged: the re-run of a run killed with the file staged, and
		// what the mounted directory holds at the file's name (a prefix
		// of its content, as a copy cut short would be).
		staged bool
	}{
		{name: "job directory"},
		{name: "job directory, permanent", permanent: true},
		{name: "job directory, trash on another filesystem", exdev: true},
		{name: "file entry", file: true},
		{name: "file entry, trash on another filesystem", file: true, exdev: true},
		{name: "file entry, re-run of a staged move", file: true, exdev: true, staged: true},
	} {
		t.Run(c.name, func(t *testing.T) {
			e := newEnv(t, true)
			kept, del, fk, fd := dupPair(t, e)
			keptIno := inode(t, kept)
			if c.exdev {
				crossDevice(e.x)
			}
			j := requestPair(t, e, fk, fd, c.permanent)
			target := filepath.Join(e.x.Trash.Path(), strconv.FormatInt(j.ID, 10))
			if c.file {
				target = filepath.Join(target, strconv.FormatInt(fd.ID, 10))
			}
			if err := os.MkdirAll(target, 0o750); err != nil {
				t.Fatal(err)
			}
			var outFile string
			if c.staged {
				staged := stagedPath(del, j.ID, fd.ID)
				if err := os.Rename(del, staged); err != nil {
					t.Fatal(err)
				}
				outFile = filepath.Join(e.outside, filepath.Base(del))
				if err := os.WriteFile(outFile, []byte(dupContent[:5]), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			if err := syscall.Mount(e.outside, target, "", syscall.MS_BIND, ""); err != nil {
				t.Fatalf("bind mount: %v", err)
			}
			t.Cleanup(func() { syscall.Unmount(target, syscall.MNT_DETACH) })
			e.runJob()
			d := decisions(t, e, j.ID)[fd.ID]
			if d.Decision != executor.DecisionRefused {
				t.Fatalf("decision %+v, want refused", d)
			}
			keptIntact(t, kept, keptIno, true)
			if err := syscall.Unmount(target, 0); err != nil {
				t.Fatal(err)
			}
			ents, _ := os.ReadDir(e.outside)
			switch {
			case c.staged:
				if data, err := os.ReadFile(outFile); err != nil || string(data) != dupContent[:5] || len(ents) != 1 {
					t.Fatalf("mounted directory changed: %v, %q %v", ents, data, err)
				}
			case len(ents) != 0:
				t.Fatalf("created in the mounted directory: %v", ents)
			}
			if data, err := os.ReadFile(del); err != nil || string(data) != dupContent {
				t.Fatalf("refused file not in place: %q %v", data, err)
			}
		})
	}
}
