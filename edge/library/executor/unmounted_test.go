package executor_test

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/vesta-cx/euterpe/edge/library/executor"
	"github.com/vesta-cx/euterpe/edge/library/store"
)

// TestScanKeepsFilesOfUnmountedSubdirectory: a second disk mounted below a
// root and not mounted when a scan runs leaves an empty mount point on the
// root's device. The files catalogued under it keep their state and their
// duplicate group, the scan names the directory and succeeds, and a file
// deleted elsewhere is still marked missing; once the disk is back the next
// scan is clean. An empty directory on the files' own device (they were
// deleted), or one holding a file (a disk back under another device
// number), marks them missing as before.
func TestScanKeepsFilesOfUnmountedSubdirectory(t *testing.T) {
	cases := []struct {
		name string
		// otherDevice shows disk2 on another device than its files were
		// catalogued on.
		otherDevice bool
		// leave is a file left in disk2 after its files are gone.
		leave string
		kept  bool
	}{
		{"not mounted", true, "", true},
		{"files deleted", false, "", false},
		{"back under another device number, files deleted", true, "new.flac", false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			e := newEnv(t, true)
			a := e.write("a.flac", "same!")
			x := e.write("disk2/x.flac", "same!")
			y := e.write("disk2/sub/y.flac", "other")
			gone := e.write("gone.flac", "gone!")
			disk2 := filepath.Join(e.root, "disk2")
			away := filepath.Join(e.outside, "disk2") // out of every root
			e.scanAndHash()
			if err := os.Remove(gone); err != nil {
				t.Fatal(err)
			}
			if err := os.Rename(disk2, away); err != nil {
				t.Fatal(err)
			}
			if err := os.Mkdir(disk2, 0o755); err != nil {
				t.Fatal(err)
			}
			if c.leave != "" {
				e.write(filepath.Join("disk2", c.leave), "new")
			}
			if c.otherDevice {
				executor.SetDirDevice(e.x, func(p string) (int64, error) {
					var st syscall.Stat_t
					if err := syscall.Lstat(p, &st); err != nil {
						return 0, err
					}
					if p == disk2 {
						st.Dev++
					}
					return int64(st.Dev), nil
				})
			}
			if j := e.scan(); j.Status != store.StatusCompleted {
				t.Fatalf("scan %s: %s", j.Status, deref(j.ErrorMessage))
			}
			s := e.lastSession()
			wantMissing := int64(1)
			if !c.kept {
				wantMissing = 3
			}
			if s.status != store.StatusSucceeded || s.missing != wantMissing {
				t.Fatalf("session %s missing=%d %q, want succeeded missing=%d", s.status, s.missing, deref(s.msg), wantMissing)
			}
			want := "2 files kept under directories on another device than they were catalogued on (not mounted?): " + disk2 + " (2)"
			if c.kept != (deref(s.msg) == want) {
				t.Fatalf("session message %q, kept=%v", deref(s.msg), c.kept)
			}
			if !e.file(gone).IsMissing || e.file(a).IsMissing {
				t.Fatal("gone.flac must be missing and a.flac not")
			}
			for _, p := range []string{x, y} {
				if f := e.file(p); f.IsMissing == c.kept {
					t.Fatalf("%s missing=%v, want %v", p, f.IsMissing, !c.kept)
				}
			}
			if gs := e.groups(); (len(gs) == 1) != c.kept {
				t.Fatalf("groups %+v, kept=%v", gs, c.kept)
			}
			if !c.kept {
				return
			}
			// Mounted again: a clean scan, the group intact.
			executor.SetDirDevice(e.x, nil)
			if err := os.Remove(disk2); err != nil {
				t.Fatal(err)
			}
			if err := os.Rename(away, disk2); err != nil {
				t.Fatal(err)
			}
			if j := e.scan(); j.Status != store.StatusCompleted {
				t.Fatalf("scan %s: %s", j.Status, deref(j.ErrorMessage))
			}
			if s := e.lastSession(); s.missing != 0 || strings.Contains(deref(s.msg), "kept") {
				t.Fatalf("scan once mounted: missing=%d %q", s.missing, deref(s.msg))
			}
			if gs := e.groups(); len(gs) != 1 || gs[0].FileCount != 2 {
				t.Fatalf("groups once mounted %+v", gs)
			}
		})
	}
}
