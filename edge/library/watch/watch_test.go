package watch

import (
	"context"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"
)

func TestWatcherDebouncesAndFollowsNewFolders(t *testing.T) {
	root := t.TempDir()
	var calls, busy atomic.Int32
	busy.Store(1) // first attempt finds a scan active and must retry
	w := &Watcher{
		Roots: []string{root}, Debounce: 50 * time.Millisecond,
		Log: slog.New(slog.NewTextHandler(io.Discard, nil)),
		Enqueue: func(context.Context) (bool, error) {
			if busy.Add(-1) >= 0 {
				return true, nil
			}
			calls.Add(1)
			return false, nil
		},
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { w.Run(ctx); close(done) }()
	defer func() { cancel(); <-done }()
	time.Sleep(50 * time.Millisecond)
	for i := 0; i < 20; i++ { // a burst
		os.WriteFile(filepath.Join(root, "f"+string(rune('a'+i))), []byte("x"), 0o644)
	}
	waitFor(t, func() bool { return calls.Load() == 1 })
	time.Sleep(150 * time.Millisecond)
	if calls.Load() != 1 {
		t.Fatalf("burst produced %d scans, want 1", calls.Load())
	}
	// A new folder is watched: a file created inside it triggers a scan.
	sub := filepath.Join(root, "new", "deeper")
	os.MkdirAll(sub, 0o755)
	waitFor(t, func() bool { return calls.Load() == 2 })
	time.Sleep(100 * time.Millisecond)
	os.WriteFile(filepath.Join(sub, "x"), []byte("x"), 0o644)
	waitFor(t, func() bool { return calls.Load() == 3 })
}

func waitFor(t *testing.T, f func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !f() {
		if time.Now().After(deadline) {
			t.Fatal("timed out")
		}
		time.Sleep(10 * time.Millisecond)
	}
}
