package executor

import (
	"errors"
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

// renameat2 is unix.Renameat2; tests replace it to act as a filesystem
// without RENAME_NOREPLACE (NFS, some FUSE filesystems), which answers
// EINVAL.
var renameat2 = unix.Renameat2

// renameNoReplace moves, by name, whatever entry fromName is in from to
// toName in to, without replacing an existing toName. It must be a rename
// even where RENAME_NOREPLACE is missing: the caller checks what arrived
// and puts anything swapped in back, which only works if the move took
// the entry that was at fromName at that instant. So the fallback checks
// that toName is free and then renames; its window only concerns toName,
// which is always a name of ours (a fresh trash/<job>/<file>/ directory,
// or the hidden staging name), never a name a user keeps data under.
func renameNoReplace(from *os.File, fromName string, to *os.File, toName string) error {
	err := renameat2(int(from.Fd()), fromName, int(to.Fd()), toName, unix.RENAME_NOREPLACE)
	if !errors.Is(err, unix.EINVAL) {
		return err
	}
	var st unix.Stat_t
	if err := unix.Fstatat(int(to.Fd()), toName, &st, unix.AT_SYMLINK_NOFOLLOW); err == nil {
		return fmt.Errorf("rename %s: %w", toName, unix.EEXIST)
	}
	return unix.Renameat(int(from.Fd()), fromName, int(to.Fd()), toName)
}

// putBack moves an entry of ours (in the trash, or at the staging name)
// back to toName in the library, where a user may have created a new
// file since it was moved away: that file must never be replaced. Without
// RENAME_NOREPLACE the entry is hard-linked to toName (linkat never
// replaces, and does not follow a symlink) and then its own name is
// removed. A directory cannot be hard-linked; it is renamed, which
// replaces nothing but an empty directory. A filesystem without hard links
// gets an error, so the entry stays where it is and the caller names it.
func putBack(from *os.File, fromName string, to *os.File, toName string) error {
	err := renameat2(int(from.Fd()), fromName, int(to.Fd()), toName, unix.RENAME_NOREPLACE)
	if !errors.Is(err, unix.EINVAL) {
		return err
	}
	var st unix.Stat_t
	if err := unix.Fstatat(int(from.Fd()), fromName, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return err
	}
	if st.Mode&unix.S_IFMT == unix.S_IFDIR {
		return unix.Renameat(int(from.Fd()), fromName, int(to.Fd()), toName)
	}
	if err := unix.Linkat(int(from.Fd()), fromName, int(to.Fd()), toName, 0); err != nil {
		return fmt.Errorf("link %s back: %w", toName, err)
	}
	if err := unix.Unlinkat(int(from.Fd()), fromName, 0); err != nil {
		return fmt.Errorf("put back, but %s also stays: %w", fromName, err)
	}
	return nil
}
