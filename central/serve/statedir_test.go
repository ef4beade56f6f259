package serve

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/vesta-cx/euterpe/daemon/sqldb"
)

// A start by hand in the new default state directory refuses while
// central's state is still in the former one, and only then: the embedded
// database and its key on SQLite, the pipeline's reports on either engine.
func TestCheckFormerStateDir(t *testing.T) {
	for _, tc := range []struct {
		name            string
		current, former []string // what each directory holds
		databaseURL     bool
		explicit        bool // EUTERPE_STATE_DIR set to another directory
		want            []string
	}{
		{name: "database only in the former directory", former: []string{sqldb.DefaultFile, "central-kek", "pipeline/"},
			want: []string{"central.db*", "central-kek", "pipeline/"}},
		{name: "database in both: the current one is used", current: []string{sqldb.DefaultFile}, former: []string{sqldb.DefaultFile}},
		{name: "fresh install"},
		{name: "Postgres: the database is elsewhere", former: []string{sqldb.DefaultFile}, databaseURL: true},
		{name: "Postgres: the reports are in the former directory", former: []string{sqldb.DefaultFile, "pipeline/"}, databaseURL: true,
			want: []string{"pipeline/"}},
		{name: "Postgres: reports in both", current: []string{"pipeline/"}, former: []string{"pipeline/"}, databaseURL: true},
		{name: "state directory set by hand", former: []string{sqldb.DefaultFile}, explicit: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			current, former := t.TempDir(), t.TempDir()
			for dir, names := range map[string][]string{current: tc.current, former: tc.former} {
				for _, n := range names {
					var err error
					if strings.HasSuffix(n, "/") {
						err = os.Mkdir(filepath.Join(dir, n), 0o700)
					} else {
						err = os.WriteFile(filepath.Join(dir, n), []byte("x"), 0o600)
					}
					if err != nil {
						t.Fatal(err)
					}
				}
			}
			s := Settings{StateDir: current}
			if tc.explicit {
				s.StateDir = t.TempDir()
			}
			if tc.databaseURL {
				s.DatabaseURL = "postgres://127.0.0.1/db"
			}
			err := checkFormerStateDir(s, current, former)
			if got := errors.Is(err, ErrFormerStateDir); got != (tc.want != nil) {
				t.Fatalf("refused = %v (%v), want %v", got, err, tc.want != nil)
			}
			if tc.want != nil {
				for _, w := range []string{former, current, "EUTERPE_STATE_DIR=" + former, "move " + strings.Join(tc.want, ", ") + " into"} {
					if !strings.Contains(err.Error(), w) {
						t.Errorf("%q does not say %q", err, w)
					}
				}
			}
		})
	}
}
