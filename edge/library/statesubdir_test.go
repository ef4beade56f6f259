package library_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/vesta-cx/euterpe/daemon"
	"github.com/vesta-cx/euterpe/edge/library"
)

// TestThumbsDirJudgedByItsRealPath: a <state>/thumbs symlink is judged by
// the directory it leads to: into a library root (or to one, or to a
// directory holding one), or to the state directory itself, New refuses it
// with a *daemon.SettingError naming EUTERPE_STATE_DIR and the thumbnails
// directory, before library.db is created and without touching what is
// there; a symlink to another directory, inside the state directory or on
// another disk outside every root, is accepted. A trash or thumbnails
// directory inside the state directory that holds, or lies in, a library
// root kept there is refused too.
func TestThumbsDirJudgedByItsRealPath(t *testing.T) {
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	cases := []struct {
		name string
		// prepare builds the layout under base and returns the roots and
		// the trash setting.
		prepare func(t *testing.T, base, state string) (roots, trash string)
		setting string // "" when accepted
		reason  string
	}{
		{"thumbs symlinked into a library root", func(t *testing.T, base, state string) (string, string) {
			mkdir(t, filepath.Join(base, "lib", "album"))
			symlink(t, filepath.Join(base, "lib", "album"), filepath.Join(state, "thumbs"))
			return filepath.Join(base, "lib"), ""
		}, "EUTERPE_STATE_DIR", "thumbnails directory must not overlap the library root"},
		{"thumbs symlinked to a library root", func(t *testing.T, base, state string) (string, string) {
			mkdir(t, filepath.Join(base, "lib"))
			symlink(t, filepath.Join(base, "lib"), filepath.Join(state, "thumbs"))
			return filepath.Join(base, "lib"), ""
		}, "EUTERPE_STATE_DIR", "must not overlap the library root"},
		{"thumbs symlinked to a directory holding a library root", func(t *testing.T, base, state string) (string, string) {
			mkdir(t, filepath.Join(base, "disk", "lib"))
			symlink(t, filepath.Join(base, "disk"), filepath.Join(state, "thumbs"))
			return filepath.Join(base, "disk", "lib"), ""
		}, "EUTERPE_STATE_DIR", "must not overlap the library root"},
		{"thumbs symlinked to another disk, outside every root", func(t *testing.T, base, state string) (string, string) {
			mkdir(t, filepath.Join(base, "lib"))
			mkdir(t, filepath.Join(base, "bigdisk", "thumbs"))
			symlink(t, filepath.Join(base, "bigdisk", "thumbs"), filepath.Join(state, "thumbs"))
			return filepath.Join(base, "lib"), ""
		}, "", ""},
		{"thumbs symlinked into a library root that holds the state directory", func(t *testing.T, base, state string) (string, string) {
			mkdir(t, filepath.Join(base, "album"))
			symlink(t, filepath.Join(base, "album"), filepath.Join(state, "thumbs"))
			return base, ""
		}, "EUTERPE_STATE_DIR", "must not overlap the library root"},
		{"thumbs symlinked to the state directory itself", func(t *testing.T, base, state string) (string, string) {
			mkdir(t, filepath.Join(base, "lib"))
			symlink(t, state, filepath.Join(state, "thumbs"))
			return filepath.Join(base, "lib"), ""
		}, "EUTERPE_STATE_DIR", "must not be the state directory"},
		{"thumbs symlinked into a library root inside the state directory", func(t *testing.T, base, state string) (string, string) {
			mkdir(t, filepath.Join(state, "media", "album"))
			symlink(t, filepath.Join(state, "media", "album"), filepath.Join(state, "thumbs"))
			return filepath.Join(state, "media"), ""
		}, "EUTERPE_STATE_DIR", "must not overlap the library root"},
		{"trash holding a library root", func(t *testing.T, base, state string) (string, string) {
			mkdir(t, filepath.Join(state, "bin", "media"))
			return filepath.Join(state, "bin", "media"), filepath.Join(state, "bin")
		}, "EUTERPE_LIBRARY_TRASH_DIR", "trash directory must not overlap the library root"},
		{"thumbs symlinked to another directory inside the state directory", func(t *testing.T, base, state string) (string, string) {
			mkdir(t, filepath.Join(base, "lib"))
			mkdir(t, filepath.Join(state, "cache", "thumbs"))
			symlink(t, filepath.Join(state, "cache", "thumbs"), filepath.Join(state, "thumbs"))
			return filepath.Join(base, "lib"), ""
		}, "", ""},
		{"state directory inside a library root", func(t *testing.T, base, state string) (string, string) {
			return base, ""
		}, "", ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			base, err := filepath.EvalSymlinks(t.TempDir())
			if err != nil {
				t.Fatal(err)
			}
			state := filepath.Join(base, "state")
			mkdir(t, state)
			roots, trash := c.prepare(t, base, state)
			// A user file named as a thumbnail would be, wherever the
			// thumbnails directory leads.
			userFile := filepath.Join(state, "thumbs", "1_100.jpg")
			if _, err := os.Stat(filepath.Dir(userFile)); err == nil {
				if err := os.WriteFile(userFile, []byte("user photo"), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			s := library.Defaults()
			s.Roots = roots
			s.TrashDir = trash
			s.Watch = false
			lib, err := library.New(context.Background(), log, state, "w", s)
			if c.setting == "" {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				defer lib.Store.Close()
				want, err := filepath.EvalSymlinks(filepath.Join(state, "thumbs"))
				if err != nil {
					t.Fatal(err)
				}
				if got := lib.Executor.Thumbs.Path(); got != want {
					t.Fatalf("thumbnails at %s, want %s", got, want)
				}
				return
			}
			if err == nil {
				lib.Store.Close()
			}
			var se *daemon.SettingError
			if !errors.As(err, &se) || se.Setting != c.setting ||
				!strings.Contains(err.Error(), strings.ReplaceAll(c.reason, "STATE", state)) {
				t.Fatalf("err = %v, want a SettingError for %s saying %q", err, c.setting, c.reason)
			}
			if _, err := os.Stat(filepath.Join(state, "library.db")); !os.IsNotExist(err) {
				t.Fatalf("library.db created despite the refusal: %v", err)
			}
			if data, err := os.ReadFile(userFile); err == nil && string(data) != "user photo" {
				t.Fatalf("user file %s changed", userFile)
			}
		})
	}
}

// TestRootResolvedAsTheKernelDoes: a library root written with ".." after
// a symlink is the directory the kernel opens (the symlink walked first),
// not the one filepath.Clean would name.
func TestRootResolvedAsTheKernelDoes(t *testing.T) {
	base, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	mkdir(t, filepath.Join(base, "x", "y"))
	mkdir(t, filepath.Join(base, "x", "archive"))
	mkdir(t, filepath.Join(base, "m", "media", "archive"))
	symlink(t, filepath.Join(base, "x", "y"), filepath.Join(base, "m", "media", "current"))
	root := filepath.Join(base, "m", "media", "current") + "/../archive"
	s := library.Defaults()
	s.Roots = root
	s.Watch = false
	lib, err := library.New(context.Background(), slog.New(slog.NewTextHandler(io.Discard, nil)), filepath.Join(base, "state"), "w", s)
	if err != nil {
		t.Fatal(err)
	}
	defer lib.Store.Close()
	want := filepath.Join(base, "x", "archive")
	if got := lib.Executor.Roots.List(); len(got) != 1 || got[0] != want {
		t.Fatalf("root %s is %v, want [%s] as the kernel resolves it", root, got, want)
	}
}
