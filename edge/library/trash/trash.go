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
	return flockContext(ctx, fd, "trash lock")
}

// FlockContext takes an exclusive flock on fd, waiting as LockContext
// does; what names it in errors. fd is the caller's until the lock is
// taken: on failure it is closed, and the returned unlock closes it.
// Deletes hold one on each library root that holds their files, besides
// the trash lock: processes that share a library but not a trash
// directory then still take turns at their last checks and moves. A
// filesystem that has no flock answers ENOLCK or EOPNOTSUPP, wrapped.
func FlockContext(ctx context.Context, fd int, what string) (unlock func(), err error) {
	return flockContext(ctx, fd, what)
}

// flockContext takes an exclusive flock on fd, which it owns: closed on
// failure, and by the unlock it returns.
func flockContext(ctx context.Context, fd int, what string) (unlock func(), err error) {
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
			return nil, fmt.Errorf("%s: %w", what, err)
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			unix.Close(fd)
			return nil, fmt.Errorf("%s: %w", what, ctx.Err())
		case <-t.C:
		}
		wait = min(2*wait, 20*time.Millisecond)
	}
}

// Cleaner removes trash entries (trash/<job>/<file>/, where a delete puts
// each file) once they have been in the trash longer than Retention. Only
// names made of digits are entries; anything else in the trash (the lock
// file, an operator's notes) is left alone.
//
// An entry's age is taken from the later of its directory's mtime (set
// when the file is trashed) and the moment the cleaner first saw the entry
// with a synchronized clock, which it records in a marker of its own next
// to the entry (markName). The mtime alone is whatever the clock said at
// trash time: on a machine that boots with its clock behind (no RTC
// battery, before NTP) it can be years in the past, and the first sweep
// after the clock is corrected would empty the entry at once. While the
// clock is not synchronized the cleaner neither removes nor marks
// anything.
type Cleaner struct {
	Dir       string        // the trash directory's real path
	Retention time.Duration // 0 keeps everything
	Interval  time.Duration // between sweeps; default 1h
	Log       *slog.Logger
	// Now reads the wall clock; nil is time.Now.
	Now func() time.Time
	// Boot reads the boot clock the wall clock's forward steps are told
	// from time passing by. Nil reads the kernel's (KernelBootClock) when
	// Now is nil too; a Now of the caller's own cannot be compared with
	// the kernel's boot clock, and then no step is looked for.
	Boot func() (BootClock, error)

	// Synced reports whether the wall clock can be trusted; nil asks the
	// kernel (KernelClockSynchronized).
	Synced func() bool
	// TrustClock treats the clock as synchronized without asking: for a
	// machine whose clock is right without an NTP daemon (a battery-backed
	// RTC). Without it such a machine never has its trash emptied.
	TrustClock bool

	// beforeOpen, when set, is called with an entry's path right before
	// the cleaner opens it. Tests use it to swap the entry at that moment.
	beforeOpen func(path string)
}

// ErrClockUnsynchronized is returned by a sweep that removed nothing
// because the system clock is not synchronized.
var ErrClockUnsynchronized = errors.New("system clock not synchronized; the trash is not emptied until it is")

// Run sweeps at start and then every Interval until ctx ends. A clock that
// is not synchronized is logged once when the sweeps start waiting for it,
// and once more when they resume.
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
	waiting := false
	for {
		n, err := c.Sweep(ctx)
		switch {
		case ctx.Err() != nil:
			return nil
		case errors.Is(err, ErrClockSetBack):
			if !waiting {
				c.log().Warn("trash cleanup waits for the system clock to pass the time of an earlier sweep: nothing is removed until then", "err", err)
			}
			waiting = true
		case errors.Is(err, ErrClockUnsynchronized):
			if !waiting {
				c.log().Warn("trash cleanup waits for the system clock to be synchronized (NTP): nothing is removed until then, so a clock set wrong at boot cannot cut the retention short",
					"retention", c.Retention)
			}
			waiting = true
		case err != nil:
			c.log().Warn("trash cleanup", "err", err, "removed", n)
		default:
			if waiting {
				c.log().Info("system clock synchronized; trash cleanup resumes")
				waiting = false
			}
			if n > 0 {
				c.log().Info("trash cleanup", "removed", n, "retention", c.Retention)
			}
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

func (c *Cleaner) synced() bool {
	switch {
	case c.TrustClock:
		return true
	case c.Synced != nil:
		return c.Synced()
	}
	return KernelClockSynchronized()
}

// Sweep removes every entry older than Retention and then every job
// directory left empty, and returns how many entries it removed. It
// removes nothing, and returns ErrClockUnsynchronized, while the clock is
// not synchronized, or ErrClockSetBack (which wraps it) while the clock
// reads earlier than the latest sweep's did. A forward step of the clock
// since the latest sweep in the same boot is first taken out of every
// entry's age (passClock).
func (c *Cleaner) Sweep(ctx context.Context) (int, error) {
	if c.Retention <= 0 {
		return 0, nil
	}
	if !c.synced() {
		return 0, ErrClockUnsynchronized
	}
	root, err := openDir(unix.AT_FDCWD, c.Dir, true)
	if err != nil {
		return 0, fmt.Errorf("trash directory %s: %w", c.Dir, err)
	}
	defer root.Close()
	now, err := c.passClock(root)
	if err != nil {
		return 0, err
	}
	a := ager{now: now, retention: c.Retention}
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
		n, err := c.sweepJob(root, job, a)
		removed += n
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", filepath.Join(c.Dir, job), err))
		}
	}
	if err := c.dropStaleMarks(root); err != nil {
		errs = append(errs, fmt.Errorf("%s: %w", c.Dir, err))
	}
	return removed, errors.Join(errs...)
}

// dropStaleMarks removes, under the trash lock, the trash directory's
// markers whose entry is gone or is a job directory (whose own entries
// carry the markers).
func (c *Cleaner) dropStaleMarks(root *os.File) error {
	unlock, err := Lock(c.Dir)
	if err != nil {
		return err
	}
	defer unlock()
	left, err := names(root)
	if err != nil {
		return err
	}
	return dropMarks(root, left, func(st *unix.Stat_t) bool { return st.Mode&unix.S_IFMT == unix.S_IFDIR })
}

// sweepJob empties trash/<job> of old entries under the trash lock, and
// removes the job directory once it is empty.
func (c *Cleaner) sweepJob(root *os.File, job string, a ager) (int, error) {
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
		old, err := a.expired(root, job, &st)
		if err != nil || !old {
			return 0, err
		}
		if err := ignoreGone(unix.Unlinkat(int(root.Fd()), job, 0)); err != nil {
			return 0, err
		}
		return 1, dropMark(root, job)
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
		old, err := a.expired(jd, e, &est)
		if err != nil {
			return removed, err
		}
		if !old {
			continue
		}
		if c.beforeOpen != nil {
			c.beforeOpen(filepath.Join(c.Dir, job, e))
		}
		if err := removeAt(jd, e); err != nil {
			return removed, err
		}
		removed++
		if err := dropMark(jd, e); err != nil {
			return removed, err
		}
	}
	left, err := names(jd)
	if err != nil {
		return removed, err
	}
	if err := dropMarks(jd, left, nil); err != nil {
		return removed, err
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
// (a symlink in its place fails with ELOOP or ENOTDIR). Whole, it also
// refuses a symlink anywhere on the path (openat2 RESOLVE_NO_SYMLINKS);
// otherwise name is one entry below dirfd, which must not be a mount
// point (RESOLVE_NO_XDEV): a filesystem mounted, or a directory
// bind-mounted, inside the trash is not the trash's to empty.
func openDir(dirfd int, name string, whole bool) (*os.File, error) {
	flags := unix.O_RDONLY | unix.O_DIRECTORY | unix.O_NOFOLLOW | unix.O_CLOEXEC
	resolve := uint64(unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS)
	if !whole {
		resolve |= unix.RESOLVE_NO_XDEV
	}
	fd, err := unix.Openat2(dirfd, name, &unix.OpenHow{Flags: uint64(flags), Resolve: resolve})
	if errors.Is(err, unix.ENOSYS) {
		fd, err = unix.Openat(dirfd, name, flags, 0)
		if err == nil && !whole && !sameDevice(dirfd, fd) {
			unix.Close(fd)
			err = unix.EXDEV
		}
	}
	if err != nil {
		switch {
		case errors.Is(err, unix.ELOOP) || errors.Is(err, unix.ENOTDIR):
			return nil, fmt.Errorf("%s is not a directory reached without a symlink: %w", name, err)
		case errors.Is(err, unix.EXDEV):
			return nil, fmt.Errorf("%s is a mount point, not crossed: %w", name, err)
		}
		return nil, err
	}
	return os.NewFile(uintptr(fd), name), nil
}

// sameDevice reports whether two descriptors are on one device. Kernels
// without openat2 get this check instead of RESOLVE_NO_XDEV: it catches
// another filesystem mounted inside the trash, not a bind mount of the
// same one.
func sameDevice(a, b int) bool {
	var sa, sb unix.Stat_t
	return unix.Fstat(a, &sa) == nil && unix.Fstat(b, &sb) == nil && sa.Dev == sb.Dev
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
