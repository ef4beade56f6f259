package watch

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/vesta-cx/euterpe/daemon/testsvc"
)

// TestMountBelowRootRewatchesAndScans: a disk mounted or unmounted below a
// root raises no inotify event, hides the directory it is mounted on (and
// its watch) or takes its own watches along. A change of the mount table's
// lines under a root makes the watcher watch the whole tree again and
// request a scan; a change elsewhere in the table does neither. The table
// is a file the test writes, in mountinfo's format, with a mount point
// holding a space as the kernel escapes it.
func TestMountBelowRootRewatchesAndScans(t *testing.T) {
	root := filepath.Join(t.TempDir(), "my lib")
	usb := filepath.Join(root, "usb disk")
	if err := os.MkdirAll(usb, 0o755); err != nil {
		t.Fatal(err)
	}
	table := filepath.Join(t.TempDir(), "mountinfo")
	esc := func(p string) string { return strings.ReplaceAll(p, " ", `\040`) }
	base := "22 27 0:21 / /proc rw,relatime - proc proc rw\n"
	write := func(s string) {
		t.Helper()
		tmp := table + ".new"
		if err := os.WriteFile(tmp, []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, table); err != nil {
			t.Fatal(err)
		}
	}
	write(base)
	var calls atomic.Int32
	src := newFakeSource()
	w := &Watcher{Roots: []string{root}, Log: quietLog(), Debounce: 10 * time.Millisecond, RootCheck: 10 * time.Millisecond,
		MountInfo: table, Enqueue: func(context.Context) (bool, error) { calls.Add(1); return false, nil }}
	startWatcher(t, w, src)
	waitFor(t, func() bool { return src.addedCount(usb) == 1 })

	steps := []struct {
		name  string
		table string
		scan  bool
	}{
		{"a disk mounted below the root", base + "90 27 8:17 / " + esc(usb) + " rw,relatime - vfat /dev/sdb1 rw\n", true},
		{"a mount elsewhere", base + "90 27 8:17 / " + esc(usb) + " rw,relatime - vfat /dev/sdb1 rw\n" +
			"91 22 0:50 / /proc/sys/fs/binfmt_misc rw - binfmt_misc binfmt_misc rw\n", false},
		{"the disk mounted again", base + "93 27 8:17 / " + esc(usb) + " rw,relatime - vfat /dev/sdb1 rw\n" +
			"91 22 0:50 / /proc/sys/fs/binfmt_misc rw - binfmt_misc binfmt_misc rw\n", true},
		{"the disk unmounted", base + "91 22 0:50 / /proc/sys/fs/binfmt_misc rw - binfmt_misc binfmt_misc rw\n", true},
	}
	for _, s := range steps {
		before, watches := calls.Load(), src.addedCount(usb)
		write(s.table)
		if s.scan {
			waitFor(t, func() bool {
				return calls.Load() > before && src.addedCount(usb) > watches && src.addedCount(root) > watches
			})
			continue
		}
		time.Sleep(20 * w.RootCheck)
		if calls.Load() != before || src.addedCount(usb) != watches {
			t.Fatalf("%s: %d scans requested, %d watches added", s.name, calls.Load()-before, src.addedCount(usb)-watches)
		}
	}
}

// TestMountBelowRootReal mounts a tmpfs below a root: files written on it
// request scans, and so does its unmount. It runs in a private mount
// namespace (testsvc.InMountNamespace): as root, and always under CI.
func TestMountBelowRootReal(t *testing.T) {
	testsvc.InMountNamespace(t, func(t *testing.T) {
		root := t.TempDir()
		usb := filepath.Join(root, "usb")
		if err := os.Mkdir(usb, 0o755); err != nil {
			t.Fatal(err)
		}
		var calls atomic.Int32
		w := &Watcher{Roots: []string{root}, Log: quietLog(), Debounce: 20 * time.Millisecond, RootCheck: 20 * time.Millisecond,
			Enqueue: func(context.Context) (bool, error) { calls.Add(1); return false, nil }}
		src := startFS(t, w, root, usb)
		if err := syscall.Mount("tmpfs", usb, "tmpfs", 0, "size=1m"); err != nil {
			t.Fatalf("mount tmpfs: %v", err)
		}
		mounted := true
		defer func() {
			if mounted {
				syscall.Unmount(usb, syscall.MNT_DETACH)
			}
		}()
		waitFor(t, func() bool { return calls.Load() >= 1 && src.addedCount(usb) >= 2 })
		before := calls.Load()
		album := filepath.Join(usb, "album")
		if err := os.Mkdir(album, 0o755); err != nil {
			t.Fatal(err)
		}
		waitFor(t, func() bool { return src.watching(album) && calls.Load() > before })
		before = calls.Load()
		song := filepath.Join(album, "song-on-usb.flac")
		if err := os.WriteFile(song, []byte("x"), 0o644); err != nil {
			t.Fatal(err)
		}
		waitFor(t, func() bool { return src.saw(song) && calls.Load() > before })
		before = calls.Load()
		if err := syscall.Unmount(usb, 0); err != nil {
			t.Fatal(err)
		}
		mounted = false
		waitFor(t, func() bool { return calls.Load() > before })
	})
}

func TestUnescapeMountPoint(t *testing.T) {
	cases := map[string]string{
		`/mnt/plain`:              "/mnt/plain",
		`/mnt/my\040disk`:         "/mnt/my disk",
		`/mnt/tab\011and\134back`: "/mnt/tab\tand\\back",
		`/mnt/short\04`:           `/mnt/short\04`,
		`/mnt/not\999octal`:       `/mnt/not\999octal`,
	}
	for in, want := range cases {
		if got := unescapeMountPoint(in); got != want {
			t.Errorf("unescapeMountPoint(%q) = %q, want %q", in, got, want)
		}
	}
}
