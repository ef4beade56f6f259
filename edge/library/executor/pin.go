package executor

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"
)

// fileKey is a file's identity: the device and inode number. Two paths
// with the same key are the same file (a hard link or a bind mount).
type fileKey struct{ dev, ino uint64 }

func keyOf(st *unix.Stat_t) fileKey { return fileKey{dev: uint64(st.Dev), ino: st.Ino} }

// pinned is a file re-verified for a delete: its recorded path, the
// directory and the file it names opened without following any symlink,
// the identity of what was hashed, and the size and mtime it had then.
type pinned struct {
	path    string
	dir     *os.File // the parent directory, O_PATH
	dirKey  fileKey
	file    *os.File // the file itself, O_RDONLY|O_NOFOLLOW; content was hashed from it
	key     fileKey
	size    int64
	mtimeNS int64
	// ctimeNS moves on every change of content or metadata, also a
	// rewrite that keeps the size and puts the mtime back (which utimes
	// can do, but not for the ctime).
	ctimeNS int64
}

func (p *pinned) close() {
	if p == nil {
		return
	}
	if p.file != nil {
		p.file.Close()
	}
	if p.dir != nil {
		p.dir.Close()
	}
}

// errPathChanged is wrapped by every refusal of checkPath and pin.
var errPathChanged = errors.New("recorded path no longer names the file that was verified")

// checkPath verifies that the recorded path p is still what the scan saw:
// an absolute, clean path inside a library root, whose resolved path and
// whose parent directory's resolved path are themselves (no symlink on the
// way), naming a regular file that is not a symlink. It returns the
// file's lstat.
func (x *Executor) checkPath(p string) (*unix.Stat_t, error) {
	if !filepath.IsAbs(p) || filepath.Clean(p) != p {
		return nil, fmt.Errorf("%w: %q is not a clean absolute path", errPathChanged, p)
	}
	var st unix.Stat_t
	if err := unix.Lstat(p, &st); err != nil {
		return nil, fmt.Errorf("lstat %s: %w", p, err)
	}
	if st.Mode&unix.S_IFMT == unix.S_IFLNK {
		return nil, fmt.Errorf("%w: %s is now a symlink", errPathChanged, p)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG {
		return nil, fmt.Errorf("%w: %s is not a regular file", errPathChanged, p)
	}
	dir := filepath.Dir(p)
	if real, err := filepath.EvalSymlinks(dir); err != nil || real != dir {
		return nil, fmt.Errorf("%w: directory %s resolves to %q (%v)", errPathChanged, dir, real, err)
	}
	real, _, err := x.Roots.Resolve(p)
	if err != nil {
		return nil, err
	}
	if real != p {
		return nil, fmt.Errorf("%w: %s resolves to %s", errPathChanged, p, real)
	}
	return &st, nil
}

// openDirNoSymlinks opens directory dir as an O_PATH descriptor, refusing
// a symlink anywhere on the way (openat2 RESOLVE_NO_SYMLINKS; kernels
// without openat2 fall back to O_NOFOLLOW on the last component, the
// EvalSymlinks checks of checkPath having covered the rest).
func openDirNoSymlinks(dir string) (*os.File, fileKey, error) {
	fd, err := unix.Openat2(unix.AT_FDCWD, dir, &unix.OpenHow{
		Flags:   unix.O_PATH | unix.O_DIRECTORY | unix.O_CLOEXEC,
		Resolve: unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS,
	})
	if errors.Is(err, unix.ENOSYS) {
		fd, err = unix.Open(dir, unix.O_PATH|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	}
	if err != nil {
		if errors.Is(err, unix.ELOOP) || errors.Is(err, unix.ENOTDIR) {
			return nil, fileKey{}, fmt.Errorf("%w: directory %s has a symlink on its path", errPathChanged, dir)
		}
		return nil, fileKey{}, fmt.Errorf("open directory %s: %w", dir, err)
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		unix.Close(fd)
		return nil, fileKey{}, err
	}
	return os.NewFile(uintptr(fd), dir), keyOf(&st), nil
}

// pin checks the recorded path and opens it without following links: its
// parent directory through openDirNoSymlinks, the file relative to that
// descriptor with O_NOFOLLOW. The opened file must be the regular file the
// path names (same device and inode as its lstat).
func (x *Executor) pin(p string) (*pinned, error) {
	st, err := x.checkPath(p)
	if err != nil {
		return nil, err
	}
	dir, dirKey, err := openDirNoSymlinks(filepath.Dir(p))
	if err != nil {
		return nil, err
	}
	pn := &pinned{path: p, dir: dir, dirKey: dirKey}
	// O_NONBLOCK: a fifo swapped in after the lstat must not block the open.
	fd, err := unix.Openat(int(dir.Fd()), filepath.Base(p), unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if err != nil {
		pn.close()
		if errors.Is(err, unix.ELOOP) {
			return nil, fmt.Errorf("%w: %s is now a symlink", errPathChanged, p)
		}
		return nil, fmt.Errorf("open %s: %w", p, err)
	}
	pn.file = os.NewFile(uintptr(fd), p)
	var fst unix.Stat_t
	if err := unix.Fstat(fd, &fst); err != nil {
		pn.close()
		return nil, err
	}
	if fst.Mode&unix.S_IFMT != unix.S_IFREG || keyOf(&fst) != keyOf(st) {
		pn.close()
		return nil, fmt.Errorf("%w: %s was replaced while it was opened", errPathChanged, p)
	}
	pn.key = keyOf(&fst)
	return pn, nil
}

// hash digests the pinned descriptor from its start, and records the size,
// mtime and ctime it had; they must not change while it is read.
func (p *pinned) hash(ctx context.Context, algo string) (string, error) {
	if _, err := p.file.Seek(0, 0); err != nil {
		return "", err
	}
	var before, after unix.Stat_t
	if err := unix.Fstat(int(p.file.Fd()), &before); err != nil {
		return "", err
	}
	digest, err := HashReader(ctx, p.file, algo, nil)
	if err != nil {
		return "", err
	}
	if err := unix.Fstat(int(p.file.Fd()), &after); err != nil {
		return "", err
	}
	if before.Size != after.Size || before.Mtim != after.Mtim || before.Ctim != after.Ctim {
		return "", fmt.Errorf("%s changed while it was hashed", p.path)
	}
	p.size, p.mtimeNS, p.ctimeNS = after.Size, after.Mtim.Nano(), after.Ctim.Nano()
	return digest, nil
}

// unchanged re-checks, right before an act, that the recorded path still
// passes checkPath and names the very file that was hashed (same device,
// inode, size, mtime and ctime) in the directory that was opened.
func (x *Executor) unchanged(p *pinned) error {
	st, err := x.checkPath(p.path)
	if err != nil {
		return err
	}
	if keyOf(st) != p.key {
		return fmt.Errorf("%w: %s was swapped for another file after it was verified", errPathChanged, p.path)
	}
	if st.Size != p.size || st.Mtim.Nano() != p.mtimeNS || st.Ctim.Nano() != p.ctimeNS {
		return fmt.Errorf("%w: %s was modified after it was verified", errPathChanged, p.path)
	}
	var dst unix.Stat_t
	if err := unix.Lstat(filepath.Dir(p.path), &dst); err != nil {
		return err
	}
	if keyOf(&dst) != p.dirKey {
		return fmt.Errorf("%w: directory of %s was replaced after it was verified", errPathChanged, p.path)
	}
	return nil
}
