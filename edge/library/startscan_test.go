package library_test

import (
	"context"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/vesta-cx/euterpe/edge/library"
	"github.com/vesta-cx/euterpe/edge/library/store"
)

// TestScanRequestedAtStart: files written while the daemon was down (or
// before its first start) raise no event, so the watcher requests a scan
// without any once the roots are watched. A scan or hash job already
// queued at start does not stand for it (it may have walked the roots
// long before): the start's scan is enqueued once that job has ended.
// With watching off, scans are only requested: none at start.
func TestScanRequestedAtStart(t *testing.T) {
	cases := []struct {
		name   string
		watch  bool
		queued string // a job kind pending before the start, "" for none
	}{
		{"watching", true, ""},
		{"watching; a hash queued before the start", true, store.KindHash},
		{"watching; a scan queued before the start", true, store.KindScan},
		{"not watching", false, ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			base := t.TempDir()
			root := filepath.Join(base, "lib")
			mkdir(t, filepath.Join(root, "album"))
			song := filepath.Join(root, "album", "a.mp3")
			if err := os.WriteFile(song, []byte("written while the daemon was down"), 0o644); err != nil {
				t.Fatal(err)
			}
			s := library.Defaults()
			s.Roots = root
			s.Watch = c.watch
			s.WatchDebounce = 20 * time.Millisecond
			s.PolicyInterval = 20 * time.Millisecond
			s.Poll = 10 * time.Millisecond
			s.AutoHash = false
			ctx := context.Background()
			lib, err := library.New(ctx, slog.New(slog.NewTextHandler(io.Discard, nil)), filepath.Join(base, "state"), "w", s)
			if err != nil {
				t.Fatal(err)
			}
			var before int64
			if c.queued != "" {
				if _, err := lib.Store.DB.Exec(`INSERT INTO jobs(kind, status, payload, created_at, updated_at)
VALUES (?, 'pending', '{}', 0, 0)`, c.queued); err != nil {
					t.Fatal(err)
				}
				lib.Store.DB.QueryRow(`SELECT MAX(id) FROM jobs`).Scan(&before)
			}
			runCtx, cancel := context.WithCancel(ctx)
			done := make(chan error, 1)
			go func() { done <- lib.Run(runCtx) }()
			defer func() {
				cancel()
				if err := <-done; err != nil {
					t.Errorf("Run: %v", err)
				}
				lib.Store.Close()
			}()
			scanned := func() bool {
				var n int
				lib.Store.DB.QueryRow(`SELECT COUNT(*) FROM jobs j, library_files f
WHERE j.kind = 'scan' AND j.status = 'completed' AND j.id > ? AND f.path = ?`, before, song).Scan(&n)
				return n > 0
			}
			if !c.watch {
				time.Sleep(20 * s.WatchDebounce)
				var n int
				lib.Store.DB.QueryRow(`SELECT COUNT(*) FROM jobs`).Scan(&n)
				if n != 0 {
					t.Fatalf("%d jobs enqueued at start with watching off", n)
				}
				return
			}
			waitFor(t, "a completed scan enqueued at start that catalogued the file", scanned)
		})
	}
}
