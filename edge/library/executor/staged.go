package executor

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"

	"github.com/vesta-cx/euterpe/edge/library/store"
)

// stagePrefix starts the hidden name, in the file's own directory, that a
// delete to a trash on another filesystem moves the file to before it
// copies it into the trash. Scans leave such names out of the catalog: a
// staged file belongs to its delete (or to the rerun that finishes or
// undoes it), and a later job that kept it by that name could have it
// unlinked under it.
const stagePrefix = ".euterpe-delete-"

func stageName(jobID, fileID int64) string {
	return fmt.Sprintf("%s%d-%d", stagePrefix, jobID, fileID)
}

// recoverStaged finishes or undoes what an earlier run of job jobID, killed
// during a move to a trash on another filesystem, left of file id. That
// move renames the file to stageName in its directory, checks it, copies
// it into trash/<job>/<file>/<name>, syncs the copy and unlinks the staged
// name, all under the delete lock; a kill leaves the staged name with no
// copy in the trash, part of one, or all of it. Under the lock now (no
// live run of any job holds a staged name outside it):
//
//   - a complete copy (the staged file and the trash file both hold the
//     group's content, and the staged file is no kept file) is synced and
//     the staged name unlinked: the earlier run had made every check, and
//     movedBefore then records the file trashed;
//   - otherwise a copy cut short (a prefix of the staged file) is removed,
//     and the staged entry, whatever it is, is put back at its name
//     without replacing anything there, so the file is decided again from
//     the start; a staged name that is already another link of the file
//     at its name (a put back by link stopped halfway) is just removed.
//
// It returns a refusal reason, naming where the file is, when the entry
// cannot be put back (a new file took its name); an error only when ctx
// ends while it waits for the lock.
func (x *Executor) recoverStaged(ctx context.Context, jobID, id int64, k store.GroupKey, kept []*pinned) (store.File, string, error) {
	f, err := x.Store.GetFile(ctx, id)
	if err != nil || f.Path == "" || !filepath.IsAbs(f.Path) || filepath.Clean(f.Path) != f.Path {
		return f, "", nil
	}
	dir, _, err := openDirNoSymlinks(filepath.Dir(f.Path))
	if err != nil {
		return f, "", nil
	}
	defer dir.Close()
	stage := stageName(jobID, id)
	var st unix.Stat_t
	if err := unix.Fstatat(int(dir.Fd()), stage, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return f, "", nil
	}
	unlock, err := x.lockDeletes(ctx)
	if err != nil {
		return f, "", err
	}
	defer unlock()
	name := filepath.Base(f.Path)
	staged := filepath.Join(filepath.Dir(f.Path), stage)
	done, err := x.finishStaged(ctx, dir, stage, jobID, id, name, k, kept)
	if err != nil {
		x.Log.Warn("delete: could not finish a staged move", "path", staged, "err", err)
	}
	if done {
		x.Log.Info("delete: finished a move to the trash a stopped run left staged", "path", staged)
		return f, "", nil
	}
	err = putBack(dir, stage, dir, name)
	if errors.Is(err, unix.ENOENT) {
		return f, "", nil
	}
	if errors.Is(err, unix.EEXIST) && sameFileAt(dir, stage, name, kept) {
		// A put back by link, stopped before it removed the staged name:
		// that name is all that is left to undo.
		if err = unix.Unlinkat(int(dir.Fd()), stage, 0); err == nil {
			x.Log.Info("delete: finished putting back a file a stopped run left staged", "path", f.Path)
			return f, "", nil
		}
	}
	if err != nil {
		return f, fmt.Sprintf("an earlier run of this job was stopped while moving the file to the trash and left it at %s; it could not be put back at %s: %v",
			staged, f.Path, err), nil
	}
	x.Log.Info("delete: put back a file a stopped run left staged", "path", f.Path)
	return f, "", nil
}

// finishStaged completes a staged move whose copy in the trash is
// complete, and removes a copy cut short; it reports whether the move is
// complete (the staged name gone).
func (x *Executor) finishStaged(ctx context.Context, dir *os.File, stage string, jobID, id int64, name string, k store.GroupKey, kept []*pinned) (bool, error) {
	tdir, err := x.openTrashEntry(jobID, id, false)
	if err != nil {
		return false, nil
	}
	defer tdir.Close()
	src, sst, err := openRegular(dir, stage)
	if err != nil {
		return false, nil
	}
	defer src.Close()
	for _, kp := range kept {
		if kp.key == keyOf(sst) {
			return false, nil // a kept file's name: put back, and refused again
		}
	}
	dst, dstat, err := openRegular(tdir, name)
	if err != nil {
		return false, nil
	}
	defer dst.Close()
	if dstat.Size < sst.Size {
		if prefix, err := isPrefix(dst, src); err != nil || !prefix {
			return false, err
		}
		// The copy was cut short: the re-run copies again.
		return false, unix.Unlinkat(int(tdir.Fd()), name, 0)
	}
	for _, r := range []*os.File{src, dst} {
		if _, err := r.Seek(0, io.SeekStart); err != nil {
			return false, err
		}
		if d, err := HashReader(ctx, r, k.Algorithm, nil); err != nil || d != k.HashHex {
			return false, err
		}
	}
	// Whatever the kill caught of the copy's sync is done now, before the
	// only other copy goes.
	if err := dst.Sync(); err != nil {
		return false, err
	}
	if err := syncDir(tdir); err != nil {
		return false, err
	}
	if err := unix.Unlinkat(int(dir.Fd()), stage, 0); err != nil {
		return false, err
	}
	return true, nil
}

// sameFileAt reports whether names a and b in dir are one regular file
// (hard links) that is none of the kept files.
func sameFileAt(dir *os.File, a, b string, kept []*pinned) bool {
	var sa, sb unix.Stat_t
	if unix.Fstatat(int(dir.Fd()), a, &sa, unix.AT_SYMLINK_NOFOLLOW) != nil ||
		unix.Fstatat(int(dir.Fd()), b, &sb, unix.AT_SYMLINK_NOFOLLOW) != nil ||
		sa.Mode&unix.S_IFMT != unix.S_IFREG || keyOf(&sa) != keyOf(&sb) {
		return false
	}
	for _, k := range kept {
		if k.key == keyOf(&sa) {
			return false
		}
	}
	return true
}

// openRegular opens name in dir for reading without following a link
// (or blocking on a fifo) and returns it when it is a regular file.
func openRegular(dir *os.File, name string) (*os.File, *unix.Stat_t, error) {
	fd, err := unix.Openat(int(dir.Fd()), name, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, nil, err
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil || st.Mode&unix.S_IFMT != unix.S_IFREG {
		unix.Close(fd)
		return nil, nil, fmt.Errorf("%s is not a regular file", name)
	}
	return os.NewFile(uintptr(fd), name), &st, nil
}

// isPrefix reports whether short's bytes begin long.
func isPrefix(short, long *os.File) (bool, error) {
	for _, r := range []*os.File{short, long} {
		if _, err := r.Seek(0, io.SeekStart); err != nil {
			return false, err
		}
	}
	a, b := make([]byte, 64<<10), make([]byte, 64<<10)
	for {
		n, err := io.ReadFull(short, a)
		if n > 0 {
			if _, err := io.ReadFull(long, b[:n]); err != nil {
				return false, nil
			}
			if !bytes.Equal(a[:n], b[:n]) {
				return false, nil
			}
		}
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
			return true, nil
		}
		if err != nil {
			return false, err
		}
	}
}
