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
// cannot be put back (a new file took its name); an error when ctx ends
// while it waits for the lock or checks the staged file and its copy, or
// when a root holding the files cannot be opened to be locked (both are
// then left as they are, for the next run).
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
	paths := []string{f.Path}
	for _, kp := range kept {
		paths = append(paths, kp.path)
	}
	unlock, err := x.lockDeletes(ctx, paths...)
	if err != nil {
		return f, "", err
	}
	defer unlock()
	name := filepath.Base(f.Path)
	staged := filepath.Join(filepath.Dir(f.Path), stage)
	done, err := x.finishStaged(ctx, dir, stage, jobID, id, name, k, kept)
	if err != nil && ctx.Err() != nil {
		// Stopped while it hashed the two: putting the file back now would
		// leave it beside its complete copy, whose name a later move could
		// not take. Left as found, the next run checks them again.
		return f, "", fmt.Errorf("finish a staged move of %s: %w", staged, ctx.Err())
	}
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
	if x.stagedStep != nil {
		x.stagedStep("recovering", filepath.Join(dir.Name(), stage))
	}
	for _, r := range []*os.File{src, dst} {
		if _, err := r.Seek(0, io.SeekStart); err != nil {
			return false, err
		}
		if d, err := HashReader(ctx, r, k.Algorithm, nil); err != nil || d != k.HashHex {
			return false, err
		}
	}
	// The kill may have come before the copy got the file's owner, mode
	// and times; whatever it caught of the copy's sync is done now, before
	// the only other copy goes.
	if err := copyMeta(int(dst.Fd()), tdir, name, sst); err != nil {
		return false, err
	}
	if err := dst.Sync(); err != nil {
		return false, err
	}
	if err := syncDir(tdir); err != nil {
		return false, err
	}
	// The staged name is unlinked by name: it must still be the file just
	// hashed, untouched (a rename or write moves the ctime), not what was
	// put there meanwhile (the kept file itself, moved over it).
	var now unix.Stat_t
	if err := unix.Fstat(int(src.Fd()), &now); err != nil {
		return false, err
	}
	if now.Size != sst.Size || now.Mtim != sst.Mtim || now.Ctim != sst.Ctim || !namesFile(place{dir: dir, name: stage}, keyOf(sst)) {
		return false, fmt.Errorf("%w: %s changed while it was checked", errPathChanged, filepath.Join(dir.Name(), stage))
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

// copyToTrash copies the staged file t (at), from the descriptor that was
// hashed, into a new file name in tdir, and checks the copy before the
// caller unlinks the original: the copy must hash to group k, and the
// file must not have changed while it was read. A check by path cannot
// see a writer that opened the file before it was staged (a tag editor,
// a download finishing): its writes during the copy would be left out of
// it, or tear it, and go with the unlinked original. A copy that fails
// either check is removed and the error says why. A write after the
// check and before the unlink is still lost with the original; a rename
// within one filesystem has no such window, a copy cannot close it.
func (x *Executor) copyToTrash(ctx context.Context, t *pinned, at place, tdir *os.File, name string, k store.GroupKey) error {
	var before, after unix.Stat_t
	if err := unix.Fstat(int(t.file.Fd()), &before); err != nil {
		return fmt.Errorf("copy to trash on another filesystem: %w", err)
	}
	digest, err := copyInto(ctx, t.file, &before, tdir, name, k.Algorithm)
	if err != nil {
		return fmt.Errorf("copy to trash on another filesystem: %w", err)
	}
	if x.stagedStep != nil {
		x.stagedStep("copied", at.path)
	}
	// The staging rename moved the ctime; size and mtime are still the
	// hashed file's unless it was written to since its last check.
	err = unix.Fstat(int(t.file.Fd()), &after)
	switch {
	case err != nil:
		err = fmt.Errorf("copy to trash on another filesystem: %w", err)
	case digest != k.HashHex || before.Size != t.size || before.Mtim.Nano() != t.mtimeNS:
		err = fmt.Errorf("%w: %s was written to after its last check; its copy in the trash no longer holds the group's content", errPathChanged, t.path)
	case after.Size != before.Size || after.Mtim != before.Mtim || after.Ctim != before.Ctim:
		// (also a rename or unlink of the staged name: each moves the ctime)
		err = fmt.Errorf("%w: %s was written to or moved while it was copied to the trash", errPathChanged, t.path)
	case !namesFile(at, t.key):
		// The caller unlinks by name: something put there during the copy
		// (the kept file itself, moved over it) must not be what goes.
		err = fmt.Errorf("%w: %s no longer names the file that was staged", errPathChanged, at.path)
	}
	if err != nil {
		_ = unix.Unlinkat(int(tdir.Fd()), name, 0)
		return err
	}
	return nil
}

// copyInto copies src from its start into a new file name in dir (an
// existing file is never overwritten), gives it st's owner, permissions
// and times, syncs it and dir, and returns the digest of what it wrote.
// The copy is created readable by its owner only, so a private file is
// never open to others while it is written.
func copyInto(ctx context.Context, src *os.File, st *unix.Stat_t, dir *os.File, name, algo string) (string, error) {
	if _, err := src.Seek(0, io.SeekStart); err != nil {
		return "", err
	}
	fd, err := unix.Openat(int(dir.Fd()), name, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return "", err
	}
	out := os.NewFile(uintptr(fd), name)
	fail := func(err error) (string, error) {
		out.Close()
		_ = unix.Unlinkat(int(dir.Fd()), name, 0)
		return "", err
	}
	digest, err := HashReader(ctx, io.TeeReader(src, out), algo, nil)
	if err != nil {
		return fail(err)
	}
	if err := copyMeta(fd, dir, name, st); err != nil {
		return fail(err)
	}
	if err := out.Sync(); err != nil {
		return fail(err)
	}
	if err := out.Close(); err != nil {
		_ = unix.Unlinkat(int(dir.Fd()), name, 0)
		return "", err
	}
	// The original is unlinked next, on another filesystem: the copy's
	// name must be on disk before that, or a power cut could keep neither.
	if err := syncDir(dir); err != nil {
		_ = unix.Unlinkat(int(dir.Fd()), name, 0)
		return "", fmt.Errorf("sync the trash directory: %w", err)
	}
	return digest, nil
}

// copyMeta gives the copy fd, named name in dir, the owner, permissions
// and access and modification times of st, as a rename would have kept
// them: a restore from the trash gets the file back as it was. Where the
// owner cannot be given away (not root), the copy stays its maker's and
// loses any set-user or set-group bit, as cp -p does.
func copyMeta(fd int, dir *os.File, name string, st *unix.Stat_t) error {
	mode := st.Mode & 0o7777
	if err := unix.Fchown(fd, int(st.Uid), int(st.Gid)); err != nil {
		if !errors.Is(err, unix.EPERM) {
			return fmt.Errorf("chown the copy: %w", err)
		}
		mode &^= unix.S_ISUID | unix.S_ISGID
	}
	if err := unix.Fchmod(fd, mode); err != nil {
		return fmt.Errorf("chmod the copy: %w", err)
	}
	ts := []unix.Timespec{st.Atim, st.Mtim}
	if err := unix.UtimesNanoAt(int(dir.Fd()), name, ts, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return fmt.Errorf("set the copy's times: %w", err)
	}
	return nil
}

// namesFile reports whether at names the regular file key, without
// following a link.
func namesFile(at place, key fileKey) bool {
	var st unix.Stat_t
	return unix.Fstatat(int(at.dir.Fd()), at.name, &st, unix.AT_SYMLINK_NOFOLLOW) == nil &&
		st.Mode&unix.S_IFMT == unix.S_IFREG && keyOf(&st) == key
}
