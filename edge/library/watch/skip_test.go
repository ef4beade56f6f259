package watch

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// TestSkipHoldingARootStillWatchesIt: the state directory is never
// watched when it lies in a root (library.db and the thumbnails change all
// the time), but a root kept inside the state directory is watched like
// any other, new directories in it included.
func TestSkipHoldingARootStillWatchesIt(t *testing.T) {
	cases := []struct {
		name string
		// layout returns the root, the skipped directory, and the
		// directories that must and must not be watched, under base.
		layout func(base string) (root, skip string, watched, unwatched []string)
	}{
		{"root inside the skipped directory", func(base string) (string, string, []string, []string) {
			state := filepath.Join(base, "state")
			root := filepath.Join(state, "media")
			return root, state, []string{root, filepath.Join(root, "album")}, []string{filepath.Join(state, "thumbs")}
		}},
		{"skipped directory inside the root", func(base string) (string, string, []string, []string) {
			state := filepath.Join(base, "media", ".state")
			root := filepath.Join(base, "media")
			return root, state, []string{root, filepath.Join(root, "album")}, []string{state, filepath.Join(state, "thumbs")}
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			root, skip, watched, unwatched := c.layout(t.TempDir())
			for _, d := range append(append([]string{}, watched...), unwatched...) {
				if err := os.MkdirAll(d, 0o755); err != nil {
					t.Fatal(err)
				}
			}
			src := newFakeSource()
			w := &Watcher{Roots: []string{root}, Skip: []string{skip}, Log: quietLog(), Debounce: time.Hour, RootCheck: time.Hour,
				Enqueue: func(context.Context) (bool, error) { return false, nil }}
			startWatcher(t, w, src)
			waitFor(t, func() bool {
				for _, d := range watched {
					if src.addedCount(d) == 0 {
						return false
					}
				}
				return true
			})
			for _, d := range unwatched {
				if n := src.addedCount(d); n != 0 {
					t.Errorf("%s watched %d times, want never", d, n)
				}
			}
		})
	}
}
