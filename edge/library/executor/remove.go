package executor

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"

	"golang.org/x/sys/unix"

	"github.com/vesta-cx/euterpe/edge/library/pathsafe"
	"github.com/vesta-cx/euterpe/edge/library/store"
	"github.com/vesta-cx/euterpe/edge/library/trash"
)

// lockDeletes takes a lock on each library root that holds one of paths
// (trash.FlockContext on the root directory), then the trash lock
// (trash.LockContext). The trash lock serialises the final check and the
// act of every delete sharing this trash (other jobs, executors and
// processes), so two deletes in one group cannot each see the other's file
// as the kept copy and both act; the trash cleaner holds it too. The root
// locks do the same for processes that share the library's files but each
// have a trash of their own. Roots are locked once per directory and in
// the order of their (device, inode), whatever path names them, so a root
// mounted twice or named differently by another process neither waits on
// itself nor deadlocks. A root whose filesystem has no flock is logged
// once and left unlocked. It stops waiting when ctx ends.
func (x *Executor) lockDeletes(ctx context.Context, paths ...string) (func(), error) {
	var unlocks []func()
	unlock := func() {
		for i := len(unlocks) - 1; i >= 0; i-- {
			unlocks[i]()
		}
	}
	roots, err := x.openRoots(paths)
	if err != nil {
		return nil, err
	}
	flock := x.rootFlock
	if flock == nil {
		flock = trash.FlockContext
	}
	for i, r := range roots {
		u, err := flock(ctx, r.fd, "lock "+r.path)
		// ENOLCK, EOPNOTSUPP: no flock there. EBADF: NFS, where flock is
		// a byte-range lock that needs a descriptor open for writing,
		// which a directory never is.
		if errors.Is(err, unix.ENOLCK) || errors.Is(err, unix.EOPNOTSUPP) || errors.Is(err, unix.EBADF) {
			x.noRootLock.Do(func() {
				x.Log.Warn("a library root cannot be locked; deletes from processes with different trash directories are not kept apart there",
					"root", r.path, "err", err)
			})
			continue
		}
		if err != nil {
			for _, rest := range roots[i+1:] {
				unix.Close(rest.fd)
			}
			unlock()
			return nil, err
		}
		unlocks = append(unlocks, u)
	}
	u, err := trash.LockContext(ctx, x.Trash.Path())
	if err != nil {
		unlock()
		return nil, err
	}
	unlocks = append(unlocks, u)
	return unlock, nil
}

type openRoot struct {
	path string
	fd   int
	key  fileKey
}

// openRoots opens the configured roots that hold one of paths, one
// descriptor per directory, sorted by (device, inode).
func (x *Executor) openRoots(paths []string) ([]openRoot, error) {
	var out []openRoot
	closeAll := func() {
		for _, r := range out {
			unix.Close(r.fd)
		}
	}
	for _, root := range x.Roots.List() {
		if !slices.ContainsFunc(paths, func(p string) bool { return pathsafe.Under(root, p) }) {
			continue
		}
		fd, err := unix.Open(root, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		if err != nil {
			closeAll()
			return nil, fmt.Errorf("lock %s: %w", root, err)
		}
		var st unix.Stat_t
		if err := unix.Fstat(fd, &st); err != nil {
			unix.Close(fd)
			closeAll()
			return nil, fmt.Errorf("lock %s: %w", root, err)
		}
		k := keyOf(&st)
		if slices.ContainsFunc(out, func(r openRoot) bool { return r.key == k }) {
			unix.Close(fd)
			continue
		}
		out = append(out, openRoot{path: root, fd: fd, key: k})
	}
	slices.SortFunc(out, func(a, b openRoot) int {
		if c := cmp.Compare(a.key.dev, b.key.dev); c != 0 {
			return c
		}
		return cmp.Compare(a.key.ino, b.key.ino)
	})
	return out, nil
}

// remove moves the pinned file t to trash/<job>/<file id>/<name>, or
// unlinks it when permanent. Under the delete lock it first re-checks that
// at least one kept copy is still in place and unchanged (path, device,
// inode, size, mtime) and that t's path still names the file that was
// hashed. The act itself never resolves the path again: the file is
// renamed, by name, out of the directory descriptor opened when it was
// pinned (renameat2 RENAME_NOREPLACE, which never follows a link), and
// what was moved is checked to be the hashed inode; anything else (a swap
// in the instant between the check and the rename) is renamed back and
// the deletion refused. A permanent delete unlinks only the moved, checked
// file. A trash on another filesystem is filled by copying from the
// descriptor that was hashed, after the original was moved aside within
// its own directory and checked; the original is unlinked only once the
// copy hashes to group k and the file did not change while it was read
// (copyToTrash). Nothing is moved once ctx has ended
// (checked after the lock is taken, before the final checks); from the
// final checks on, the act runs to its end.
func (x *Executor) remove(ctx context.Context, jobID, fileID int64, t *pinned, k store.GroupKey, kept []*pinned, permanent bool) (string, *string, error) {
	paths := []string{t.path}
	for _, k := range kept {
		paths = append(paths, k.path)
	}
	unlock, err := x.lockDeletes(ctx, paths...)
	if err != nil {
		return "", nil, err
	}
	defer unlock()
	if x.beforeFinalCheck != nil {
		x.beforeFinalCheck(t.path)
	}
	// The wait for the lock can be long (another delete copying to a trash
	// on another filesystem, a sweep): a job whose lease was lost meanwhile
	// may already be re-run elsewhere, and a stopping daemon would not get
	// to record the act. The re-run decides instead.
	if err := ctx.Err(); err != nil {
		return "", nil, fmt.Errorf("interrupted while waiting for the delete lock: %w", err)
	}
	// The file to delete first: a link swapped in for it also moves the
	// kept file's ctime, and the refusal should name the swap.
	if err := x.unchanged(t); err != nil {
		return "", nil, err
	}
	live := 0
	for _, k := range kept {
		if k.key == t.key {
			return "", nil, fmt.Errorf("%s is the same file as kept %s", t.path, k.path)
		}
		if x.unchanged(k) == nil {
			live++
		}
	}
	if live == 0 {
		return "", nil, errors.New("no kept copy is still in place unchanged; refusing to delete what may be the last copy")
	}
	if x.beforeMove != nil {
		x.beforeMove(t.path)
	}

	name := filepath.Base(t.path)
	tdir, err := x.trashEntry(jobID, fileID)
	if err != nil {
		return "", nil, err
	}
	defer tdir.Close()
	dst := filepath.Join(tdir.Name(), name)

	// Move aside: into the trash, or — across filesystems — to a hidden
	// name in the file's own directory.
	at := place{dir: tdir, name: name, path: dst}
	inTrash := true
	if x.rename != nil {
		err = x.rename(t.path, dst)
	} else {
		err = renameNoReplace(t.dir, name, tdir, name)
	}
	if errors.Is(err, unix.EXDEV) {
		stage := stageName(jobID, fileID)
		at = place{dir: t.dir, name: stage, path: filepath.Join(filepath.Dir(t.path), stage)}
		inTrash = false
		err = renameNoReplace(t.dir, name, t.dir, stage)
	}
	if err != nil {
		return "", nil, err
	}
	restore := func(why error) error {
		if err := putBack(at.dir, at.name, t.dir, name); err != nil {
			return fmt.Errorf("%w; could not put it back (%v): it is at %s", why, err, at.path)
		}
		return why
	}
	var st unix.Stat_t
	if err := unix.Fstatat(int(at.dir.Fd()), at.name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return "", nil, fmt.Errorf("moved file vanished: %w", err)
	}
	if keyOf(&st) != t.key || st.Mode&unix.S_IFMT != unix.S_IFREG {
		return "", nil, restore(fmt.Errorf("%w: %s was swapped between the check and the move; put back", errPathChanged, t.path))
	}
	switch {
	case permanent:
		if err := unix.Unlinkat(int(at.dir.Fd()), at.name, 0); err != nil {
			return "", nil, restore(fmt.Errorf("unlink: %w", err))
		}
		return DecisionRemoved, nil, nil
	case inTrash:
		return DecisionTrashed, &dst, nil
	}
	if err := x.copyToTrash(context.WithoutCancel(ctx), t, at, tdir, name, k); err != nil {
		return "", nil, restore(err)
	}
	if err := unix.Unlinkat(int(at.dir.Fd()), at.name, 0); err != nil {
		_ = unix.Unlinkat(int(tdir.Fd()), name, 0)
		return "", nil, restore(fmt.Errorf("unlink after copy: %w", err))
	}
	return DecisionTrashed, &dst, nil
}

// place is a directory entry named relative to an open directory.
type place struct {
	dir  *os.File
	name string
	path string // for messages
}

// syncDir fsyncs the directory dir, which may be held by an O_PATH
// descriptor (those cannot be synced): through a descriptor of its own
// opened on "." relative to it, so no path is walked again.
func syncDir(dir *os.File) error {
	fd, err := unix.Openat(int(dir.Fd()), ".", unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	return unix.Fsync(fd)
}

// trashEntry creates (if need be) and opens trash/<job>/<file>/, each
// level made and opened relative to the one above without following a
// symlink or crossing a mount point: a trash/<job> that is a link, or has
// a directory from elsewhere mounted on it, leads nowhere, and nothing is
// created where it points.
func (x *Executor) trashEntry(jobID, fileID int64) (*os.File, error) {
	return x.openTrashEntry(jobID, fileID, true)
}

// openTrashEntry opens trash/<job>/<file>/ as trashEntry does, creating
// the missing levels only when create is set.
func (x *Executor) openTrashEntry(jobID, fileID int64, create bool) (*os.File, error) {
	dir, _, err := openDirNoSymlinks(x.Trash.Path())
	if err != nil {
		return nil, err
	}
	for _, n := range []string{strconv.FormatInt(jobID, 10), strconv.FormatInt(fileID, 10)} {
		if create {
			if err := unix.Mkdirat(int(dir.Fd()), n, 0o750); err != nil && !errors.Is(err, unix.EEXIST) {
				dir.Close()
				return nil, fmt.Errorf("trash entry: %w", err)
			}
		}
		sub, err := openSubdir(dir, n)
		dir.Close()
		if err != nil {
			return nil, err
		}
		dir = sub
	}
	return dir, nil
}

// openSubdir opens directory name inside dir as an O_PATH descriptor,
// refusing a symlink or a mount point in its place (a bind mount of
// another directory is as much a way out of the trash as a link); the
// descriptor's Name is its path.
func openSubdir(dir *os.File, name string) (*os.File, error) {
	path := filepath.Join(dir.Name(), name)
	fd, err := unix.Openat2(int(dir.Fd()), name, &unix.OpenHow{
		Flags:   unix.O_PATH | unix.O_DIRECTORY | unix.O_CLOEXEC,
		Resolve: unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS | unix.RESOLVE_BENEATH | unix.RESOLVE_NO_XDEV,
	})
	if errors.Is(err, unix.ENOSYS) {
		fd, err = unix.Openat(int(dir.Fd()), name, unix.O_PATH|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		// Without openat2 only another filesystem can be told apart, not
		// a bind mount of the same one.
		var a, b unix.Stat_t
		if err == nil && (unix.Fstat(int(dir.Fd()), &a) != nil || unix.Fstat(fd, &b) != nil || a.Dev != b.Dev) {
			unix.Close(fd)
			err = unix.EXDEV
		}
	}
	if err != nil {
		if errors.Is(err, unix.ELOOP) || errors.Is(err, unix.ENOTDIR) || errors.Is(err, unix.EXDEV) {
			return nil, fmt.Errorf("%w: trash directory %s is not a directory reached without a symlink or a mount point", pathsafe.ErrOutside, path)
		}
		return nil, fmt.Errorf("open trash directory %s: %w", path, err)
	}
	return os.NewFile(uintptr(fd), path), nil
}
