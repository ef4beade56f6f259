package library_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/vesta-cx/euterpe/daemon"
	"github.com/vesta-cx/euterpe/edge/library"
	"github.com/vesta-cx/euterpe/edge/library/store"
)

// TestRootAndStateDirectoryNested: a library root inside the state
// directory (EUTERPE_STATE_DIR=/data/euterpe, EUTERPE_LIBRARY_ROOTS=
// /data/euterpe/media) is scanned like any other root, and a state
// directory inside a root is skipped with all it holds (library.db, the
// thumbnails, the trash). A root that is the state directory itself is
// refused at start: it would be catalogued with all of those.
func TestRootAndStateDirectoryNested(t *testing.T) {
	cases := []struct {
		name string
		// layout returns the state directory and the root under base.
		layout  func(base string) (state, root string)
		refused bool
	}{
		{"root inside the state directory", func(base string) (string, string) {
			return filepath.Join(base, "state"), filepath.Join(base, "state", "media")
		}, false},
		{"state directory inside the root", func(base string) (string, string) {
			return filepath.Join(base, "media", ".euterpe"), filepath.Join(base, "media")
		}, false},
		{"root is the state directory", func(base string) (string, string) {
			return filepath.Join(base, "state"), filepath.Join(base, "state")
		}, true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ctx := context.Background()
			base, err := filepath.EvalSymlinks(t.TempDir())
			if err != nil {
				t.Fatal(err)
			}
			state, root := c.layout(base)
			var media []string
			for _, rel := range []string{"album/a.mp3", "album/b.mp3"} {
				p := filepath.Join(root, rel)
				mkdir(t, filepath.Dir(p))
				if err := os.WriteFile(p, []byte("same"), 0o644); err != nil {
					t.Fatal(err)
				}
				media = append(media, p)
			}
			// Something the state directory holds besides the library's own.
			mkdir(t, state)
			if err := os.WriteFile(filepath.Join(state, "worker-id"), []byte("w"), 0o644); err != nil {
				t.Fatal(err)
			}
			s := library.Defaults()
			s.Roots = root
			s.Watch = false
			lib, err := library.New(ctx, slog.New(slog.NewTextHandler(io.Discard, nil)), state, "w", s)
			if c.refused {
				var se *daemon.SettingError
				if !errors.As(err, &se) || se.Setting != "EUTERPE_LIBRARY_ROOTS" || !strings.Contains(err.Error(), "is the state directory") {
					t.Fatalf("err = %v, want a SettingError for EUTERPE_LIBRARY_ROOTS", err)
				}
				if _, err := os.Stat(filepath.Join(state, "library.db")); !os.IsNotExist(err) {
					t.Fatalf("library.db created despite the refusal: %v", err)
				}
				return
			}
			if err != nil {
				t.Fatalf("New refused: %v", err)
			}
			defer lib.Store.Close()
			// A thumbnail and a trashed file the scan must not catalogue.
			for _, p := range []string{filepath.Join(lib.Executor.Thumbs.Path(), "1_320.jpg"), filepath.Join(lib.Executor.Trash.Path(), "old.mp3")} {
				if err := os.WriteFile(p, []byte("same"), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			j, err := lib.Policy.EnqueueScan(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if ran, err := lib.Executor.RunJobOnce(ctx); !ran || err != nil {
				t.Fatalf("scan: ran %v err %v", ran, err)
			}
			if got, err := lib.Store.GetJob(ctx, j.ID); err != nil || got.Status != store.StatusCompleted {
				t.Fatalf("scan %+v %v", got, err)
			}
			rows, err := lib.Store.DB.Query(`SELECT path FROM library_files WHERE is_missing = 0 ORDER BY path`)
			if err != nil {
				t.Fatal(err)
			}
			defer rows.Close()
			var got []string
			for rows.Next() {
				var p string
				if err := rows.Scan(&p); err != nil {
					t.Fatal(err)
				}
				got = append(got, p)
			}
			if !slices.Equal(got, media) {
				t.Fatalf("catalogued %v, want %v", got, media)
			}
		})
	}
}
