package library_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/vesta-cx/euterpe/daemon"
	"github.com/vesta-cx/euterpe/daemon/testsvc"
	"github.com/vesta-cx/euterpe/edge/library"
	"github.com/vesta-cx/euterpe/edge/library/store"
)

// TestTrashDirMustBeInsideState: EUTERPE_LIBRARY_TRASH_DIR outside the
// state directory (or the state directory itself, or a relative path) is
// refused by New with a *daemon.SettingError naming the setting, before
// library.db is created.
func TestTrashDirMustBeInsideState(t *testing.T) {
	base := t.TempDir()
	root := filepath.Join(base, "lib")
	os.MkdirAll(root, 0o755)
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	cases := []struct {
		name, trash string
		ok          bool
	}{
		{"sibling of the state directory", filepath.Join(base, "trash"), false},
		{"escapes with ..", "STATE/../trash", false},
		{"the state directory itself", "STATE", false},
		{"relative path", "trash", false},
		{"inside the state directory", "STATE/bin", true},
	}
	for i, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			state := filepath.Join(base, "state"+string(rune('a'+i)))
			s := library.Defaults()
			s.Roots = root
			s.Watch = false
			s.TrashDir = strings.ReplaceAll(c.trash, "STATE", state)
			lib, err := library.New(context.Background(), log, state, "w", s)
			if c.ok {
				if err != nil {
					t.Fatalf("trash %s refused: %v", s.TrashDir, err)
				}
				lib.Store.Close()
				return
			}
			var se *daemon.SettingError
			if !errors.As(err, &se) || se.Setting != "EUTERPE_LIBRARY_TRASH_DIR" ||
				!strings.Contains(err.Error(), "must be inside the state directory") {
				t.Fatalf("trash %s: err = %v, want a SettingError for EUTERPE_LIBRARY_TRASH_DIR", s.TrashDir, err)
			}
			if _, err := os.Stat(filepath.Join(state, "library.db")); !os.IsNotExist(err) {
				t.Fatalf("library.db created despite the refused setting: %v", err)
			}
			if _, err := os.Stat(s.TrashDir); filepath.IsAbs(s.TrashDir) && !os.IsNotExist(err) && s.TrashDir != state {
				t.Fatalf("refused trash directory was created: %v", err)
			}
		})
	}
}

// TestTrashDirSymlinksResolved: the trash directory is judged by the
// directory it really is, as the kernel will resolve it: a symlink in
// the state directory, or a ".." after one, that leads the trash into a
// library root or elsewhere outside the state directory is refused
// before anything is created there (deleted duplicates would land in the
// library, be scanned again, and the trash cleaner would remove files
// there); a state directory reached through a symlink accepts a trash
// spelled through the same symlink.
func TestTrashDirSymlinksResolved(t *testing.T) {
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	cases := []struct {
		name string
		// prepare builds the layout under base and returns the state
		// directory to pass, the trash setting, and where a wrongly
		// accepted trash would land.
		prepare func(t *testing.T, base, root string) (state, trash, lands string)
		ok      bool
	}{
		{"trash symlinked into a library root", func(t *testing.T, base, root string) (string, string, string) {
			state := filepath.Join(base, "state")
			mkdir(t, state)
			mkdir(t, filepath.Join(root, "album"))
			symlink(t, filepath.Join(root, "album"), filepath.Join(state, "trash"))
			return state, filepath.Join(state, "trash"), filepath.Join(root, "album")
		}, false},
		{"trash below a symlink into a library root", func(t *testing.T, base, root string) (string, string, string) {
			state := filepath.Join(base, "state")
			mkdir(t, state)
			symlink(t, root, filepath.Join(state, "lib"))
			return state, filepath.Join(state, "lib", "trash"), filepath.Join(root, "trash")
		}, false},
		{"default trash symlinked out of the state directory", func(t *testing.T, base, root string) (string, string, string) {
			state := filepath.Join(base, "state")
			mkdir(t, state)
			mkdir(t, filepath.Join(base, "elsewhere"))
			symlink(t, filepath.Join(base, "elsewhere"), filepath.Join(state, "trash"))
			return state, "", filepath.Join(base, "elsewhere")
		}, false},
		{"'..' after a symlink", func(t *testing.T, base, root string) (string, string, string) {
			state := filepath.Join(base, "state")
			mkdir(t, state)
			mkdir(t, filepath.Join(root, "deep", "er"))
			// Lexically <state>/trash; the kernel walks the link first:
			// <root>/deep/trash.
			symlink(t, filepath.Join(root, "deep", "er"), filepath.Join(state, "link"))
			return state, state + "/link/../trash", filepath.Join(root, "deep", "trash")
		}, false},
		{"trash symlinked to the state directory itself", func(t *testing.T, base, root string) (string, string, string) {
			state := filepath.Join(base, "state")
			mkdir(t, state)
			symlink(t, state, filepath.Join(state, "trash"))
			return state, filepath.Join(state, "trash"), ""
		}, false},
		{"state directory through a symlink and trash spelled through it", func(t *testing.T, base, root string) (string, string, string) {
			mkdir(t, filepath.Join(base, "real-state"))
			symlink(t, filepath.Join(base, "real-state"), filepath.Join(base, "state"))
			state := filepath.Join(base, "state")
			return state, filepath.Join(state, "bin"), ""
		}, true},
		{"trash symlinked to another directory inside the state directory", func(t *testing.T, base, root string) (string, string, string) {
			state := filepath.Join(base, "state")
			mkdir(t, filepath.Join(state, "var", "bin"))
			symlink(t, filepath.Join(state, "var", "bin"), filepath.Join(state, "trash"))
			return state, filepath.Join(state, "trash"), ""
		}, true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			base := t.TempDir()
			root := filepath.Join(base, "lib")
			mkdir(t, root)
			state, trash, lands := c.prepare(t, base, root)
			_, err := os.Lstat(lands)
			landsExisted := err == nil
			s := library.Defaults()
			s.Roots = root
			s.Watch = false
			s.TrashDir = trash
			lib, err := library.New(context.Background(), log, state, "w", s)
			if c.ok {
				if err != nil {
					t.Fatalf("trash %q refused: %v", trash, err)
				}
				defer lib.Store.Close()
				real, _ := filepath.EvalSymlinks(state)
				if got := lib.Trash.Dir; !strings.HasPrefix(got, real+"/") {
					t.Fatalf("trash at %s, outside the state directory %s", got, real)
				}
				return
			}
			if err == nil {
				lib.Store.Close()
			}
			var se *daemon.SettingError
			if !errors.As(err, &se) || se.Setting != "EUTERPE_LIBRARY_TRASH_DIR" ||
				!strings.Contains(err.Error(), "must be inside the state directory") {
				t.Fatalf("trash %q: err = %v, want a SettingError for EUTERPE_LIBRARY_TRASH_DIR", trash, err)
			}
			if _, err := os.Stat(filepath.Join(state, "library.db")); !os.IsNotExist(err) {
				t.Fatalf("library.db created despite the refused setting: %v", err)
			}
			if lands != "" {
				_, err := os.Lstat(lands)
				if !landsExisted && err == nil {
					t.Fatalf("refused trash directory %s was created", lands)
				}
				if entries, _ := os.ReadDir(lands); len(entries) != 0 {
					t.Fatalf("refused trash wrote into %s: %v", lands, entries)
				}
			}
		})
	}
}

// TestRootsMustNotOverlap: nested library roots are refused at start with
// a *daemon.SettingError naming EUTERPE_LIBRARY_ROOTS, before library.db
// is created.
func TestRootsMustNotOverlap(t *testing.T) {
	base := t.TempDir()
	outer := filepath.Join(base, "lib")
	inner := filepath.Join(outer, "music")
	mkdir(t, inner)
	for _, roots := range []string{outer + "," + inner, inner + "," + outer, outer + "," + outer} {
		state := filepath.Join(t.TempDir(), "state")
		s := library.Defaults()
		s.Roots = roots
		s.Watch = false
		lib, err := library.New(context.Background(), slog.New(slog.NewTextHandler(io.Discard, nil)), state, "w", s)
		if err == nil {
			lib.Store.Close()
		}
		var se *daemon.SettingError
		if !errors.As(err, &se) || se.Setting != "EUTERPE_LIBRARY_ROOTS" || !strings.Contains(err.Error(), "overlap") {
			t.Fatalf("roots %s: err = %v, want a SettingError for EUTERPE_LIBRARY_ROOTS saying they overlap", roots, err)
		}
		if _, err := os.Stat(filepath.Join(state, "library.db")); !os.IsNotExist(err) {
			t.Fatalf("library.db created despite the refused setting: %v", err)
		}
	}
}

func mkdir(t *testing.T, p string) {
	t.Helper()
	if err := os.MkdirAll(p, 0o755); err != nil {
		t.Fatal(err)
	}
}

func symlink(t *testing.T, target, link string) {
	t.Helper()
	if err := os.Symlink(target, link); err != nil {
		t.Fatal(err)
	}
}

// TestUnwritableRootWarns: a root this process cannot write (the unit's
// ProtectSystem=strict mounts it read-only until ReadWritePaths= lists it)
// still scans, but deletes would fail on it; New says so once per such
// root, naming the drop-in that fixes it, and stays quiet about the others.
// The drop-in's path has a "-", so that the unit still starts while the
// root's disk is not mounted.
func TestUnwritableRootWarns(t *testing.T) {
	base := t.TempDir()
	ro, rw := filepath.Join(base, "ro"), filepath.Join(base, "rw")
	mkdir(t, ro)
	mkdir(t, rw)
	defer library.SetRootWritable(func(root string) error {
		if root == ro {
			return syscall.EROFS
		}
		return nil
	})()
	var logs testsvc.LogBuffer
	s := library.Defaults()
	s.Roots = ro + "," + rw
	s.Watch = false
	lib, err := library.New(context.Background(), slog.New(slog.NewJSONHandler(&logs, nil)), filepath.Join(base, "state"), "w", s)
	if err != nil {
		t.Fatal(err)
	}
	lib.Store.Close()
	out := logs.String()
	if strings.Count(out, "library root is not writable") != 1 || !strings.Contains(out, "ReadWritePaths=-"+ro) {
		t.Fatalf("want one warning naming %s:\n%s", ro, out)
	}
	if strings.Contains(out, "ReadWritePaths=-"+rw+`"`) {
		t.Fatalf("a writable root was warned about:\n%s", out)
	}
}

// TestDefaultHashKeepsCatalogAlgorithm: under the default setting New hands
// hash jobs the algorithm of the digests library.db already holds (the one
// this machine would not choose for a new catalog), so starting a new
// version never re-hashes a library; it logs the choice.
func TestDefaultHashKeepsCatalogAlgorithm(t *testing.T) {
	ctx := context.Background()
	held := store.AlgoSHA256
	if library.MachineHashAlgorithm() == held {
		held = store.AlgoBLAKE3
	}
	state := filepath.Join(t.TempDir(), "state")
	mkdir(t, state)
	st, err := store.Open(ctx, filepath.Join(state, "library.db"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.DB.ExecContext(ctx, `INSERT INTO library_files(root, path, size_bytes, mtime_ns, hash_algorithm, content_hash, is_missing, needs_hash)
VALUES ('/lib', '/lib/a', 1, 1, ?, ?, 0, 0)`, held, strings.Repeat("cd", 32)); err != nil {
		t.Fatal(err)
	}
	st.Close()

	var logs testsvc.LogBuffer
	s := library.Defaults()
	s.Watch = false
	if s.HashAlgorithm != library.HashAuto {
		t.Fatalf("default EUTERPE_LIBRARY_HASH = %q, want %q", s.HashAlgorithm, library.HashAuto)
	}
	lib, err := library.New(ctx, slog.New(slog.NewJSONHandler(&logs, nil)), state, "w", s)
	if err != nil {
		t.Fatal(err)
	}
	lib.Store.Close()
	if lib.Policy.HashAlgorithm != held {
		t.Fatalf("hash jobs use %q, want the catalog's %s", lib.Policy.HashAlgorithm, held)
	}
	if out := logs.String(); !strings.Contains(out, `"algorithm":"`+held+`"`) || !strings.Contains(out, `"chosen_by":"the catalog"`) {
		t.Fatalf("the choice is not logged:\n%s", out)
	}
}
