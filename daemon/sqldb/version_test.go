package sqldb

import (
	"context"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// Every SQLite database here is written by several connections that
// checkpoint on their own (the checkpoint loop of each handle, several
// processes on central's shared file). SQLite before 3.51.3 has the
// WAL-reset bug: a checkpoint started just after another completed, while a
// third connection restarts the WAL with a commit, records frames as
// copied that were not, and the database is corrupt ("database disk image
// is malformed", seen once in the SIGKILL test of shared central
// processes). The bundled SQLite must have the fix.
func TestSQLiteHasTheWALResetFix(t *testing.T) {
	db, err := openSQLite(context.Background(), sqliteOptions{path: filepath.Join(t.TempDir(), "v.db"), synchronous: "NORMAL"})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var v string
	if err := db.QueryRow(`SELECT sqlite_version()`).Scan(&v); err != nil {
		t.Fatal(err)
	}
	if !atLeast(v, 3, 51, 3) {
		t.Fatalf("SQLite %s has the WAL-reset bug (fixed in 3.51.3): upgrade modernc.org/sqlite", v)
	}
}

// atLeast compares a dotted version with major.minor.patch.
func atLeast(v string, want ...int) bool {
	parts := strings.Split(v, ".")
	for i, w := range want {
		n := 0
		if i < len(parts) {
			n, _ = strconv.Atoi(parts[i])
		}
		if n != w {
			return n > w
		}
	}
	return true
}

func TestAtLeast(t *testing.T) {
	for _, tc := range []struct {
		v    string
		want bool
	}{{"3.51.2", false}, {"3.51.3", true}, {"3.52.0", true}, {"3.7.17", false}, {"4.0", true}, {"3.51", false}} {
		if got := atLeast(tc.v, 3, 51, 3); got != tc.want {
			t.Errorf("atLeast(%q) = %v", tc.v, got)
		}
	}
}
