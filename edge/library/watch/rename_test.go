package watch

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"
)

// TestDirectoryMovedAcrossDirectoriesStaysWatched: a watched directory
// moved into another watched directory keeps raising events at its new
// place, through many moves, as do the directories inside it: a file
// written there after the move must request a scan.
func TestDirectoryMovedAcrossDirectoriesStaysWatched(t *testing.T) {
	root := t.TempDir()
	for _, d := range []string{"a/album/disc1", "b"} {
		if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	var calls atomic.Int32
	w := &Watcher{
		Roots: []string{root}, Log: quietLog(), Debounce: 10 * time.Millisecond, RootCheck: time.Hour,
		Enqueue: func(context.Context) (bool, error) { calls.Add(1); return false, nil },
	}
	from, to := filepath.Join(root, "a", "album"), filepath.Join(root, "b", "album")
	src := startFS(t, w, root, filepath.Join(root, "a"), from, filepath.Join(from, "disc1"), filepath.Join(root, "b"))

	for i := 0; i < 30; i++ {
		before, watches := calls.Load(), src.addedCount(to)
		if err := os.Rename(from, to); err != nil {
			t.Fatal(err)
		}
		// The move's Create watches the new name and the scan after the
		// quiet period watches it again, right before it is requested.
		waitFor(t, func() bool {
			return src.addedCount(to) >= watches+2 && src.addedCount(filepath.Join(to, "disc1")) >= watches+2 && calls.Load() > before
		})
		for j, dir := range []string{to, filepath.Join(to, "disc1")} {
			before := calls.Load()
			name := fmt.Sprintf("f%d-%d", i, j)
			f := filepath.Join(dir, name)
			if err := os.WriteFile(f, []byte("x"), 0o644); err != nil {
				t.Fatal(err)
			}
			deadline := time.Now().Add(10 * time.Second)
			for !src.saw(name) || calls.Load() == before {
				if time.Now().After(deadline) {
					t.Fatalf("move %d: a file written in %s after the move raised no scan (event %v)", i, dir, src.saw(name))
				}
				time.Sleep(5 * time.Millisecond)
			}
		}
		from, to = to, from
	}
}
