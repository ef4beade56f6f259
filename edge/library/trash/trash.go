package trash

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"golang.org/x/sys/unix"
)

// LockName is the lock file in the trash directory.
const LockName = ".delete.lock"

// Lock takes the exclusive lock (flock on <dir>/.delete.lock) that every
// delete holds for its last check and its move into the trash, and the
// cleaner for each job directory it empties. It is shared by every
// executor and process using the same trash. It waits as long as the lock
// is held elsewhere; see LockContext.
func Lock(dir string) (unlock func(), err error) { return LockContext(context.Background(), dir) }

// LockContext is Lock that stops waiting when ctx ends: a delete whose
// lease is lost or whose daemon stops must not sit behind another holder
// (a copy to a trash on another filesystem, a sweep) and then act.
func LockContext(ctx context.Context, dir string) (unlock func(), err error) {
	fd, err := unix.Open(filepath.Join(dir, LockName), unix.O_RDWR|unix.O_CREAT|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o640)
	if err != nil {
		return nil, fmt.Errorf("trash lock: %w", err)
	}
	// A blocked flock cannot be woken by a context, and a goroutine left
	// blocked in one would outlive its caller; so the wait polls. The lock
	// is held for one delete's last check and move or one sweep, rare
	// enough that a try every 20 ms costs nothing.
	wait := time.Millisecond
	for {
		err := unix.Flock(fd, unix.LOCK_EX|unix.LOCK_NB)
		switch {
		case err == nil:
			return func() { unix.Close(fd) }, nil
		case !errors.Is(err, unix.EWOULDBLOCK) && !errors.Is(err, unix.EINTR):
			unix.Close(fd)
			return nil, fmt.Errorf("trash lock: %w", err)
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			unix.Close(fd)
			return nil, fmt.Errorf("trash lock: %w", ctx.Err())
		case <-t.C:
		}
		wait = min(2*wait, 20*time.Millisecond)
	}
}

// Cleaner removes trash entries (trash/<job>/<file>/, where a delete puts
// each file) older than Retention. An entry's age is its directory's
// mtime: the directory is created, and the file renamed or copied into it,
// when the file is trashed (a rename keeps the file's own mtime, so that
// cannot be used). Only names made of digits are entries; anything else
// in the trash (the lock file, an operator's notes) is left alone.
type Cleaner struct {
	Dir       string        // the trash directory's real path
	Retention time.Duration // 0 keeps everything
	Interval  time.Duration // between sweeps; default 1h
	Log       *slog.Logger
	Now       func() time.Time

	// beforeOpen, when set, is called with an entry's path right before
	// the cleaner opens it. Tests use it to swap the entry at that moment.
	beforeOpen func(path string)
}

// Run sweeps at start and then every Interval until ctx ends.
func (c *Cleaner) Run(ctx context.Context) error {
	if c.Retention <= 0 {
		return nil
	}
	every := c.Interval
	if every <= 0 {
		every = time.Hour
	}
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		if n, err := c.Sweep(ctx); err != nil {
			c.log().Warn("trash cleanup", "err", err, "removed", n)
		} else if n > 0 {
			c.log().Info("trash cleanup", "removed", n, "retention", c.Retention)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

func (c *Cleaner) log() *slog.Logger {
	if c.Log == nil {
		return slog.Default()
	}
	return c.Log
}

// Sweep removes every entry older than Retention and then every job
// directory left empty, and returns how many entries it removed.
func (c *Cleaner) Sweep(ctx context.Context) (int, error) {
	if c.Retention <= 0 {
		return 0, nil
	}
	now := time.Now
	if c.Now != nil {
		now = c.Now
	}
	cutoff := now().Add(-c.Retention)
	root, err := openDir(unix.AT_FDCWD, c.Dir, true)
	if err != nil {
		return 0, fmt.Errorf("trash directory %s: %w", c.Dir, err)
	}
	defer root.Close()
	jobs, err := names(root)
	if err != nil {
		return 0, err
	}
	removed := 0
	var errs []error
	for _, job := range jobs {
		if ctx.Err() != nil {
			return removed, ctx.Err()
		}
		if !digits(job) {
			continue
		}
		n, err := c.sweepJob(root, job, cutoff)
		removed += n
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", filepath.Join(c.Dir, job), err))
		}
	}
	return removed, errors.Join(errs...)
}

// sweepJob empties trash/<job> of old entries under the trash lock, and
// removes the job directory once it is empty.
func (c *Cleaner) sweepJob(root *os.File, job string, cutoff time.Time) (int, error) {
	unlock, err := Lock(c.Dir)
	if err != nil {
		return 0, err
	}
	defer unlock()
	var st unix.Stat_t
	if err := unix.Fstatat(int(root.Fd()), job, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return 0, ignoreGone(err)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFDIR {
		// Not a directory a delete made (a symlink, a stray file): the name
		// itself goes once it is old, never what it points to.
		if mtime(&st).Before(cutoff) {
			return 1, ignoreGone(unix.Unlinkat(int(root.Fd()), job, 0))
		}
		return 0, nil
	}
	if c.beforeOpen != nil {
		c.beforeOpen(filepath.Join(c.Dir, job))
	}
	jd, err := openDir(int(root.Fd()), job, false)
	if err != nil {
		return 0, err
	}
	defer jd.Close()
	entries, err := names(jd)
	if err != nil {
		return 0, err
	}
	removed := 0
	for _, e := range entries {
		if !digits(e) {
			continue
		}
		var est unix.Stat_t
		if err := unix.Fstatat(int(jd.Fd()), e, &est, unix.AT_SYMLINK_NOFOLLOW); err != nil {
			if ignoreGone(err) != nil {
				return removed, err
			}
			continue
		}
		if !mtime(&est).Before(cutoff) {
			continue
		}
		if c.beforeOpen != nil {
			c.beforeOpen(filepath.Join(c.Dir, job, e))
		}
		if err := removeAt(jd, e); err != nil {
			return removed, err
		}
		removed++
	}
	if left, err := names(jd); err == nil && len(left) == 0 {
		if err := unix.Unlinkat(int(root.Fd()), job, unix.AT_REMOVEDIR); err != nil && !errors.Is(err, unix.ENOTEMPTY) {
			return removed, ignoreGone(err)
		}
	}
	return removed, nil
}

// removeAt removes name inside dir: a non-directory (a file, a symlink)
// is unlinked; a directory is opened relative to dir without following a
// link, emptied the same way, then removed. Nothing is reached except
// through dir.
func removeAt(dir *os.File, name string) error {
	err := unix.Unlinkat(int(dir.Fd()), name, 0)
	if err == nil || errors.Is(err, unix.ENOENT) {
		return nil
	}
	if !errors.Is(err, unix.EISDIR) && !errors.Is(err, unix.EPERM) {
		return err
	}
	sub, err := openDir(int(dir.Fd()), name, false)
	if err != nil {
		return err
	}
	children, err := names(sub)
	if err == nil {
		for _, ch := range children {
			if err = removeAt(sub, ch); err != nil {
				break
			}
		}
	}
	sub.Close()
	if err != nil {
		return err
	}
	return ignoreGone(unix.Unlinkat(int(dir.Fd()), name, unix.AT_REMOVEDIR))
}

// openDir opens a directory for reading relative to dirfd with O_NOFOLLOW
// (a symlink in its place fails with ELOOP or ENOTDIR); whole, it also
// refuses a symlink anywhere on the path (openat2 RESOLVE_NO_SYMLINKS).
func openDir(dirfd int, name string, whole bool) (*os.File, error) {
	flags := unix.O_RDONLY | unix.O_DIRECTORY | unix.O_NOFOLLOW | unix.O_CLOEXEC
	var fd int
	var err error
	if whole {
		fd, err = unix.Openat2(dirfd, name, &unix.OpenHow{Flags: uint64(flags), Resolve: unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS})
		if errors.Is(err, unix.ENOSYS) {
			fd, err = unix.Openat(dirfd, name, flags, 0)
		}
	} else {
		fd, err = unix.Openat(dirfd, name, flags, 0)
	}
	if err != nil {
		if errors.Is(err, unix.ELOOP) || errors.Is(err, unix.ENOTDIR) {
			return nil, fmt.Errorf("%s is not a directory reached without a symlink: %w", name, err)
		}
		return nil, err
	}
	return os.NewFile(uintptr(fd), name), nil
}

// names lists a directory opened by openDir.
func names(d *os.File) ([]string, error) {
	if _, err := d.Seek(0, io.SeekStart); err != nil {
		return nil, err
	}
	n, err := d.Readdirnames(-1)
	if err != nil && !errors.Is(err, io.EOF) {
		return nil, err
	}
	return n, nil
}

func digits(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}

func mtime(st *unix.Stat_t) time.Time { return time.Unix(st.Mtim.Unix()) }

func ignoreGone(err error) error {
	if errors.Is(err, unix.ENOENT) {
		return nil
	}
	return err
}
