package sqldb

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"
	"modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"
)

// ExplainOpen adds the reason to SQLite's "unable to open database file"
// (SQLITE_CANTOPEN), which says only "out of memory (14)" whatever the
// cause: a directory that does not exist (a card not mounted, a symlink
// left dangling), one this process cannot write, a read-only file system.
// The reason is found by looking at the path as SQLite would have opened
// it. Any other error is returned as it is.
func ExplainOpen(path string, err error) error {
	var se *sqlite.Error
	if !errors.As(err, &se) || se.Code()&0xff != sqlite3.SQLITE_CANTOPEN {
		return err
	}
	if reason := cantOpenReason(path); reason != "" {
		return fmt.Errorf("%w (%s)", err, reason)
	}
	return err
}

func cantOpenReason(path string) string {
	target := path
	if fi, err := os.Lstat(path); err == nil && fi.Mode()&fs.ModeSymlink != 0 {
		if t, err := filepath.EvalSymlinks(path); err == nil {
			target = t
		} else if link, rerr := os.Readlink(path); rerr == nil {
			if !filepath.IsAbs(link) {
				link = filepath.Join(filepath.Dir(path), link)
			}
			return fmt.Sprintf("%s is a symlink to %s, which cannot be reached: %v", path, link, unwrapPath(err))
		}
	}
	if fi, err := os.Stat(target); err == nil {
		if fi.IsDir() {
			return target + " is a directory"
		}
		if err := unix.Access(target, unix.W_OK); err != nil {
			return fmt.Sprintf("%s cannot be written: %v", target, err)
		}
	}
	dir := filepath.Dir(target)
	fi, err := os.Stat(dir)
	switch {
	case err != nil:
		return fmt.Sprintf("its directory %s cannot be reached: %v", dir, unwrapPath(err))
	case !fi.IsDir():
		return fmt.Sprintf("%s is not a directory", dir)
	}
	if err := unix.Access(dir, unix.W_OK); err != nil {
		return fmt.Sprintf("its directory %s cannot be written: %v", dir, err)
	}
	return ""
}

// unwrapPath drops the operation and path a *fs.PathError repeats.
func unwrapPath(err error) error {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	return err
}
