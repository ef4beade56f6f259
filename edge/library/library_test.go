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
