package serve

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/vesta-cx/euterpe/central/credentials"
	"github.com/vesta-cx/euterpe/daemon/sqldb"
)

// ErrFormerStateDir stops a start that would begin afresh in the state
// directory while what central keeps there sits in the former default one.
var ErrFormerStateDir = errors.New("central's state is in the former default state directory")

// Central once defaulted, outside systemd, to the edge's state directory.
// Its own default is now the unit's /var/lib/euterpe-central; these name
// the two so a start by hand that would begin afresh beside the old state
// refuses instead.
const (
	centralStateDir = "/var/lib/euterpe-central"
	formerStateDir  = "/var/lib/euterpe"
)

// pipelineDir is where the pipeline keeps its reports when
// EUTERPE_PIPELINE_STORAGE is empty (pipelinerole.StorageDir).
const pipelineDir = "pipeline"

// checkFormerStateDir refuses to start in the default state directory when
// it holds none of central's state and the former default holds some: the
// embedded database (jobs, requesters, edges) with its local key, or the
// pipeline's reports, which the database of any engine refers to. Starting
// would take new work into an empty database, seal new secrets with a new
// key, or store new reports apart from the old, while the old state stayed
// behind, unseen. Moving it, or setting EUTERPE_STATE_DIR to the former
// directory, ends the refusal.
func checkFormerStateDir(s Settings, stateDir, former string) error {
	if s.StateDir != stateDir {
		return nil
	}
	exists := func(dir, name string) bool {
		_, err := os.Stat(filepath.Join(dir, name))
		return err == nil || !errors.Is(err, fs.ErrNotExist) // unreadable: let the open say why
	}
	var kept []string
	if s.DatabaseURL == "" {
		kept = append(kept, sqldb.DefaultFile, credentials.LocalKeyFile)
	}
	kept = append(kept, pipelineDir)
	var found []string
	for _, name := range kept {
		if exists(stateDir, name) {
			return nil
		}
		if exists(former, name) {
			found = append(found, name)
		}
	}
	if len(found) == 0 {
		return nil
	}
	for i, name := range found {
		switch name {
		case sqldb.DefaultFile:
			found[i] = name + "*"
		case pipelineDir:
			found[i] = name + "/"
		}
	}
	return fmt.Errorf("%w %s, and %s has none: with central stopped, move %s into %s, or set EUTERPE_STATE_DIR=%s to keep using it there",
		ErrFormerStateDir, former, stateDir, strings.Join(found, ", "), stateDir, former)
}
