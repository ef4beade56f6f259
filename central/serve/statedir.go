package serve

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/vesta-cx/euterpe/central/credentials"
	"github.com/vesta-cx/euterpe/daemon/sqldb"
)

// ErrFormerStateDir stops a start that would open an empty database while
// the one in use sits in the former default state directory.
var ErrFormerStateDir = errors.New("the embedded database is in the former default state directory")

// Central once defaulted, outside systemd, to the edge's state directory.
// Its own default is now the unit's /var/lib/euterpe-central; these name the
// two so a start by hand that would open a new, empty database beside the
// old one refuses instead.
const (
	centralStateDir = "/var/lib/euterpe-central"
	formerStateDir  = "/var/lib/euterpe"
)

// checkFormerStateDir refuses to start on the embedded database in the
// default state directory when that directory has no database yet and the
// former default holds one: starting would take new jobs, requesters and a
// new local key into an empty database while every queued job and sealed
// secret stayed behind in the old file, unseen. Moving the files, or
// setting EUTERPE_STATE_DIR to the former directory, ends the refusal.
func checkFormerStateDir(s Settings, stateDir, former string) error {
	if s.DatabaseURL != "" || s.StateDir != stateDir {
		return nil
	}
	exists := func(p string) (bool, error) {
		_, err := os.Stat(p)
		if errors.Is(err, fs.ErrNotExist) {
			return false, nil
		}
		return err == nil, err
	}
	current, err := exists(filepath.Join(stateDir, sqldb.DefaultFile))
	if err != nil || current {
		return nil // opening it reports what is wrong with it
	}
	old, err := exists(filepath.Join(former, sqldb.DefaultFile))
	if err != nil || !old {
		return nil
	}
	return fmt.Errorf("%w %s, and %s has none: with central stopped, move %s* and %s into %s, or set EUTERPE_STATE_DIR=%s to keep using it there",
		ErrFormerStateDir, former, stateDir, sqldb.DefaultFile, credentials.LocalKeyFile, stateDir, former)
}
