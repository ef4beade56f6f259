package library_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/vesta-cx/euterpe/daemon"
	"github.com/vesta-cx/euterpe/edge/library"
)

// NewOpening refuses a bad setting at once, as New does; only a database
// that cannot be opened is left to Run.
func TestNewOpeningRefusesSettingsAtOnce(t *testing.T) {
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	state, card := t.TempDir(), filepath.Join(t.TempDir(), "card")
	if err := os.Symlink(filepath.Join(card, "library.db"), filepath.Join(state, "library.db")); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name  string
		set   func(*library.Settings)
		valid bool
	}{
		{"relative trash", func(s *library.Settings) { s.TrashDir = "trash" }, false},
		{"trash outside the state directory", func(s *library.Settings) { s.TrashDir = t.TempDir() }, false},
		{"relative root", func(s *library.Settings) { s.Roots = "lib" }, false},
		{"database cannot be opened", func(*library.Settings) {}, true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s := library.Defaults()
			c.set(&s)
			o, err := library.NewOpening(context.Background(), log, state, "w", s)
			var se *daemon.SettingError
			if c.valid {
				if err != nil {
					t.Fatalf("NewOpening: %v", err)
				}
				if o.Library() != nil {
					t.Fatal("the library is open on a link to nowhere")
				}
				return
			}
			if !errors.As(err, &se) {
				t.Fatalf("want a *daemon.SettingError, got %v", err)
			}
		})
	}
}

// A shutdown while the open is being retried ends Run at once, and nothing
// is opened afterwards even once the database could be.
func TestOpeningShutdownDuringRetriesOpensNothing(t *testing.T) {
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	state, card := t.TempDir(), filepath.Join(t.TempDir(), "card")
	if err := os.Symlink(filepath.Join(card, "library.db"), filepath.Join(state, "library.db")); err != nil {
		t.Fatal(err)
	}
	o, err := library.NewOpening(context.Background(), log, state, "w", library.Defaults())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- o.Run(ctx) }()
	time.Sleep(100 * time.Millisecond)
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Run: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Run did not stop")
	}
	if err := os.Mkdir(card, 0o700); err != nil {
		t.Fatal(err)
	}
	time.Sleep(1500 * time.Millisecond) // past the first retry's wait
	if _, err := os.Stat(filepath.Join(card, "library.db")); !os.IsNotExist(err) {
		t.Fatalf("the database was opened after the shutdown: %v", err)
	}
	if o.Library() != nil || o.Close() != nil {
		t.Fatal("an Opening stopped before opening holds no library")
	}
}
