package library

import (
	"fmt"
	"path/filepath"

	"github.com/vesta-cx/euterpe/daemon"
	"github.com/vesta-cx/euterpe/edge/library/pathsafe"
)

// stateSubdir is a directory of the state directory that the library
// writes into and removes from: the trash, the thumbnails.
type stateSubdir struct {
	what           string // "trash directory", for an error creating it
	setting, value string // the setting a refusal names, as the operator wrote it
	path           string
	outside        error // the reason when it is not inside the state directory
	// elsewhere allows a directory outside the state directory (the
	// thumbnails cache moved to a bigger disk by a symlink), still never
	// one overlapping a library root.
	elsewhere bool
}

// open creates the directory and resolves it, judging it by the directory
// it really is, before anything is created and again once it exists: a
// symlink on its way (or a ".." after one) can lead a directory that looks
// inside the state directory into a library root, where what the library
// writes there would be scanned as media and what it removes there would
// be the user's files. It must lie inside the state directory (the state
// directory itself holds library.db), or anywhere but the state directory
// itself when elsewhere is set, and overlap no library root.
func (d stateSubdir) open(state string, roots []string) (*pathsafe.Dir, error) {
	if !filepath.IsAbs(d.path) {
		return nil, d.refuse(d.outside.Error())
	}
	real, err := pathsafe.RealPath(d.path)
	if err != nil {
		return nil, d.refuse(fmt.Sprintf("%s: %v", d.outside, err))
	}
	if reason := d.misplaced(state, roots, real); reason != "" {
		return nil, d.refuse(reason)
	}
	dir, err := pathsafe.NewDir(d.path)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", d.what, err)
	}
	if reason := d.misplaced(state, roots, dir.Path()); reason != "" {
		return nil, d.refuse(reason)
	}
	return dir, nil
}

// misplaced is why real, the directory's real path, is refused, or "".
func (d stateSubdir) misplaced(state string, roots []string, real string) string {
	resolves := ""
	if real != filepath.Clean(d.path) {
		resolves = fmt.Sprintf(" (it resolves to %s)", real)
	}
	inside := pathsafe.Under(state, real) && real != state
	if !inside && (!d.elsewhere || real == state) {
		return d.outside.Error() + resolves
	}
	if !inside {
		// Scans skip the state directory only: outside it, a directory in
		// a root would be walked as media whatever the root's place.
		for _, root := range roots {
			if pathsafe.Under(real, root) || pathsafe.Under(root, real) {
				return fmt.Sprintf("%s must not overlap the library root %s%s", d.what, root, resolves)
			}
		}
		return ""
	}
	for _, root := range roots {
		// A state directory inside a root is skipped by scans, with all it
		// holds; a root inside the state directory is not.
		if pathsafe.Under(real, root) || (pathsafe.Under(root, real) && !pathsafe.Under(root, state)) {
			return fmt.Sprintf("%s must not overlap the library root %s%s", d.what, root, resolves)
		}
	}
	return ""
}

func (d stateSubdir) refuse(reason string) error {
	return &daemon.SettingError{Setting: d.setting, Value: d.value, Reason: reason}
}
