package store_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/vesta-cx/euterpe/edge/library/store"
)

// A library.db that cannot be opened says why: before, the log and the
// console showed SQLite's "unable to open database file: out of memory
// (14)" for a database on a card that is not mounted.
func TestOpenSaysWhyTheDatabaseCannotBeOpened(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "library.db")
	card := filepath.Join(dir, "card-not-mounted")
	if err := os.Symlink(filepath.Join(card, "library.db"), path); err != nil {
		t.Fatal(err)
	}
	_, err := store.Open(context.Background(), path)
	if err == nil {
		t.Fatal("opened")
	}
	if !strings.Contains(err.Error(), "is a symlink to "+filepath.Join(card, "library.db")+", which cannot be reached") {
		t.Fatalf("%v", err)
	}
}
