package policy

import (
	"fmt"
	"os"
	"syscall"

	"github.com/vesta-cx/euterpe/edge/library/pathsafe"
)

// OpenReady opens a ready thumbnail's cache file for serving: only a
// regular file inside the thumbnails directory, its last element not
// followed if it is a symlink. A row pointing anywhere else was not
// written by the executor, and what it names is never served.
func (p *Policy) OpenReady(t Thumb) (*os.File, error) {
	dir, err := pathsafe.NewDir(p.ThumbsDir)
	if err != nil {
		return nil, fmt.Errorf("thumbnails directory: %w", err)
	}
	if err := dir.Contains(t.OutputPath); err != nil {
		return nil, err
	}
	f, err := os.OpenFile(t.OutputPath, os.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, err
	}
	if st, err := f.Stat(); err != nil || !st.Mode().IsRegular() {
		f.Close()
		return nil, fmt.Errorf("%w: thumbnail cache file %q is not a regular file", pathsafe.ErrOutside, t.OutputPath)
	}
	return f, nil
}
