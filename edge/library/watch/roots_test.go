package watch

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/vesta-cx/euterpe/daemon/testsvc"
)

// TestRootReplacedIsWatchedAgain: a root's inotify watch belongs to the
// directory it was added on. When the root is deleted and created again,
// moved away and replaced, or replaced by a bind mount (the disk mounted
// again), the new directory at the root's path has no watch, and nothing
// written there would ever request a scan. The watcher finds the new
// directory, requests a scan for what it already holds, and watches it.
func TestRootReplacedIsWatchedAgain(t *testing.T) {
	cases := []struct {
		name    string
		replace func(t *testing.T, root string)
	}{
		{"deleted and created again", func(t *testing.T, root string) {
			if err := os.RemoveAll(root); err != nil {
				t.Fatal(err)
			}
			if err := os.Mkdir(root, 0o755); err != nil {
				t.Fatal(err)
			}
		}},
		{"moved away and replaced", func(t *testing.T, root string) {
			if err := os.Rename(root, root+".old"); err != nil {
				t.Fatal(err)
			}
			if err := os.Mkdir(root, 0o755); err != nil {
				t.Fatal(err)
			}
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			root := filepath.Join(t.TempDir(), "lib")
			if err := os.MkdirAll(filepath.Join(root, "sub"), 0o755); err != nil {
				t.Fatal(err)
			}
			var calls atomic.Int32
			w := &Watcher{
				Roots: []string{root}, Log: quietLog(), Debounce: 20 * time.Millisecond, RootCheck: 20 * time.Millisecond,
				Enqueue: func(context.Context) (bool, error) { calls.Add(1); return false, nil },
			}
			// The root's identity is taken before its tree is watched.
			src := startFS(t, w, root, filepath.Join(root, "sub"))

			c.replace(t, root)
			// The root check watches the new directory and requests a scan.
			waitFor(t, func() bool { return calls.Load() >= 1 && src.addedCount(root) >= 2 })
			before := calls.Load()
			f := filepath.Join(root, "new.flac")
			if err := os.WriteFile(f, []byte("x"), 0o644); err != nil {
				t.Fatal(err)
			}
			waitFor(t, func() bool { return src.saw(f) && calls.Load() > before })
		})
	}
}

// TestRootUnmountedAndMountedAgain: an unmount removes the watches below
// the mount point without any event, and a disk mounted again is another
// directory. Run as root in a private mount namespace (testsvc.InMountNamespace).
func TestRootUnmountedAndMountedAgain(t *testing.T) {
	testsvc.InMountNamespace(t, func(t *testing.T) {
		base := t.TempDir()
		root, disk := filepath.Join(base, "lib"), filepath.Join(base, "disk")
		for _, d := range []string{root, disk} {
			if err := os.Mkdir(d, 0o755); err != nil {
				t.Fatal(err)
			}
		}
		if err := syscall.Mount(disk, root, "", syscall.MS_BIND, ""); err != nil {
			t.Fatalf("bind mount: %v", err)
		}
		defer syscall.Unmount(root, syscall.MNT_DETACH)
		var calls atomic.Int32
		w := &Watcher{
			Roots: []string{root}, Log: quietLog(), Debounce: 20 * time.Millisecond, RootCheck: 20 * time.Millisecond,
			Enqueue: func(context.Context) (bool, error) { calls.Add(1); return false, nil },
		}
		src := startFS(t, w, root)

		if err := syscall.Unmount(root, 0); err != nil {
			t.Fatal(err)
		}
		if err := syscall.Mount(disk, root, "", syscall.MS_BIND, ""); err != nil {
			t.Fatal(err)
		}
		waitFor(t, func() bool { return calls.Load() >= 1 && src.addedCount(root) >= 2 })
		before := calls.Load()
		f := filepath.Join(root, "new.flac")
		if err := os.WriteFile(f, []byte("x"), 0o644); err != nil {
			t.Fatal(err)
		}
		waitFor(t, func() bool { return src.saw(f) && calls.Load() > before })
	})
}

// limitedSource refuses watches beyond the first limit, as inotify does
// once fs.inotify.max_user_watches is reached.
type limitedSource struct {
	*fakeSource
	limit int
	mu    sync.Mutex
	n     int
}

func (s *limitedSource) Add(dir string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.n >= s.limit {
		return fmt.Errorf("%q: %w", dir, syscall.ENOSPC)
	}
	s.n++
	return s.fakeSource.Add(dir)
}

// TestWatchLimitReachedWarnsAndScans: directories beyond the inotify watch
// limit raise no event, so changes there would go unseen until something
// else requests a scan. The watcher says so once at warning level, naming
// the setting to raise, and requests a full scan periodically instead.
func TestWatchLimitReachedWarnsAndScans(t *testing.T) {
	root := t.TempDir()
	for i := 0; i < 5; i++ {
		os.MkdirAll(filepath.Join(root, fmt.Sprint("d", i)), 0o755)
	}
	var logs testsvc.LogBuffer
	var calls, afterFull atomic.Int32
	src := &limitedSource{fakeSource: newFakeSource(), limit: 2}
	w := &Watcher{
		Roots: []string{root}, Log: slog.New(slog.NewTextHandler(&logs, nil)),
		Debounce: 10 * time.Millisecond, FallbackScan: 50 * time.Millisecond, RootCheck: time.Hour,
		Enqueue: func(context.Context) (bool, error) {
			calls.Add(1)
			// The root is watched again only by a pass begun after the limit
			// was raised, which watches every directory; Enqueue runs on the
			// loop, so that pass has ended and stopped the periodic scans.
			if src.addedCount(root) >= 2 {
				afterFull.Add(1)
			}
			return false, nil
		},
	}
	startWatcher(t, w, src)
	waitFor(t, func() bool { return calls.Load() >= 3 })
	out := logs.String()
	if n := strings.Count(out, "max_user_watches"); n != 1 || !strings.Contains(out, "level=WARN") {
		t.Fatalf("want one warning naming fs.inotify.max_user_watches, got:\n%s", out)
	}
	if len(out) > 2048 {
		t.Fatalf("log grows with the directories not watched: %d bytes", len(out))
	}

	// Once the limit is raised, the next periodic pass watches everything
	// and the periodic scans stop.
	src.mu.Lock()
	src.limit = 1 << 20
	src.mu.Unlock()
	waitFor(t, func() bool { return afterFull.Load() >= 1 })
	// The scan that pass requested is the last one: watch for more over
	// many periods.
	settled := calls.Load()
	time.Sleep(10 * w.FallbackScan)
	if calls.Load() != settled || afterFull.Load() != 1 {
		t.Fatalf("periodic scans go on after every directory is watched: %d -> %d (%d after the full pass)", settled, calls.Load(), afterFull.Load())
	}
	for i := 0; i < 5; i++ {
		if src.addedCount(filepath.Join(root, fmt.Sprint("d", i))) == 0 {
			t.Fatalf("d%d never watched", i)
		}
	}
}
