package serve

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/vesta-cx/euterpe/daemon/sqldb"
)

// A start by hand in the new default state directory refuses while the
// database in use is still in the former one, and only then.
func TestCheckFormerStateDir(t *testing.T) {
	withDB := func(t *testing.T) string {
		d := t.TempDir()
		if err := os.WriteFile(filepath.Join(d, sqldb.DefaultFile), []byte("x"), 0o600); err != nil {
			t.Fatal(err)
		}
		return d
	}
	for _, tc := range []struct {
		name                  string
		currentDB, formerDB   bool
		databaseURL, explicit bool
		refuse                bool
	}{
		{"database only in the former directory", false, true, false, false, true},
		{"database in both: the current one is used", true, true, false, false, false},
		{"fresh install", false, false, false, false, false},
		{"Postgres configured", false, true, true, false, false},
		{"state directory set by hand", false, true, false, true, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			current, former := t.TempDir(), t.TempDir()
			if tc.currentDB {
				current = withDB(t)
			}
			if tc.formerDB {
				former = withDB(t)
			}
			s := Settings{StateDir: current}
			if tc.explicit {
				s.StateDir = t.TempDir()
			}
			if tc.databaseURL {
				s.DatabaseURL = "postgres://127.0.0.1/db"
			}
			err := checkFormerStateDir(s, current, former)
			if got := errors.Is(err, ErrFormerStateDir); got != tc.refuse {
				t.Fatalf("refused = %v (%v), want %v", got, err, tc.refuse)
			}
			if tc.refuse {
				for _, want := range []string{former, current, "EUTERPE_STATE_DIR=" + former, "central-kek"} {
					if !strings.Contains(err.Error(), want) {
						t.Errorf("%q does not say %q", err, want)
					}
				}
			}
		})
	}
}
