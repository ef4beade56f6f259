package executor_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/vesta-cx/euterpe/edge/library/executor"
	"github.com/vesta-cx/euterpe/edge/library/store"
)

// TestThumbnailsDirectoryRecreated: the thumbnails directory removed while
// the library runs (a cleared cache) is created again by the next render
// and by a group's cleanup, neither of which fails for it; a symlink put in
// its place is refused (output_refused) and nothing is written where it
// leads.
func TestThumbnailsDirectoryRecreated(t *testing.T) {
	e := newEnv(t, true)
	e.x.IOBytesPerSec = 1 << 30
	ctx := context.Background()
	a := filepath.Join(e.root, "a.jpg")
	writeJPEG(t, a, 40, 20)
	data, _ := os.ReadFile(a)
	b := filepath.Join(e.root, "b.jpg")
	os.WriteFile(b, data, 0o644)
	e.scanAndHash()
	thumbs := e.x.Thumbs.Path()

	if err := os.RemoveAll(thumbs); err != nil {
		t.Fatal(err)
	}
	th := e.admit(a, store.FormatJPEG, 16)
	if did, err := e.x.RunThumbnailOnce(ctx); !did || err != nil {
		t.Fatalf("render: did=%v err=%v", did, err)
	}
	if status, code, _, _ := e.thumbStatus(th.ID); status != store.StatusReady {
		t.Fatalf("render after the directory was removed: %s %s", status, code)
	}
	if st, err := os.Lstat(thumbs); err != nil || !st.IsDir() || st.Mode().Perm()&^0o750 != 0 {
		t.Fatalf("thumbnails directory not recreated 0750: %v %v", st, err)
	}
	if _, err := os.Stat(th.OutputPath); err != nil {
		t.Fatalf("thumbnail not written: %v", err)
	}

	if err := os.RemoveAll(thumbs); err != nil {
		t.Fatal(err)
	}
	group := groupOf(t, e.file(a)).String()
	e.p.ScheduleCleanup(ctx, group, 0)
	if did, err := e.x.RunCleanupOnce(ctx); !did || err != nil {
		t.Fatalf("cleanup: did=%v err=%v", did, err)
	}
	var status string
	var msg *string
	e.st.DB.QueryRow(`SELECT status, error_message FROM thumbnail_cleanup_jobs`).Scan(&status, &msg)
	if status != store.StatusCompleted {
		t.Fatalf("cleanup after the directory was removed: %s %s", status, deref(msg))
	}
	if _, err := os.Lstat(thumbs); err != nil {
		t.Fatalf("thumbnails directory not recreated by the cleanup: %v", err)
	}

	if err := os.RemoveAll(thumbs); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(e.outside, thumbs); err != nil {
		t.Fatal(err)
	}
	th = e.admit(b, store.FormatJPEG, 16)
	if did, err := e.x.RunThumbnailOnce(ctx); !did || err != nil {
		t.Fatalf("render: did=%v err=%v", did, err)
	}
	if status, code, _, _ := e.thumbStatus(th.ID); status != store.StatusFailed || code != executor.CodeOutputRefused {
		t.Fatalf("render into a symlink in place of the directory: %s %s, want failed output_refused", status, code)
	}
	if entries, _ := os.ReadDir(e.outside); len(entries) != 0 {
		t.Fatalf("render wrote where the symlink leads: %v", entries)
	}
	for _, p := range []string{a, b} {
		if _, err := os.Stat(p); err != nil {
			t.Fatalf("original %s touched: %v", p, err)
		}
	}
}
