package sqldb

import (
	"database/sql"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// SQLite answers every file it cannot open with "unable to open database
// file: out of memory (14)"; ExplainOpen says what is in the way, so the
// log and the console tell an operator what to fix.
func TestExplainOpenSaysWhy(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "a-file")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	dangling := filepath.Join(dir, "dangling.db")
	if err := os.Symlink(filepath.Join(dir, "card-not-mounted", "library.db"), dangling); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(dir, "a-dir.db"), 0o700); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name, path, want string
	}{
		{"directory missing", filepath.Join(dir, "missing", "x.db"), "its directory " + filepath.Join(dir, "missing") + " cannot be reached: no such file or directory"},
		{"dangling symlink", dangling, "is a symlink to " + filepath.Join(dir, "card-not-mounted", "library.db") + ", which cannot be reached"},
		{"parent is a file", filepath.Join(file, "x.db"), file + " is not a directory"},
		{"path is a directory", filepath.Join(dir, "a-dir.db"), "is a directory"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			db, err := sql.Open("sqlite", tc.path)
			if err != nil {
				t.Fatal(err)
			}
			defer db.Close()
			err = db.Ping()
			if err == nil {
				t.Fatal("opened")
			}
			got := ExplainOpen(tc.path, err)
			if !errors.Is(got, err) {
				t.Fatalf("%v does not wrap %v", got, err)
			}
			if !strings.Contains(got.Error(), tc.want) {
				t.Fatalf("%q\nwant it to say %q", got, tc.want)
			}
		})
	}
	other := errors.New("database is locked")
	if got := ExplainOpen(filepath.Join(dir, "missing", "x.db"), other); got != other {
		t.Fatalf("another error changed: %v", got)
	}
}
