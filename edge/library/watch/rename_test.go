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
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	defer func() { cancel(); <-done }()
	time.Sleep(100 * time.Millisecond)

	from, to := filepath.Join(root, "a", "album"), filepath.Join(root, "b", "album")
	for i := 0; i < 30; i++ {
		if err := os.Rename(from, to); err != nil {
			t.Fatal(err)
		}
		waitFor(t, func() bool { return calls.Load() >= int32(3*i+1) })
		time.Sleep(30 * time.Millisecond) // quiet: the move's scan is made
		for j, dir := range []string{to, filepath.Join(to, "disc1")} {
			before := calls.Load()
			if err := os.WriteFile(filepath.Join(dir, fmt.Sprint("f", i)), []byte("x"), 0o644); err != nil {
				t.Fatal(err)
			}
			deadline := time.Now().Add(2 * time.Second)
			for calls.Load() == before {
				if time.Now().After(deadline) {
					t.Fatalf("move %d: a file written in %s after the move raised no scan (%d)", i, dir, j)
				}
				time.Sleep(5 * time.Millisecond)
			}
			time.Sleep(30 * time.Millisecond)
		}
		from, to = to, from
	}
}
