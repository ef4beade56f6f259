package daemon

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"testing"
)

// PlaceFile replaces with os.Rename, refuses with os.Link (fs.ErrExist, the
// file kept), and leaves no temporary file either way.
func TestPlaceFile(t *testing.T) {
	for _, tc := range []struct {
		name    string
		place   func(string, string) error
		want    string
		errWant error
	}{
		{"rename replaces", os.Rename, "new\n", nil},
		{"link keeps the file there", os.Link, "old\n", fs.ErrExist},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			path := filepath.Join(dir, "f")
			if err := os.WriteFile(path, []byte("old\n"), 0o600); err != nil {
				t.Fatal(err)
			}
			err := PlaceFile(path, []byte("new\n"), tc.place)
			if !errors.Is(err, tc.errWant) || (tc.errWant == nil && err != nil) {
				t.Fatalf("err = %v, want %v", err, tc.errWant)
			}
			if b, _ := os.ReadFile(path); string(b) != tc.want {
				t.Fatalf("file holds %q, want %q", b, tc.want)
			}
			if ents, _ := os.ReadDir(dir); len(ents) != 1 {
				t.Fatalf("%d entries left in the directory", len(ents))
			}
		})
	}
}
